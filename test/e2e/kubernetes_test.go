//go:build kubernetes

package e2e

// The kubernetes provider's acceptance through a real `tether serve`
// against a real control plane (kubetest: $KUBECONFIG, or the project's
// test cluster of scripts/kube.sh, whose nodes are kwok's). Each test has
// a namespace and an installation id of its own. Under kwok a pod's
// commands run on this machine, in KUBE_WORKDIR: these tests check what
// Tether does with pods, not a container's isolation.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/kubernetes/kubetest"
	"github.com/tetherhq/tether/test/harness"
)

// The janitor's interval and an owner's lease in these tests (setup's
// JANITOR_INTERVAL and DEFAULT_OWNER_TTL).
const (
	kubeInterval = time.Second
	kubeLease    = 3 * time.Second
)

type kubeEnv struct {
	*env
	client       k8s.Interface
	namespace    string
	installation string
	workDir      string
}

func kubeToken() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kubeSetup makes a namespace of the test's own (deleted when it ends) and
// starts a replica serving only the kubernetes provider in it, with an
// installation id of its own. It skips the test when there is no cluster.
func kubeSetup(t *testing.T, extra ...string) *kubeEnv {
	t.Helper()
	kubeconfig, why := kubetest.Kubeconfig()
	if kubeconfig == "" {
		t.Skip(why)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ns := "tether-e2e-" + kubeToken()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	// Pods need the namespace's default service account, which the
	// controller manager makes.
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no default service account in %s", ns)
		}
		time.Sleep(100 * time.Millisecond)
	}
	k := &kubeEnv{client: client, namespace: ns, installation: "e2e-" + kubeToken(), workDir: harness.ReachableTempDir(t)}
	k.env = setup(t, append([]string{
		"PROVIDERS=kubernetes",
		"KUBECONFIG=" + kubeconfig,
		"KUBE_NAMESPACE=" + ns,
		"KUBE_INSTALLATION=" + k.installation,
		"KUBE_WORKDIR=" + k.workDir,
	}, extra...)...)
	return k
}

// pods lists the namespace's pods matching selector.
func (k *kubeEnv) pods(selector string) []corev1.Pod {
	k.t.Helper()
	list, err := k.client.CoreV1().Pods(k.namespace).List(k.t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		k.t.Fatalf("list pods %q: %v", selector, err)
	}
	return list.Items
}

// podGone reports whether the sandbox's pod is gone (Get: NotFound).
func (k *kubeEnv) podGone(id string) bool {
	k.t.Helper()
	_, err := k.client.CoreV1().Pods(k.namespace).Get(k.t.Context(), kubernetes.PodName(id), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		k.t.Fatalf("get pod of %s: %v", id, err)
	}
	return apierrors.IsNotFound(err)
}

