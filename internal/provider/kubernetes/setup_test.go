//go:build kubernetes

package kubernetes_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/provider"
)

const (
	annSetUp = "tetherhq.dev/set-up"
	annClaim = "tetherhq.dev/setup-claim"
)

// setupRuns counts the lines the setup `echo run >> file` wrote (the
// setup runs in the work folder, a folder of this machine under kwok).
func setupRuns(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(workDir, file))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// annotatePod merges annotations (nil removes one) into the sandbox's pod.
func annotatePod(t *testing.T, id string, annotations map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if _, err := client.CoreV1().Pods(namespace).Patch(t.Context(), kubernetes.PodName(id), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentCreatesRunSetupOnce: Creates of one sandbox at once (two
// executors may) converge on one pod, whose setup runs once, in one of
// them; the others wait for it and return the same resource.
func TestConcurrentCreatesRunSetupOnce(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	file := "setup-" + token()
	spec := provider.CreateSpec{SandboxID: provider.NewSandboxID(), Tenant: "acme", Setup: "sleep 0.5; echo run >> " + file}
	t.Cleanup(func() { _ = p.Destroy(ctxFor(t, time.Minute), spec.SandboxID) })
	const n = 4
	res := make([]provider.Resource, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i], errs[i] = p.Create(ctxFor(t, time.Minute), spec) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || res[i].ProviderID != res[0].ProviderID || res[i].Defunct {
			t.Errorf("concurrent create %d: %+v, %v (first %+v)", i, res[i], errs[i], res[0])
		}
	}
	if got := setupRuns(t, file); got != 1 {
		t.Errorf("the setup ran %d times, want once", got)
	}
	pod, ok := getPod(t, spec.SandboxID)
	if !ok || pod.Annotations[annSetUp] != "true" || pod.Annotations[annClaim] != "" {
		t.Errorf("the pod after its setup: %v", pod)
	}
}

// TestCreateAfterAnInterruptedSetup: a pod whose setup was claimed and not
// finished by its deadline (its Create died) is made again, and set up
// once; a Create that finds a live claim waits for it until then; a
// failed setup leaves its claim expired.
func TestCreateAfterAnInterruptedSetup(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	file := "setup-" + token()
	spec, _ := create(t, p, provider.CreateSpec{Setup: "echo run >> " + file})
	first, _ := getPod(t, spec.SandboxID)

	// Claimed by a Create that died, its deadline 2s away: the next
	// Create waits until the claim is stale, then makes a new pod.
	until := time.Now().Add(2 * time.Second)
	annotatePod(t, spec.SandboxID, map[string]any{annSetUp: nil, annClaim: fmt.Sprintf("dead %d", until.Unix())})
	again, err := p.Create(ctxFor(t, time.Minute), spec)
	if err != nil {
		t.Fatalf("create after an interrupted setup: %v", err)
	}
	if time.Now().Before(until) {
		t.Error("create did not wait for a live claim")
	}
	second, _ := getPod(t, spec.SandboxID)
	if second == nil || second.UID == first.UID || second.Annotations[annSetUp] != "true" || again.Defunct {
		t.Errorf("create after an interrupted setup: %+v, pod %v (first %s)", again, second, first.UID)
	}
	if got := setupRuns(t, file); got != 2 {
		t.Errorf("the setup ran %d times, want twice (once per pod)", got)
	}

	failing := provider.CreateSpec{SandboxID: provider.NewSandboxID(), Tenant: "acme", Setup: "exit 3"}
	t.Cleanup(func() { _ = p.Destroy(ctxFor(t, time.Minute), failing.SandboxID) })
	if _, err := p.Create(ctxFor(t, time.Minute), failing); err == nil || !strings.Contains(err.Error(), "status 3") {
		t.Errorf("create with a failing setup: %v", err)
	}
	if pod, ok := getPod(t, failing.SandboxID); !ok || !strings.HasSuffix(pod.Annotations[annClaim], " 0") || pod.Annotations[annSetUp] != "" {
		t.Errorf("a pod whose setup failed: %v", pod)
	}
}
