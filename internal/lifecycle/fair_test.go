package lifecycle_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/sandbox"
)

// TestSlowTenantLeavesSlotsForOthers: a tenant's slow creates fill at most
// all but a quarter of an executor's slots, so another tenant's create
// starts at once instead of waiting for them; without sharing it would
// wait the full 30 s of a slow create.
func TestSlowTenantLeavesSlotsForOthers(t *testing.T) {
	t.Parallel()
	e := setupWith(t, nil)
	if _, err := e.st.RegisterAPIKey(e.ctx, "quick", "test", "k-quick"); err != nil {
		t.Fatal(err)
	}
	e.executor(lifecycle.ExecutorConfig{Concurrency: 8})
	const slow = 30
	slowIDs := make([]string, slow)
	for i := range slowIDs {
		slowIDs[i] = e.create(`{"create_delay_ms": 30000}`).ID
	}
	// Let the slow tenant's creates take the slots they can.
	deadline := time.Now().Add(10 * time.Second)
	for {
		creating := 0
		for _, id := range slowIDs {
			if sb, _ := e.st.Sandbox(e.ctx, id); sb.State == sandbox.StateCreating {
				creating++
			}
		}
		if creating == 6 {
			break
		}
		if creating > 6 || time.Now().After(deadline) {
			t.Fatalf("%d of the slow tenant's creates run; want 6 of 8 slots (all but a quarter)", creating)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	quick := e.create("", func(p *sandbox.CreateParams) { p.Tenant = "quick" })
	e.waitFor(quick.ID, "ready", isState(sandbox.StateReady))
	took := time.Since(start)
	t.Logf("another tenant's create was ready in %s with %d slow creates queued", took, slow)
	if took > 5*time.Second {
		t.Fatalf("another tenant's create took %s behind the slow tenant's; want well under a slow create (30 s)", took)
	}
}
