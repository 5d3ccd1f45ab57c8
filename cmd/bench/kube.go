//go:build kubernetes

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
	kubeprovider "github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/store"
)

// The kubernetes provider's phases: sandboxes made through Tether (a pod
// each, through client-go) against bare client-go calls on the same
// cluster, in the same run, the samples of each side taking turns. The
// bare baseline is what any client of the cluster pays: a Pod create and
// a watch until it is Ready; a pods/exec over the same WebSocket
// executor. Under kwok (scripts/kube.sh) there is no kubelet: pods go
// Ready by kwok's stages, no image is pulled, and an exec runs on this
// machine, so the ratios measure Tether's overhead, not a real cluster's
// latency.

// kubeCaveat says what the kubernetes phases measure on the project's
// test cluster.
const kubeCaveat = "Kubernetes phases: on the project's kwok cluster there is no kubelet — pods go Ready by kwok's stages, " +
	"no image is pulled, and pods/exec runs the command on this machine (the workdir, KUBE_WORKDIR, is a folder of it) — so these ratios measure Tether's overhead " +
	"over a bare client, not a real cluster's latency."

// kubeBench is the cluster of the kubernetes phases and the namespace of
// their own.
type kubeBench struct {
	kubeconfig string
	rest       *rest.Config
	client     kubernetes.Interface
	ns         string
	// workDir is the sandboxes' KUBE_WORKDIR: a folder of this machine,
	// since under kwok an exec runs here (and starts there).
	workDir string
}

// kubeSamples are the kubernetes phases' measurements: creates until
// ready through Tether (and their steps), bare pod creates until Ready
// and the provider's Creates in this process; execs through Tether, bare
// pods/execs and the provider's Execs in this process.
type kubeSamples struct {
	viaTether, bare, inproc          latencies
	steps                            readySteps
	execTether, execBare, execInproc latencies
}