// waitUntil polls cond every 50ms until it holds or limit passes, and
// returns how long it took.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not after %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// TestKubernetesAcceptanceStory: create → ready (a labelled pod) → exec
// (output, an exit code, a timeout) → files and archives → delete → the
// pod is gone and the sandbox released.
func TestKubernetesAcceptanceStory(t *testing.T) {
	t.Parallel()
	k := kubeSetup(t)
	// No owner: an owner's 3s default lease would end the sandbox before
	// the story does on a loaded machine.
	id := k.createReady(map[string]any{"provider": "kubernetes"})
	pods := k.pods(kubernetes.LabelSandbox + "=" + id + "," + kubernetes.LabelInstallation + "=" + k.installation)
	if len(pods) != 1 || pods[0].Name != kubernetes.PodName(id) {
		t.Fatalf("pods of %s: %d, want its one", id, len(pods))
	}

	code, res := k.exec(id, `printf 'OPEN_SANDBOX_ALIVE\n'`)
	if code != http.StatusOK || res["output"] != "OPEN_SANDBOX_ALIVE\n" || res["exit_code"] != 0.0 || res["timed_out"] != false {
		t.Fatalf("exec = %d %v", code, res)
	}
	if code, res := k.exec(id, `echo out; echo err >&2; exit 7`); code != http.StatusOK || res["exit_code"] != 7.0 ||
		!strings.Contains(res["output"].(string), "out\n") || !strings.Contains(res["output"].(string), "err\n") {
		t.Errorf("exec exit 7 = %d %v", code, res)
	}
	start := time.Now()
	code, res = k.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "sleep 20", "timeout_seconds": 1})
	if took := time.Since(start); code != http.StatusOK || res["timed_out"] != true || took > 10*time.Second {
		t.Errorf("exec past its timeout = %d %v after %s, want timed_out within seconds", code, res, took)
	}

	content := "print('hello from tether on kubernetes')\n"
	file := "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape(k.workDir+"/hello.py")
	if code, body := k.raw(http.MethodPut, file, []byte(content)); code != http.StatusNoContent {
		t.Fatalf("upload = %d %s", code, body)
	}
	if code, body := k.raw(http.MethodGet, file, nil); code != http.StatusOK || string(body) != content {
		t.Fatalf("download = %d %q", code, body)
	}
	if code, res := k.exec(id, "cat hello.py"); code != http.StatusOK || res["output"] != content {
		t.Errorf("the sandbox sees %d %v", code, res)
	}

	files := map[string]string{"main.py": "print('hi')\n", "pkg/util.py": "X = 1\n", "pkg/empty.txt": ""}
	dir := k.workDir + "/proj"
	if code, body := k.archive(http.MethodPut, id, dir, tarOf(t, files)); code != http.StatusNoContent {
		t.Fatalf("PUT archive = %d %s", code, body)
	}
	if code, res := k.exec(id, "cat proj/pkg/util.py; ls -A proj"); code != http.StatusOK || res["output"] != "X = 1\nmain.py\npkg\n" {
		t.Errorf("after PUT archive the sandbox sees %d %v", code, res)
	}
	code, body := k.archive(http.MethodGet, id, dir, nil)
	if code != http.StatusOK {
		t.Fatalf("GET archive = %d %s", code, body)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			got[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	if len(got) != len(files) {
		t.Errorf("the archive holds %v, want %v", got, files)
	}
	for name, content := range files {
		if got[name] != content {
			t.Errorf("%s = %q, want %q", name, got[name], content)
		}
	}

	code, sb := k.do(http.MethodDelete, "/v1/sandboxes/"+id, nil)
	if code != http.StatusAccepted || sb["state"] != "terminated" {
		t.Fatalf("delete = %d %v", code, sb)
	}
	k.waitFor(id, "released", released)
	if !k.podGone(id) {
		t.Error("the sandbox is released but its pod is still there")
	}
}

// TestKubernetesCancelDuringCreate: a sandbox deleted while its create is
// in flight (its pod made, its setup running) ends cancelled and leaves
// no pod.
func TestKubernetesCancelDuringCreate(t *testing.T) {
	t.Parallel()
	k := kubeSetup(t)
	code, sb := k.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "kubernetes", "setup": "sleep 3"})
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)
	selector := kubernetes.LabelSandbox + "=" + id
	waitUntil(t, 30*time.Second, "the pod of a creating sandbox", func() bool { return len(k.pods(selector)) > 0 })
	code, sb = k.do(http.MethodDelete, "/v1/sandboxes/"+id, nil)
	if code != http.StatusAccepted || sb["state"] != "cancelled" {
		t.Fatalf("delete during create = %d %v, want 202 cancelled", code, sb)
	}
	k.waitFor(id, "released", released)
	if n := len(k.pods(selector)); n != 0 {
		t.Errorf("%d pods of the cancelled sandbox %s are left", n, id)
	}
	_, sb = k.do(http.MethodGet, "/v1/sandboxes/"+id, nil)
	if sb["state"] != "cancelled" || sb["ready_at"] != nil {
		t.Errorf("cancelled sandbox = %v", sb)
	}
}

// TestKubernetesPodDeletedIsLost: a pod deleted with the API behind
// Tether's back ends its sandbox lost within one janitor interval, with
// the pod's fate in its history.
func TestKubernetesPodDeletedIsLost(t *testing.T) {
	t.Parallel()
	k := kubeSetup(t)
	id := k.createReady(map[string]any{"provider": "kubernetes"})
	deleted := time.Now()
	if err := k.client.CoreV1().Pods(k.namespace).Delete(t.Context(), kubernetes.PodName(id), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sb := k.waitFor(id, "ended", func(sb map[string]any) bool { return sb["ended_at"] != nil })
	took := time.Since(deleted)
	t.Logf("lost %s after the pod's deletion (janitor interval %s)", took, kubeInterval)
	if sb["reason"] != "lost" {
		t.Fatalf("sandbox of a deleted pod ended %v %v, want lost", sb["state"], sb["reason"])
	}
	// One interval, and slack for the poll and a loaded machine.
	if took > kubeInterval+2*time.Second {
		t.Errorf("lost only %s after the pod's deletion, more than one interval (%s)", took, kubeInterval)
	}
	code, events := k.do(http.MethodGet, "/v1/sandboxes/"+id+"/events", nil)
	if code != http.StatusOK {
		t.Fatalf("events = %d %v", code, events)
	}
	pod := "pod " + k.namespace + "/" + kubernetes.PodName(id)
	var found bool
	var history []string
	items, _ := events["items"].([]any)
	for _, it := range items {
		ev := it.(map[string]any)
		msg, _ := ev["message"].(string)
		history = append(history, msg)
		if ev["reason"] == "lost" && strings.Contains(msg, pod) {
			found = true
		}
	}
	if !found {
		t.Errorf("no lost event naming %q in the history %q", pod, history)
	}
	k.waitFor(id, "released", released)
}

// orphanPod is a pod with the provider's labels for a sandbox id of no
// sandbox, of installation inst.
func orphanPod(inst string) *corev1.Pod {
	id := domain.NewID()
	no := false
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: kubernetes.PodName(id), Labels: map[string]string{
			kubernetes.LabelManagedBy:    "tether",
			kubernetes.LabelInstallation: inst,
			kubernetes.LabelSandbox:      id,
			kubernetes.LabelTenant:       "default",
		}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "sandbox", Image: kubernetes.DefaultImage, Command: []string{"sleep", "3600"}}},
		},
	}
}

