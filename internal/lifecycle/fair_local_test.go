package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/test/harness"
)

// TestSlowTenantDoesNotDelayLocalCreates is the attack of issue 22 on the
// real local provider: tenant B's 16 creates, each with a slow setup, hold
// their share of the executor's slots (12 of 16) for the whole setup, and
// tenant A's plain creates, one after another, are each ready in moments.
// Before, the provider serialised creates on 64 locks striped by id, so
// about one A create in five shared a lock with a B create and waited for
// its whole setup; 16 in a row all but surely hit one.
func TestSlowTenantDoesNotDelayLocalCreates(t *testing.T) {
	t.Parallel()
	e := setupWith(t, nil)
	if _, err := e.st.RegisterAPIKey(e.ctx, "quick", "test", "k-quick"); err != nil {
		t.Fatal(err)
	}
	// Workspaces without a size limit: 32 loop devices would only slow
	// the test down, and it is about slots, not disks.
	p, err := local.New(harness.ReachableTempDir(t), local.WithLimits(
		local.Limits{Pids: local.DefaultPids, MemoryMB: local.DefaultMemoryMB, OpenFiles: local.DefaultOpenFiles},
		local.Limits{Pids: local.DefaultMaxPids, MemoryMB: local.DefaultMaxMemoryMB, WorkspaceMB: local.DefaultMaxWorkspaceMB, OpenFiles: local.DefaultMaxOpenFiles}))
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(e.ctx); !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	e.executorOf(lifecycle.ExecutorConfig{Concurrency: 16}, p)
	const slow, setup = 16, 25 * time.Second
	slowIDs := make([]string, slow)
	for i := range slowIDs {
		slowIDs[i] = e.create("", func(c *domain.CreateParams) {
			c.Provider, c.Setup = local.Name, "sleep 25"
		}).ID
	}
	var quickIDs []string
	t.Cleanup(func() {
		// The executor's work ends with the test's context; what it made
		// on the host is destroyed here (each destroy waits for its
		// create, whose setup the cancellation ends).
		for _, id := range append(slowIDs, quickIDs...) {
			if err := p.Destroy(context.Background(), id); err != nil {
				t.Errorf("destroy %s: %v", id, err)
			}
		}
	})
	// The slow tenant takes its share: 12 of 16 slots.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		creating := 0
		for _, id := range slowIDs {
			if sb, _ := e.st.Sandbox(e.ctx, id); sb.State == domain.StateCreating {
				creating++
			}
		}
		if creating == 12 {
			break
		}
		if creating > 12 || time.Now().After(deadline) {
			t.Fatalf("%d of the slow tenant's creates run; want 12 of 16 slots", creating)
		}
	}
	start := time.Now()
	var worst time.Duration
	for range 16 {
		t0 := time.Now()
		quick := e.create("", func(c *domain.CreateParams) { c.Provider, c.Tenant = local.Name, "quick" })
		quickIDs = append(quickIDs, quick.ID)
		e.waitFor(quick.ID, "ready", isState(domain.StateReady))
		took := time.Since(t0)
		worst = max(worst, took)
		if took > 5*time.Second {
			t.Fatalf("tenant A's create took %s behind tenant B's slow setups (%s each)", took, setup)
		}
	}
	t.Logf("16 creates of tenant A beside tenant B's 16 slow ones: %s in all, the slowest %s", time.Since(start), worst)
	if time.Since(start) >= setup {
		t.Fatalf("tenant A's creates outlasted tenant B's setups")
	}
}
