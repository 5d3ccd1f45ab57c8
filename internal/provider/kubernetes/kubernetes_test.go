//go:build kubernetes

package kubernetes_test

// These tests run against a real control plane (kubetest: $KUBECONFIG, or
// the project's test cluster of scripts/kube.sh, whose nodes are kwok's).
// Under kwok a pod's commands run on this machine, in the test's work
// folder: the tests check the provider's behaviour through the API, not
// the isolation of a container (docs/kubernetes.md).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/kubernetes/kubetest"
	"github.com/tetherhq/tether/provider"
)

var (
	kubeconfig, skipReason string
	// namespace is this run's own; workDir the sandboxes' working
	// directory, which under kwok is a folder of this machine.
	namespace, workDir string
	client             k8s.Interface
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	kubeconfig, skipReason = kubetest.Kubeconfig()
	if kubeconfig == "" {
		return m.Run()
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err == nil {
		client, err = k8s.NewForConfig(rc)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes test:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	namespace = "tether-test-" + token()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes test: create namespace:", err)
		return 1
	}
	defer func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
	}()
	// Pods need the namespace's default service account, which the
	// controller manager makes.
	for {
		if _, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "kubernetes test: no default service account in", namespace)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	if workDir, err = os.MkdirTemp("", "tether-kube-work-"); err != nil {
		fmt.Fprintln(os.Stderr, "kubernetes test:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(workDir) }()
	return m.Run()
}

func token() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newProvider is a provider of this run's namespace with an installation
// of its own.
func newProvider(t *testing.T, mutate ...func(*kubernetes.Config)) *kubernetes.Provider {
	t.Helper()
	if kubeconfig == "" {
		t.Skip(skipReason)
	}
	cfg := kubernetes.Config{Kubeconfig: kubeconfig, Namespace: namespace, Installation: "test-" + token(), WorkDir: workDir}
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := kubernetes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox and destroys it when the test ends.
func create(t *testing.T, p *kubernetes.Provider, spec provider.CreateSpec) (provider.CreateSpec, provider.Resource) {
	t.Helper()
	if spec.SandboxID == "" {
		spec.SandboxID = provider.NewSandboxID()
	}
	if spec.Tenant == "" {
		spec.Tenant = "acme"
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Destroy(ctx, spec.SandboxID); err != nil {
			t.Errorf("cleanup: destroy %s: %v", spec.SandboxID, err)
		}
	})
	res, err := p.Create(ctxFor(t, time.Minute), spec)
	if err != nil {
		t.Fatalf("create %s: %v", spec.SandboxID, err)
	}
	return spec, res
}

func getPod(t *testing.T, id string) (*corev1.Pod, bool) {
	t.Helper()
	pod, err := client.CoreV1().Pods(namespace).Get(t.Context(), kubernetes.PodName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod, true
}

func exec(t *testing.T, p *kubernetes.Provider, id string, req provider.ExecRequest) provider.ExecResult {
	t.Helper()
	res, err := p.Exec(ctxFor(t, time.Minute), id, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Command, err)
	}
	return res
}

// TestCreateExecDestroy: a created sandbox is a Ready pod, hardened as
// configured, that runs commands with their output, exit code, explicit
// environment and working directory, times out, and is gone after
// Destroy with its NetworkPolicy.
func TestCreateExecDestroy(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	end := time.Now().Add(time.Hour)
	spec, res := create(t, p, provider.CreateSpec{Env: map[string]string{"SANDBOX_VAR": "from-create"}, EndBy: end})
	if res.SandboxID != spec.SandboxID || res.Defunct || res.WorkDir != workDir || res.ProviderID != "pod/"+namespace+"/"+kubernetes.PodName(spec.SandboxID) {
		t.Fatalf("resource %+v", res)
	}
	pod, ok := getPod(t, spec.SandboxID)
	if !ok {
		t.Fatal("no pod after create")
	}
	checkHardened(t, pod, end)

	if r := exec(t, p, spec.SandboxID, provider.ExecRequest{Command: `printf 'OPEN_SANDBOX_ALIVE\n'`}); r.Output != "OPEN_SANDBOX_ALIVE\n" || r.ExitCode != 0 || r.TimedOut {
		t.Errorf("exec printf: %+v", r)
	}
	if r := exec(t, p, spec.SandboxID, provider.ExecRequest{Command: `echo out; echo err >&2; exit 7`}); r.ExitCode != 7 || !strings.Contains(r.Output, "out\n") || !strings.Contains(r.Output, "err\n") {
		t.Errorf("exec exit 7: %+v", r)
	}
	r := exec(t, p, spec.SandboxID, provider.ExecRequest{Command: `env | sort; pwd`, Env: map[string]string{"REQ_VAR": "from-exec"}})
	want := []string{"HOME=" + workDir, "LANG=C.UTF-8", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PWD=" + workDir, "REQ_VAR=from-exec", "SANDBOX_VAR=from-create", "TERM=dumb"}
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(r.Output), "\n") {
		if !strings.HasPrefix(line, "/") && !strings.HasPrefix(line, "SHLVL=") && !strings.HasPrefix(line, "_=") && !strings.HasPrefix(line, "OLDPWD=") {
			got = append(got, line)
		}
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || !strings.HasSuffix(strings.TrimSpace(r.Output), "\n"+workDir) {
		t.Errorf("exec environment and working directory:\n%s\nwant exactly %q (and pwd %s)", r.Output, want, workDir)
	}
	sub := filepath.Join(workDir, "sub-"+token())
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := exec(t, p, spec.SandboxID, provider.ExecRequest{Command: `pwd`, WorkDir: sub}); strings.TrimSpace(r.Output) != sub {
		t.Errorf("exec in %s ran in %q", sub, r.Output)
	}

	checkTimeout(t, p, spec.SandboxID)
	checkTruncation(t, p, spec.SandboxID)

	if err := p.Destroy(ctxFor(t, time.Minute), spec.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, ok := getPod(t, spec.SandboxID); ok {
		t.Error("pod still there after Destroy returned")
	}
	if _, err := client.NetworkingV1().NetworkPolicies(namespace).Get(t.Context(), kubernetes.PodName(spec.SandboxID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("network policy after Destroy: %v", err)
	}
	if err := p.Destroy(ctxFor(t, time.Minute), spec.SandboxID); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := p.Exec(t.Context(), spec.SandboxID, provider.ExecRequest{Command: "true"}); provider.ErrorCode(err) != provider.CodeProviderUnavailable {
		t.Errorf("exec after destroy: %v, want PROVIDER_UNAVAILABLE", err)
	}
}

// checkHardened checks the pod's spec against the provider's defaults.
func checkHardened(t *testing.T, pod *corev1.Pod, end time.Time) {
	t.Helper()
	s := pod.Spec
	c := s.Containers[0]
	sc := c.SecurityContext
	switch {
	case s.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("restartPolicy %s", s.RestartPolicy)
	case s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken:
		t.Error("service account token mounted")
	case s.EnableServiceLinks == nil || *s.EnableServiceLinks:
		t.Error("service links enabled")
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container security context %+v", sc)
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("capabilities %+v", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v", sc.SeccompProfile)
	case c.Resources.Limits.Memory().Value() != 512<<20 || c.Resources.Requests.Cpu().MilliValue() != 1000:
		t.Errorf("resources %+v", c.Resources)
	case s.ActiveDeadlineSeconds == nil:
		t.Error("no activeDeadlineSeconds")
	}
	if s.ActiveDeadlineSeconds != nil {
		got := pod.CreationTimestamp.Add(time.Duration(*s.ActiveDeadlineSeconds) * time.Second)
		if d := got.Sub(end); d < 30*time.Second || d > 2*time.Minute {
			t.Errorf("activeDeadlineSeconds ends the pod at %v, want about a minute past the sandbox's end %v", got, end)
		}
	}
	if pod.Labels[kubernetes.LabelTenant] != "acme" || pod.Annotations[kubernetes.AnnotationTenant] != "acme" || pod.Labels[kubernetes.LabelManagedBy] != "tether" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
}

// checkTimeout: a command past its timeout is TimedOut, promptly, and
// killed with what it started (kwok runs it on this machine, so /proc
// shows whether it still runs).
func checkTimeout(t *testing.T, p *kubernetes.Provider, id string) {
	t.Helper()
	marker := fmt.Sprintf("%d.%s", 40+time.Now().Nanosecond()%50, "123")
	start := time.Now()
	r := exec(t, p, id, provider.ExecRequest{Command: "echo before; sleep " + marker + " & sleep " + marker, Timeout: time.Second})
	took := time.Since(start)
	if !r.TimedOut || r.ExitCode != 124 || !strings.Contains(r.Output, "before") {
		t.Errorf("exec past its timeout: %+v", r)
	}
	if took > 8*time.Second {
		t.Errorf("a 1s timeout took %v", took)
	}
	if left := processesWith("sleep " + marker); len(left) > 0 {
		t.Errorf("processes of a timed-out exec still run: %v", left)
	}
	// A command that exits 124 itself, at once, did not time out.
	if r := exec(t, p, id, provider.ExecRequest{Command: "exit 124", Timeout: 10 * time.Second}); r.TimedOut || r.ExitCode != 124 {
		t.Errorf("exit 124: %+v", r)
	}
	// A background process holding the output does not hold the exec.
	start = time.Now()
	if r := exec(t, p, id, provider.ExecRequest{Command: "sleep " + marker + " & echo started", Timeout: 20 * time.Second}); r.TimedOut || r.ExitCode != 0 || r.Output != "started\n" {
		t.Errorf("exec leaving a background process: %+v", r)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("an exec leaving a background process on its output took %v", took)
	}
	checkDetachedSurvives(t, p, id)
}

// checkDetachedSurvives: a background process that does not hold the
// exec's output (its stdout and stderr are /dev/null) outlives the exec:
// only holders of the exec's own pipes are killed, never every process
// whose stderr is /dev/null (kwok runs it on this machine, so /proc
// shows whether it still runs).
func checkDetachedSurvives(t *testing.T, p *kubernetes.Provider, id string) {
	t.Helper()
	marker := fmt.Sprintf("%d.%s", 100+time.Now().Nanosecond()%50, "321")
	pidFile := ".detached-" + token()
	r := exec(t, p, id, provider.ExecRequest{Command: "sleep " + marker + " </dev/null >/dev/null 2>&1 & echo $! >" + pidFile + "; echo started"})
	if r.ExitCode != 0 || r.Output != "started\n" {
		t.Fatalf("exec leaving a detached process: %+v", r)
	}
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), id, provider.ExecRequest{Command: "kill $(cat " + pidFile + ") 2>/dev/null; rm -f " + pidFile})
	})
	// Its state, from /proc: a killed process nobody reaps is a zombie
	// ("Z"), which kill -0 would still find.
	state := `read -r l </proc/$(cat ` + pidFile + `)/stat && r=${l##*")"} && set -- $r && echo "$1"`
	if r := exec(t, p, id, provider.ExecRequest{Command: state}); r.Output != "S\n" && r.Output != "R\n" {
		t.Errorf("a detached process that does not hold the exec's output was killed with it: state %+v", r)
	}
}

// processesWith lists the processes of this machine whose command line
// contains s.
func processesWith(s string) []string {
	var out []string
	for range 50 {
		out = nil
		matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
				out = append(out, m)
			}
		}
		if len(out) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out
}

// checkTruncation: output past MaxOutput keeps its head and tail with the
// local provider's marker, within the limit; streamed output arrives in
// chunks with the same cut.
func checkTruncation(t *testing.T, p *kubernetes.Provider, id string) {
	t.Helper()
	const limit = 1000
	r := exec(t, p, id, provider.ExecRequest{Command: `i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`, MaxOutput: limit})
	if !r.Truncated || len(r.Output) > limit || !strings.HasPrefix(r.Output, "line 0\n") || !strings.HasSuffix(r.Output, "line 499\n") ||
		!strings.Contains(r.Output, "\n[tether: ") || !strings.Contains(r.Output, " bytes of output omitted]\n") {
		t.Errorf("truncated output (%d bytes, truncated %v):\n%s", len(r.Output), r.Truncated, r.Output)
	}
	var streams = map[string]string{}
	res, err := p.ExecStream(ctxFor(t, time.Minute), id, provider.ExecRequest{Command: `echo one; echo two >&2; exit 3`}, func(stream string, chunk []byte) error {
		streams[stream] += string(chunk)
		return nil
	})
	if err != nil || res.ExitCode != 3 || streams[provider.Stdout] != "one\n" || streams[provider.Stderr] != "two\n" || res.Output != "" {
		t.Errorf("exec stream: %+v %v %q", res, err, streams)
	}
	boom := errors.New("client gone")
	marker := fmt.Sprintf("%d.%s", 40+time.Now().Nanosecond()%50, "321")
	start := time.Now()
	_, err = p.ExecStream(ctxFor(t, time.Minute), id, provider.ExecRequest{Command: "echo hi; sleep " + marker, Timeout: time.Minute}, func(string, []byte) error { return boom })
	if !errors.Is(err, boom) || time.Since(start) > 15*time.Second {
		t.Errorf("exec stream whose emit fails: %v after %v", err, time.Since(start))
	}
	if left := processesWith("sleep " + marker); len(left) > 0 {
		t.Errorf("the command of a stream whose client went away still runs: %v", left)
	}
}

// TestCreateIsIdempotent: a second create of a sandbox returns the same
// pod and makes no other.
func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	spec, first := create(t, p, provider.CreateSpec{Setup: "echo setup >> setup-" + token()})
	pod, _ := getPod(t, spec.SandboxID)
	again, err := p.Create(ctxFor(t, time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := getPod(t, spec.SandboxID)
	if again.ProviderID != first.ProviderID || !again.CreatedAt.Equal(first.CreatedAt) || after.UID != pod.UID {
		t.Errorf("second create: %+v (pod %s), first %+v (pod %s)", again, after.UID, first, pod.UID)
	}
	if pod.Annotations["tetherhq.dev/set-up"] != "" || after.Annotations["tetherhq.dev/set-up"] != "true" {
		// The first read raced the annotation: fine if the second has it.
		if after.Annotations["tetherhq.dev/set-up"] != "true" {
			t.Errorf("a set-up pod is not marked so: %v", after.Annotations)
		}
	}
	all, err := p.List(ctxFor(t, time.Minute))
	if err != nil || len(all) != 1 {
		t.Errorf("List after two creates: %v %v", all, err)
	}
}

// TestListPagesAndLeavesOthersAlone: List finds every pod of its
// installation across pages, none of another installation's, and Destroy
// of a sandbox whose pod is another installation's leaves it be.
func TestListPagesAndLeavesOthersAlone(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(c *kubernetes.Config) { c.PageSize = 2 })
	other := newProvider(t)
	want := map[string]bool{}
	for range 5 {
		spec, _ := create(t, p, provider.CreateSpec{})
		want[spec.SandboxID] = true
	}
	foreign, _ := create(t, other, provider.CreateSpec{})
	all, err := p.List(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range all {
		got[r.SandboxID] = true
		if r.Defunct {
			t.Errorf("running sandbox listed defunct: %+v", r)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("List over pages of 2: %v, want %v", got, want)
	}
	if err := p.Destroy(ctxFor(t, time.Minute), foreign.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, ok := getPod(t, foreign.SandboxID); !ok {
		t.Error("Destroy removed another installation's pod")
	}
	if _, err := p.Create(ctxFor(t, 10*time.Second), provider.CreateSpec{SandboxID: foreign.SandboxID, Tenant: "acme"}); err == nil || provider.IsRetryable(err) {
		t.Errorf("create over another installation's pod: %v, want a lasting failure", err)
	}
}

// TestPodLostBehindTheBack: a pod that fails (evicted) or is deleted with
// the API is reported by Watch with the pod's reason, listed defunct
// while it lingers, and gone for Lookup.
func TestPodLostBehindTheBack(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	ctx := ctxFor(t, 2*time.Minute)
	wctx, stop := context.WithCancel(ctx)
	events := p.Watch(wctx)
	evicted, _ := create(t, p, provider.CreateSpec{})
	deleted, _ := create(t, p, provider.CreateSpec{})

	pod, _ := getPod(t, evicted.SandboxID)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason, pod.Status.Message = "Evicted", "The node was low on resource: memory."
	if _, err := client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods(namespace).Delete(ctx, kubernetes.PodName(deleted.SandboxID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for len(reasons) < 2 || !strings.Contains(reasons[deleted.SandboxID], "was deleted") {
		select {
		case ev := <-events:
			if ev.SandboxID == evicted.SandboxID || ev.SandboxID == deleted.SandboxID {
				if !ev.Defunct {
					t.Errorf("watch event not defunct: %+v", ev)
				}
				reasons[ev.SandboxID] = ev.Reason
			}
		case <-ctx.Done():
			t.Fatalf("watch reported only %v", reasons)
		}
	}
	if r := reasons[evicted.SandboxID]; !strings.Contains(r, "Evicted: The node was low on resource: memory.") {
		t.Errorf("evicted pod's reason %q", r)
	}
	all, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.SandboxID == evicted.SandboxID && (!r.Defunct || !strings.Contains(r.Reason, "Evicted")) {
			t.Errorf("evicted pod listed as %+v", r)
		}
		if r.SandboxID == deleted.SandboxID && (!r.Defunct || !strings.HasPrefix(r.ProviderID, "networkpolicy/")) {
			t.Errorf("deleted pod listed as %+v, want only its network policy, defunct", r)
		}
	}
	if _, found, err := p.Lookup(ctx, deleted.SandboxID); found || err != nil {
		t.Errorf("Lookup of the deleted pod: found %v, %v", found, err)
	}
	// Create over the evicted remains makes a new pod.
	if _, err := p.Create(ctx, evicted); err != nil {
		t.Fatal(err)
	}
	if now, _ := getPod(t, evicted.SandboxID); now.UID == pod.UID || now.Status.Phase != corev1.PodRunning {
		t.Errorf("create over an evicted pod kept it: %s %s", now.UID, now.Status.Phase)
	}
	stop()
	for range events { // closed once the watch ends
	}
}

// TestCreateFailures: a pod no node can take is a retryable wait; an
// unknown sandbox id is refused.
func TestCreateFailures(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(c *kubernetes.Config) { c.NodeSelector = map[string]string{"tether-test": "nowhere"} })
	id := provider.NewSandboxID()
	t.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
	_, err := p.Create(ctxFor(t, 3*time.Second), provider.CreateSpec{SandboxID: id, Tenant: "acme"})
	if err == nil || !provider.IsRetryable(err) || !strings.Contains(err.Error(), "Unschedulable") {
		t.Errorf("create of an unschedulable pod: %v, want a retryable error naming Unschedulable", err)
	}
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: "nope"}); err == nil {
		t.Error("create of an invalid id succeeded")
	}
}

// TestValidateParams: params within the maxima pass; others are
// INVALID_REQUEST.
func TestValidateParams(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(c *kubernetes.Config) {
		c.Maxima = kubernetes.Resources{CPUMillis: 2000, MemoryMB: 1024, EphemeralStorageMB: 2048}
	})
	for _, ok := range []string{``, `null`, `{}`, `{"cpu_millis":2000,"memory_mb":1024,"ephemeral_storage_mb":2048}`,
		`{"network":"none"}`, `{"network":"allowlist","allow":["0.0.0.0/0:443","10.1.2.3","192.168.0.0/16:80"]}`} {
		if err := p.ValidateParams(json.RawMessage(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{`[]`, `{"cpu_millis":2001}`, `{"memory_mb":1025}`, `{"ephemeral_storage_mb":1}`, `{"unknown":1}`,
		`{"network":"host"}`, `{"allow":["1.2.3.4"]}`, `{"network":"allowlist"}`, `{"network":"allowlist","allow":["example.com"]}`,
		`{"network":"allowlist","allow":["127.0.0.1"]}`, `{"network":"allowlist","allow":["169.254.169.254:80"]}`, `{"network":"allowlist","allow":["1.2.3.4:0"]}`} {
		if err := p.ValidateParams(json.RawMessage(bad)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("%s: %v, want INVALID_REQUEST", bad, err)
		}
	}
}

// TestNetworkPolicy: the allow-list becomes the sandbox's policy, with
// the private and denied ranges cut out of wide entries.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	spec, _ := create(t, p, provider.CreateSpec{Params: json.RawMessage(`{"network":"allowlist","allow":["0.0.0.0/0:443","10.1.2.3"]}`)})
	pol, err := client.NetworkingV1().NetworkPolicies(namespace).Get(t.Context(), kubernetes.PodName(spec.SandboxID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.PolicyTypes) != 2 || len(pol.Spec.Ingress) != 0 || len(pol.Spec.Egress) != 2 {
		t.Fatalf("policy %+v", pol.Spec)
	}
	wide := pol.Spec.Egress[0]
	if b := wide.To[0].IPBlock; b.CIDR != "0.0.0.0/0" || !strings.Contains(strings.Join(b.Except, ","), "10.0.0.0/8") ||
		!strings.Contains(strings.Join(b.Except, ","), "169.254.0.0/16") || wide.Ports[0].Port.IntVal != 443 {
		t.Errorf("wide entry %+v %+v", b, wide.Ports)
	}
	if b := pol.Spec.Egress[1].To[0].IPBlock; b.CIDR != "10.1.2.3/32" || len(b.Except) != 0 {
		t.Errorf("named private address %+v", b)
	}
	plain, _ := create(t, p, provider.CreateSpec{})
	pol, err = client.NetworkingV1().NetworkPolicies(namespace).Get(t.Context(), kubernetes.PodName(plain.SandboxID), metav1.GetOptions{})
	if err != nil || len(pol.Spec.Egress) != 0 || len(pol.Spec.PolicyTypes) != 2 {
		t.Errorf("default policy: %+v %v", pol, err)
	}
}

// TestFiles: files and archives go in and out whole, with the file
// errors' codes.
func TestFiles(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	spec, _ := create(t, p, provider.CreateSpec{})
	id := spec.SandboxID
	ctx := ctxFor(t, 2*time.Minute)
	dir := filepath.Join(workDir, "files-"+token())
	body := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16+7) // past one chunk
	if err := p.WriteFile(ctx, id, dir+"/a/b.bin", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := p.ReadFile(ctx, id, dir+"/a/b.bin", &got, int64(len(body))); err != nil || !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("read back %d bytes of %d: %v", got.Len(), len(body), err)
	}
	for _, c := range []struct {
		name string
		err  error
		code provider.Code
	}{
		{"missing", p.ReadFile(ctx, id, dir+"/nope", io.Discard, 100), provider.CodeFileNotFound},
		{"directory", p.ReadFile(ctx, id, dir+"/a", io.Discard, 100), provider.CodeIsDirectory},
		{"read too large", p.ReadFile(ctx, id, dir+"/a/b.bin", io.Discard, 100), provider.CodePayloadTooLarge},
		{"write too large", p.WriteFile(ctx, id, dir+"/big", strings.NewReader("0123456789"), 5), provider.CodePayloadTooLarge},
		{"write over a directory", p.WriteFile(ctx, id, dir+"/a", strings.NewReader("x"), 5), provider.CodeIsDirectory},
		{"relative", p.WriteFile(ctx, id, "x", strings.NewReader("x"), 5), provider.CodeInvalidPath},
		{"outside", p.WriteFile(ctx, id, "/etc/x", strings.NewReader("x"), 5), provider.CodeInvalidPath},
	} {
		if got := provider.ErrorCode(c.err); got != c.code {
			t.Errorf("%s: %v, want %s", c.name, c.err, c.code)
		}
	}
	if _, err := os.Stat(dir + "/big"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused upload left a file: %v", err)
	}
	if err := os.WriteFile(dir+"/secret", []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 { // root reads anything: kwok runs as this machine's user
		if err := p.ReadFile(ctx, id, dir+"/secret", io.Discard, 100); provider.ErrorCode(err) != provider.CodePermissionDenied {
			t.Errorf("unreadable file: %v", err)
		}
	}

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	for name, data := range map[string]string{"x.txt": "ex", "d/y.txt": "why"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(data))
	}
	_ = tw.Close()
	if err := p.WriteArchive(ctx, id, dir+"/tree", bytes.NewReader(archive.Bytes()), int64(archive.Len())); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := p.ReadArchive(ctx, id, dir+"/tree", &out); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	if files["x.txt"] != "ex" || files["d/y.txt"] != "why" || len(files) != 2 {
		t.Errorf("archive read back: %v", files)
	}
	if err := p.WriteArchive(ctx, id, dir+"/tree", strings.NewReader("not a tar archive, at all, no"), 100); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("broken archive: %v", err)
	}
	if err := p.WriteArchive(ctx, id, dir+"/tree", bytes.NewReader(archive.Bytes()), 10); provider.ErrorCode(err) != provider.CodePayloadTooLarge {
		t.Errorf("archive over the limit: %v", err)
	}
	if err := p.ReadArchive(ctx, id, dir+"/none", io.Discard); provider.ErrorCode(err) != provider.CodeFileNotFound {
		t.Errorf("archive of a missing folder: %v", err)
	}
	leftovers, _ := filepath.Glob(dir + "/tree/.tether-*")
	if len(leftovers) > 0 {
		t.Errorf("staging left behind: %v", leftovers)
	}
}

// TestPodsMeetRestrictedPodSecurity: a sandbox's pod is admitted in a
// namespace where Pod Security admission enforces the restricted profile
// (as deploy/kubernetes's sandbox namespace does).
func TestPodsMeetRestrictedPodSecurity(t *testing.T) {
	t.Parallel()
	if kubeconfig == "" {
		t.Skip(skipReason)
	}
	ctx := ctxFor(t, time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace + "-restricted",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no default service account")
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := newProvider(t, func(c *kubernetes.Config) { c.Namespace = ns.Name; c.ReadOnlyRoot = true })
	create(t, p, provider.CreateSpec{})
}
