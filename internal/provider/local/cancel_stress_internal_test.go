package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// TestCancelledCreatesLeaveNothing: creates cancelled at random moments
// (mid-mount, mid-start, mid-setup), each followed by a Destroy, while
// another program on the host attaches, probes and detaches loop devices
// of its own. Every Destroy must succeed, and nothing of any sandbox may be
// left on the host.
func TestCancelledCreatesLeaveNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("stress run skipped in -short mode")
	}
	p, dir := newWorkspaceProvider(t)
	stop := harness.LoopNeighbour(t)
	defer stop()
	const rounds, parallel = 24, 3
	var wg sync.WaitGroup
	errs := make(chan error, rounds*parallel)
	for w := range parallel {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for range rounds {
				id := provider.NewSandboxID()
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rng.IntN(400))*time.Millisecond)
				_, _ = p.Create(ctx, provider.CreateSpec{SandboxID: id, Setup: "sleep 0.1",
					Params: []byte(`{"workspace_mb":32}`)})
				cancel()
				dctx, dcancel := context.WithTimeout(t.Context(), 30*time.Second)
				start := time.Now()
				if err := p.Destroy(dctx, id); err != nil {
					errs <- fmt.Errorf("destroy %s after %s: %w", id, time.Since(start).Round(time.Millisecond), err)
				}
				dcancel()
				if left := workspaceLeft(t, filepath.Join(dir, id)); len(left) > 0 {
					errs <- fmt.Errorf("left of %s: %v", id, left)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