// TestKubernetesJanitorReapsOnlyItsOrphans: a pod with this installation's
// labels and no sandbox is deleted by the janitor; one with another
// installation's labels, in the same namespace, is left alone.
func TestKubernetesJanitorReapsOnlyItsOrphans(t *testing.T) {
	t.Parallel()
	k := kubeSetup(t)
	pods := k.client.CoreV1().Pods(k.namespace)
	ours, err := pods.Create(t.Context(), orphanPod(k.installation), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := pods.Create(t.Context(), orphanPod("other-"+kubeToken()), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), theirs.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	gone := func(name string) bool {
		_, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return apierrors.IsNotFound(err)
	}
	// ORPHAN_GRACE (1s), one interval, the pod's 1s grace period, slack.
	took := waitUntil(t, 15*time.Second, "the orphan pod deleted", func() bool { return gone(ours.Name) })
	t.Logf("the orphan pod went %s after its creation", took)
	// Several more janitor runs: the other installation's pod stays.
	time.Sleep(4 * kubeInterval)
	if gone(theirs.Name) {
		t.Fatal("the janitor deleted another installation's pod")
	}
	if pod, err := pods.Get(t.Context(), theirs.Name, metav1.GetOptions{}); err != nil || pod.DeletionTimestamp != nil {
		t.Errorf("another installation's pod: %v, being deleted %v", err, pod.GetDeletionTimestamp())
	}
}

// TestKubernetesOwnerKilled: the pods of an owner SIGKILLed are gone
// within its lease and one janitor interval of the kill. The owner's
// first lease (from its creates) is long, so that the owner process has
// time to start on a loaded machine; its heartbeats make it kubeLease.
func TestKubernetesOwnerKilled(t *testing.T) {
	t.Parallel()
	k := kubeSetup(t, "DEFAULT_OWNER_TTL=60s")
	owner := "agent-" + kubeToken()
	var ids []string
	for range 2 {
		code, sb := k.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "kubernetes", "owner": owner})
		if code != http.StatusAccepted {
			t.Fatalf("create = %d %v", code, sb)
		}
		ids = append(ids, sb["id"].(string))
	}
	proc := k.startOwner(owner, kubeLease)
	for _, id := range ids {
		k.waitFor(id, "ready", func(sb map[string]any) bool { return sb["state"] == "ready" })
	}
	// The heartbeats hold the sandboxes past the first lease.
	time.Sleep(kubeLease + kubeInterval)
	selector := kubernetes.LabelInstallation + "=" + k.installation
	if n := len(k.pods(selector)); n != len(ids) {
		t.Fatalf("%d pods while the owner lives, want %d", n, len(ids))
	}
	for _, id := range ids {
		if _, sb := k.do(http.MethodGet, "/v1/sandboxes/"+id, nil); sb["state"] != "ready" {
			t.Fatalf("sandbox %s of a live owner = %v", id, sb)
		}
	}

	killed := time.Now()
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	bound := kubeLease + kubeInterval
	waitUntil(t, bound+30*time.Second, "the owner's pods gone", func() bool { return len(k.pods(selector)) == 0 })
	took := time.Since(killed)
	t.Logf("the owner's %d pods were gone %s after its SIGKILL (lease %s + interval %s = %s)", len(ids), took, kubeLease, kubeInterval, bound)
	// Slack for the pods' 1s grace period, the poll and a loaded machine.
	if took > bound+3*time.Second {
		t.Errorf("the pods outlived their owner by %s, more than lease + interval (%s) and slack", took, bound)
	}
	for _, id := range ids {
		sb := k.waitFor(id, "released", released)
		if sb["reason"] != "owner_expired" {
			t.Errorf("sandbox %s ended %v, want owner_expired", id, sb["reason"])
		}
	}
}
