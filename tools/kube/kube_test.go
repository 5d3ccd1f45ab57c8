// Package kube holds the test of Tether's test control plane: it starts
// scripts/kube.sh and drives the cluster with client-go the way the
// kubernetes provider will (namespace, pod, readiness, pods/exec, delete).
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// cluster is a control plane started by scripts/kube.sh for one test.
type cluster struct {
	script string
	env    []string
	state  string
	config *rest.Config
	client kubernetes.Interface
}

// startCluster runs `scripts/kube.sh start` with a state folder of the
// test's own, and stops the cluster (and reaps its supervisor) at cleanup.
// The port is TETHER_KUBE_TEST_PORT, else 57443, so that a developer's
// cluster on the default port is left alone.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	// The supervisor outlives scripts/kube.sh; as a child subreaper this
	// test inherits it and reaps it (this machine's pid 1 does not).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatalf("project root: %v", err)
	}
	port := os.Getenv("TETHER_KUBE_TEST_PORT")
	if port == "" {
		port = "57443"
	}
	c := &cluster{
		script: filepath.Join(root, "scripts", "kube.sh"),
		state:  t.TempDir(),
	}
	// TETHER_KUBE_TEST_SECRET marks the caller's environment: no exec may see it.
	c.env = append(os.Environ(), "TETHER_KUBE_DIR="+c.state, "TETHER_KUBE_PORT="+port,
		"TETHER_KUBE_TEST_SECRET=must-not-leak")
	t.Cleanup(func() { c.stop(t) })

	// A cold machine builds the binaries first (about 10 minutes).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.script, "start")
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the test control plane did not start (port %s; TETHER_KUBE_TEST_PORT sets it): scripts/kube.sh start: %v\n%s", port, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	kubeconfig := lines[len(lines)-1]
	if want := filepath.Join(c.state, "kubeconfig"); kubeconfig != want {
		t.Fatalf("scripts/kube.sh start: last line %q, want the kubeconfig %q", kubeconfig, want)
	}
	c.config, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", kubeconfig, err)
	}
	if c.config.BearerToken == "" {
		t.Fatalf("%s does not authenticate with a bearer token", kubeconfig)
	}
	c.client, err = kubernetes.NewForConfig(c.config)
	if err != nil {
		t.Fatalf("client for %s: %v", kubeconfig, err)
	}
	return c
}

// stop runs `scripts/kube.sh stop`, reaps what this test inherited, and
// checks that no process of the cluster is left.
func (c *cluster) stop(t *testing.T) {
	t.Helper()
	cmd := exec.Command(c.script, "stop")
	cmd.Env = c.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("scripts/kube.sh stop: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		reapOrphans()
		left := processesUsing(c.state)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after scripts/kube.sh stop, processes %v still run with %s", left, c.state)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reapOrphans collects every ended child that is not os/exec's: the
// supervisor, inherited as a subreaper. Children of os/exec in flight have
// ended already (every command above was waited for).
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// processesUsing lists the live (not zombie) processes whose command line
// names dir.
func processesUsing(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var left []string
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil || bytes.Contains(status, []byte("State:\tZ")) {
			continue
		}
		left = append(left, filepath.Base(p)+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return left
}

// waitFor polls cond every 100 ms until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return fmt.Errorf("%s: not within %v", what, timeout)
			}
			return fmt.Errorf("%s: not within %v (last error: %w)", what, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// execIn runs cmd in the pod's container through pods/exec (WebSocket,
// falling back to SPDY) and returns its stdout and stderr.
func (c *cluster) execIn(ctx context.Context, ns, pod string, cmd ...string) (string, string, error) {
	req := c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: "main", Command: cmd, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.config, "GET", req.URL().String())
	if err != nil {
		return "", "", fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.config, "POST", req.URL())
	if err != nil {
		return "", "", fmt.Errorf("spdy executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", "", fmt.Errorf("fallback executor: %w", err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

func sandboxPod(name string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "tether-test"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox:1.37", Command: []string{"sleep", "infinity"},
			}},
		},
	}
}

func TestControlPlane(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	const ns = "tether-kube-test"

	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// The service-account admission refuses pods until the controllers
	// have made the namespace's default service account.
	if err := waitFor(ctx, 30*time.Second, "default service account", func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}

	pods := c.client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, sandboxPod("sandbox"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var pod *corev1.Pod
	if err := waitFor(ctx, 60*time.Second, "pod Running and Ready", func(ctx context.Context) (bool, error) {
		var err error
		pod, err = pods.Get(ctx, "sandbox", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning && podReady(pod), nil
	}); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "kwok-node-0" {
		t.Fatalf("pod runs on node %q, want kwok-node-0", pod.Spec.NodeName)
	}

	stdout, stderr, err := c.execIn(ctx, ns, "sandbox", "sh", "-c", `printf 'OPEN_SANDBOX_ALIVE\n'`)
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, stderr)
	}
	if stdout != "OPEN_SANDBOX_ALIVE\n" {
		t.Fatalf("exec stdout = %q, want %q", stdout, "OPEN_SANDBOX_ALIVE\n")
	}
	// Under kwok a non-zero exit status comes back only as the error's text
	// (a kubelet returns an exit code); the provider must not rely on it.
	if _, _, err := c.execIn(ctx, ns, "sandbox", "sh", "-c", "exit 7"); err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Fatalf("exec of `exit 7`: error %v, want one naming exit status 7", err)
	}
	// The exec runs with the ClusterExec's environment, not the caller's.
	if stdout, _, err := c.execIn(ctx, ns, "sandbox", "sh", "-c", "env"); err != nil || strings.Contains(stdout, "TETHER_KUBE_TEST_SECRET") {
		t.Fatalf("exec env: %v; the caller's environment reached the exec: %q", err, stdout)
	}

	// A grace period is honoured: the pod is still there, terminating,
	// before it ends, and gone after.
	grace := int64(3)
	deleted := time.Now()
	if err := pods.Delete(ctx, "sandbox", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	if p, err := pods.Get(ctx, "sandbox", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("right after a delete with a %ds grace period: pod %v, error %v; want it terminating", grace, p, err)
	}
	if err := waitFor(ctx, 30*time.Second, "pod gone", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "sandbox", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}
	// deletionTimestamp has whole seconds: the pod may go up to 1s early.
	if took := time.Since(deleted); took < time.Duration(grace-1)*time.Second {
		t.Fatalf("pod gone %v after a delete with a %ds grace period", took, grace)
	}

	// activeDeadlineSeconds ends a running pod, as a kubelet would.
	p := sandboxPod("deadline")
	deadline := int64(2)
	p.Spec.ActiveDeadlineSeconds = &deadline
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod with a deadline: %v", err)
	}
	if err := waitFor(ctx, 30*time.Second, "pod Failed with DeadlineExceeded", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "deadline", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "DeadlineExceeded", nil
	}); err != nil {
		t.Fatal(err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestReplacesAreGenerated checks that go.mod's replace block is the one
// replaces.sh generates from k8s.io/kubernetes's go.mod.
func TestReplacesAreGenerated(t *testing.T) {
	want, err := exec.Command("./replaces.sh").Output()
	if err != nil {
		t.Fatalf("./replaces.sh: %v", err)
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	s := string(gomod)
	start := strings.Index(s, "\nreplace (\n")
	if start < 0 {
		t.Fatal("go.mod has no replace block")
	}
	end := strings.Index(s[start+1:], "\n)\n")
	if got := s[start+1 : start+1+end+3]; got != string(want) {
		t.Fatalf("go.mod's replace block is stale; replace it with the output of tools/kube/replaces.sh:\n%s", want)
	}
}