// newKubeBench connects to the cluster of kubeconfig and makes a
// namespace of the bench's own, once its default service account exists
// (pods are admitted only then).
func newKubeBench(ctx context.Context, kubeconfig string) (*kubeBench, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %s: %w", kubeconfig, err)
	}
	// The provider's client rate (KUBE_QPS, KUBE_BURST defaults), so that
	// neither side is throttled differently.
	rc.QPS, rc.Burst = kubeprovider.DefaultQPS, kubeprovider.DefaultBurst
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	workDir, err := os.MkdirTemp("", "tether-bench-kube-")
	if err != nil {
		return nil, err
	}
	kb := &kubeBench{kubeconfig: kubeconfig, rest: rc, client: client, ns: "tether-bench-" + hex.EncodeToString(b[:]), workDir: workDir}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kb.ns, Labels: map[string]string{"app.kubernetes.io/part-of": "tether-bench"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		_ = os.RemoveAll(workDir)
		return nil, fmt.Errorf("kubernetes: create namespace %s: %w", kb.ns, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := client.CoreV1().ServiceAccounts(kb.ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return kb, nil
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			kb.close(ctx)
			return nil, fmt.Errorf("kubernetes: namespace %s: default service account: %w", kb.ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// close deletes the bench's namespace (and so whatever is left in it) and
// waits up to a minute until it is gone.
func (kb *kubeBench) close(ctx context.Context) {
	defer func() { _ = os.RemoveAll(kb.workDir) }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	nss := kb.client.CoreV1().Namespaces()
	if err := nss.Delete(ctx, kb.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "bench: delete namespace %s: %v\n", kb.ns, err)
		return
	}
	for {
		if _, err := nss.Get(ctx, kb.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "bench: namespace %s still terminating after a minute\n", kb.ns)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var kubeCreateBody = []byte(`{"provider":"kubernetes"}`)

// measureKube starts a Tether with the kubernetes provider only, on the
// database dbURL and the bench's own namespace, runs the kubernetes phases
// against it and stops it; the namespace is deleted at the end.
func measureKube(ctx context.Context, root, dbURL string, o options, logf func(string, ...any)) ([]target, []string, *kubeRaw, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, nil, err
	}
	_, err = store.New(pool).Migrate(ctx)
	pool.Close()
	if err != nil {
		return nil, nil, nil, err
	}
	kb, err := newKubeBench(ctx, o.kubeconfig)
	if err != nil {
		return nil, nil, nil, err
	}
	defer kb.close(ctx)
	logf("kubernetes: namespace %s on the cluster of %s; building and starting a Tether with the kubernetes provider", kb.ns, o.kubeconfig)
	srv, err := startTether(ctx, root, dbURL, []string{"PROVIDERS=kubernetes", "KUBECONFIG=" + o.kubeconfig,
		"KUBE_NAMESPACE=" + kb.ns, "KUBE_INSTALLATION=" + kb.ns, "KUBE_WORKDIR=" + kb.workDir}, o)
	if err != nil {
		return nil, nil, nil, err
	}
	defer srv.stop()
	a := newAPI(srv.base, "bench-key", 2)
	defer a.wire.close()
	if reason, err := a.providerProblem(ctx, kubeprovider.Name); err != nil {
		return nil, nil, nil, err
	} else if reason != "" {
		return nil, nil, nil, fmt.Errorf("kubernetes: Tether reports the provider unavailable: %s", reason)
	}
	// The provider in this process, to split Tether's time between the
	// provider and the rest: an installation of its own, so that the
	// Tether under test never takes its pods for orphans.
	p, err := kubeprovider.New(kubeprovider.Config{Kubeconfig: o.kubeconfig, Namespace: kb.ns, Installation: kb.ns + "-inproc", WorkDir: kb.workDir})
	if err != nil {
		return nil, nil, nil, err
	}
	kr := &kubeRun{a: a, kb: kb, p: p, live: map[string]bool{}}
	defer kr.endLive(ctx)
	return kr.phases(ctx, o.kubeSandboxes, o.kubeExecs, logf)
}

// kubeRun is one run of the kubernetes phases: Tether's API, the cluster,
// the provider in this process and the sandboxes created through Tether
// and not yet ended.
type kubeRun struct {
	a    *api
	kb   *kubeBench
	p    *kubeprovider.Provider
	live map[string]bool
}

// phases runs the two kubernetes phases: n sandboxes through Tether, each
// against a bare pod create and the provider's Create in this process;
// then execs calls of `printf ok` through Tether, each against a bare
// pods/exec and the provider's Exec in this process.
func (kr *kubeRun) phases(ctx context.Context, n, execs int, logf func(string, ...any)) ([]target, []string, *kubeRaw, error) {
	raw := &kubeRaw{LoadBefore: loadavg(), Namespace: kr.kb.ns, Kubeconfig: kr.kb.kubeconfig, PodSpecShape: bareShape}
	var s kubeSamples
	logf("kubernetes sandboxes: %d sequential creates (POST, ?wait until ready), each against a bare client-go pod create + watch until Ready", n)
	if err := kr.measureCreates(ctx, n, &s); err != nil {
		return nil, nil, nil, err
	}
	logf("kubernetes exec: %d sequential `printf ok` through Tether, each against a bare client-go pods/exec", execs)
	if err := kr.measureExecs(ctx, execs, &s); err != nil {
		return nil, nil, nil, err
	}
	raw.LoadAfter = loadavg()
	raw.ReadyTether, raw.ReadyBare, raw.ReadyInproc = toMS(s.viaTether), toMS(s.bare), toMS(s.inproc)
	raw.ExecTether, raw.ExecBare, raw.ExecInproc = toMS(s.execTether), toMS(s.execBare), toMS(s.execInproc)
	targets, notes := s.report(n, execs)
	notes = append(notes, fmt.Sprintf("Kubernetes phases ran in namespace %s (created and deleted by the bench); load average before %s, after %s.",
		kr.kb.ns, raw.LoadBefore, raw.LoadAfter))
	for _, note := range notes {
		logf("%s", note)
	}
	for _, t := range targets {
		logf("%s: %.2f ms against %.2f %s, ratio %.2f", t.Name, t.Measured, t.Baseline, t.Against, t.Ratio)
	}
	return targets, notes, raw, nil
}

// endLive ends through Tether the sandboxes still alive (after an error
// half-way).
func (kr *kubeRun) endLive(ctx context.Context) {
	for id := range kr.live {
		_ = kr.a.end(context.WithoutCancel(ctx), id)
	}
}

// create creates a kubernetes sandbox through Tether and waits until it is
// ready.
func (kr *kubeRun) create(ctx context.Context) (string, error) {
	sb, err := kr.a.createWith(ctx, kubeCreateBody)
	if err != nil {
		return "", fmt.Errorf("kubernetes create: %w", err)
	}
	kr.live[sb.ID] = true
	if err := kr.a.waitReady(ctx, sb.ID); err != nil {
		return "", fmt.Errorf("kubernetes create %s: %w", sb.ID, err)
	}
	return sb.ID, nil
}

// end ends the sandbox id through Tether and waits until it is released.
func (kr *kubeRun) end(ctx context.Context, id string) error {
	if err := kr.a.end(ctx, id); err != nil {
		return fmt.Errorf("kubernetes delete %s: %w", id, err)
	}
	delete(kr.live, id)
	return nil
}

// measureCreates times n creates through Tether (each then ended,
// untimed), each followed by a bare pod create until Ready and the
// provider's Create in this process (each then deleted, untimed).
func (kr *kubeRun) measureCreates(ctx context.Context, n int, s *kubeSamples) error {
	for i := range n {
		start := time.Now()
		id, err := kr.create(ctx)
		if err != nil {
			return err
		}
		seen := time.Now()
		s.viaTether = append(s.viaTether, seen.Sub(start))
		if err := kr.a.addSteps(ctx, &s.steps, id, start, seen); err != nil {
			return err
		}
		if err := kr.end(ctx, id); err != nil {
			return err
		}
		name := fmt.Sprintf("bare-create-%d", i)
		d, err := kr.kb.bareCreate(ctx, name)
		if derr := kr.kb.deletePod(ctx, name); err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
		s.bare = append(s.bare, d)
		if d, err = kr.inprocCreate(ctx); err != nil {
			return err
		}
		s.inproc = append(s.inproc, d)
	}
	return nil
}

// inprocCreate times one Create of the provider in process, until ready;
// the sandbox is then destroyed, untimed.
func (kr *kubeRun) inprocCreate(ctx context.Context) (time.Duration, error) {
	id := domain.NewID()
	start := time.Now()
	_, err := kr.p.Create(ctx, domain.CreateSpec{SandboxID: id, Tenant: "bench", EndBy: time.Now().Add(time.Hour)})
	took := time.Since(start)
	if derr := kr.p.Destroy(context.WithoutCancel(ctx), id); err == nil {
		err = derr
	}
	if err != nil {
		return 0, fmt.Errorf("kubernetes provider in process: %w", err)
	}
	return took, nil
}

// measureExecs times execs calls of `printf ok` through Tether into one
// sandbox, each followed by a bare pods/exec into a bare pod and an Exec
// of the provider in process into a sandbox of its own.
func (kr *kubeRun) measureExecs(ctx context.Context, execs int, s *kubeSamples) error {
	id, err := kr.create(ctx)
	if err != nil {
		return err
	}
	const bareName = "bare-exec"
	if _, err := kr.kb.bareCreate(ctx, bareName); err != nil {
		return err
	}
	defer func() { _ = kr.kb.deletePod(context.WithoutCancel(ctx), bareName) }()
	ipID := domain.NewID()
	if _, err := kr.p.Create(ctx, domain.CreateSpec{SandboxID: ipID, Tenant: "bench", EndBy: time.Now().Add(time.Hour)}); err != nil {
		return fmt.Errorf("kubernetes provider in process: %w", err)
	}
	defer func() { _ = kr.p.Destroy(context.WithoutCancel(ctx), ipID) }()
	for range execs {
		start := time.Now()
		if err := kr.a.execPrintf(ctx, id); err != nil {
			return err
		}
		s.execTether = append(s.execTether, time.Since(start))
		d, err := kr.kb.bareExec(ctx, bareName)
		if err != nil {
			return err
		}
		s.execBare = append(s.execBare, d)
		if d, err = kr.inprocExec(ctx, ipID); err != nil {
			return err
		}
		s.execInproc = append(s.execInproc, d)
	}
	return kr.end(ctx, id)
}

// inprocExec times one Exec of `printf ok` by the provider in process.
func (kr *kubeRun) inprocExec(ctx context.Context, id string) (time.Duration, error) {
	start := time.Now()
	res, err := kr.p.Exec(ctx, id, domain.ExecRequest{Command: "printf ok", Timeout: time.Minute})
	if err == nil && (res.ExitCode != 0 || res.Output != "ok") {
		err = fmt.Errorf("exit code %d, output %q", res.ExitCode, res.Output)
	}
	if err != nil {
		return 0, fmt.Errorf("kubernetes provider in process: exec: %w", err)
	}
	return time.Since(start), nil
}

// bareShape says what the baseline's pod is.
const bareShape = "the bench's own minimal equivalent of the provider's pod (its builder is unexported): " +
	"restartPolicy Never, no service account token, no service links, grace 1 s, activeDeadlineSeconds, " +
	"non-root uid 1000, RuntimeDefault seccomp, all capabilities dropped, no privilege escalation, " +
	"one busybox container waiting for ever, requests = limits (1 CPU, 512 MiB, 1 GiB ephemeral), " +
	"emptyDir workdir and /tmp; no labels of Tether's, no NetworkPolicy"

// barePod is the baseline's pod (see bareShape).
func (kb *kubeBench) barePod(name string) *corev1.Pod {
	res := kubeprovider.DefaultResources
	q := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(res.CPUMillis, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(res.MemoryMB<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(res.EphemeralStorageMB<<20, resource.BinarySI),
	}
	uid, no, yes, grace, deadline := int64(kubeprovider.DefaultUser), false, true, int64(1), int64(3660)
	workSize := resource.NewQuantity(res.EphemeralStorageMB<<20, resource.BinarySI)
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kb.ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			TerminationGracePeriodSeconds: &grace, ActiveDeadlineSeconds: &deadline,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid, SeccompProfile: seccomp},
			Containers: []corev1.Container{{
				Name: "sandbox", Image: kubeprovider.DefaultImage,
				Command:    []string{"/bin/sh", "-c", `trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`},
				WorkingDir: kb.workDir,
				Resources:  corev1.ResourceRequirements{Requests: q, Limits: q},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
					AllowPrivilegeEscalation: &no, Privileged: &no, SeccompProfile: seccomp,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: kb.workDir}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: workSize}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// bareCreate creates the baseline's pod name and watches it until it is
// Ready (phase Running, condition Ready true); it returns the time from
// the create's call to the watch event that says so.
func (kb *kubeBench) bareCreate(ctx context.Context, name string) (time.Duration, error) {
	pods := kb.client.CoreV1().Pods(kb.ns)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	pod, err := pods.Create(ctx, kb.barePod(name), metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("bare pod create: %w", err)
	}
	for !podReady(pod) {
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: pod.ResourceVersion,
		})
		if err != nil {
			return 0, fmt.Errorf("bare pod watch: %w", err)
		}
		pod, err = untilReady(ctx, w, pod)
		w.Stop()
		if err != nil {
			return 0, fmt.Errorf("bare pod %s: %w", name, err)
		}
	}
	return time.Since(start), nil
}

// untilReady reads the watch until the pod is Ready or the watch ends; it
// returns the pod as last seen.
func untilReady(ctx context.Context, w watch.Interface, pod *corev1.Pod) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return pod, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return pod, nil // the caller watches again from pod
			}
			if ev.Type == watch.Deleted {
				return pod, fmt.Errorf("deleted while it started")
			}
			if next, isPod := ev.Object.(*corev1.Pod); isPod {
				pod = next
				if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
					return pod, fmt.Errorf("ended while it started (%s)", pod.Status.Phase)
				}
				if podReady(pod) {
					return pod, nil
				}
			}
		}
	}
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deletePod deletes the baseline's pod name and waits until it is gone,
// as the provider's Destroy does.
func (kb *kubeBench) deletePod(ctx context.Context, name string) error {
	pods := kb.client.CoreV1().Pods(kb.ns)
	grace := int64(1)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("bare pod delete: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bare pod %s not gone: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// bareExec runs `sh -c 'printf ok'` in the baseline's pod name through
// pods/exec, over a WebSocket with the SPDY fallback as the provider
// does, and returns the time from building the request to the stream's
// end.
func (kb *kubeBench) bareExec(ctx context.Context, name string) (time.Duration, error) {
	start := time.Now()
	req := kb.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(kb.ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: []string{"/bin/sh", "-c", "printf ok"}, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(kb.rest, "GET", req.URL().String())
	if err != nil {
		return 0, fmt.Errorf("bare exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(kb.rest, "POST", req.URL())
	if err != nil {
		return 0, fmt.Errorf("bare exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("bare exec: %w", err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	took := time.Since(start)
	if err == nil && stdout.String() != "ok" {
		err = fmt.Errorf("output %q, stderr %q", stdout.String(), stderr.String())
	}
	if err != nil {
		return 0, fmt.Errorf("bare exec: %w", err)
	}
	return took, nil
}

// report turns the samples of n creates and execs calls into the
// kubernetes rows (information: the issue sets no bound on these ratios)
// and notes.
func (s *kubeSamples) report(n, execs int) ([]target, []string) {
	var targets []target
	for _, p := range []float64{50, 95, 99} {
		targets = append(targets, info(fmt.Sprintf("kubernetes request → ready p%g (%d sequential)", p, n),
			ms(s.viaTether.percentile(p)), "ms", ms(s.bare.percentile(p)), "ms bare client-go create + watch Ready"))
	}
	for _, p := range []float64{50, 95, 99} {
		targets = append(targets, info(fmt.Sprintf("kubernetes exec `printf ok` round trip p%g (%d sequential)", p, execs),
			ms(s.execTether.percentile(p)), "ms", ms(s.execBare.percentile(p)), "ms bare client-go pods/exec"))
	}
	targets = append(targets,
		info("kubernetes provider Create alone, in process, p50", ms(s.inproc.percentile(50)), "ms", ms(s.bare.percentile(50)), "ms bare create + watch Ready"),
		info("kubernetes provider Exec alone, in process, p50", ms(s.execInproc.percentile(50)), "ms", ms(s.execBare.percentile(50)), "ms bare pods/exec"))
	spread := func(l latencies) string {
		return fmt.Sprintf("p50 %.1f / p95 %.1f / p99 %.1f ms", ms(l.percentile(50)), ms(l.percentile(95)), ms(l.percentile(99)))
	}
	notes := []string{
		kubeCaveat,
		fmt.Sprintf("Kubernetes, %d sandboxes: request → ready through Tether %s; bare client-go pod create + watch until Ready %s; the provider's Create in this process %s. The bare pod is %s.",
			n, spread(s.viaTether), spread(s.bare), spread(s.inproc), bareShape),
		"Where a kubernetes create's time goes, from the sandbox's events (p50 of each step): " + s.steps.String() +
			"; the provider's create is a GET of the pod (404), a NetworkPolicy create, the pod create, a watch until Ready and a probe exec.",
		fmt.Sprintf("Kubernetes exec of `printf ok`, %d calls: through Tether (HTTP, key, sandbox read, the provider's GET of the pod, its pods/exec of `env -i … sh -c <exec script>`, activity row) %s; bare pods/exec of `sh -c 'printf ok'` %s; the provider's Exec in this process %s.",
			execs, spread(s.execTether), spread(s.execBare), spread(s.execInproc)),
	}
	return targets, notes
}
