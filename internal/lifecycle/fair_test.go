package lifecycle_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
	"github.com/tetherhq/tether/internal/store/storetest"
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
			if sb, _ := e.st.Sandbox(e.ctx, id); sb.State == domain.StateCreating {
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
	quick := e.create("", func(p *domain.CreateParams) { p.Tenant = "quick" })
	e.waitFor(quick.ID, "ready", isState(domain.StateReady))
	took := time.Since(start)
	t.Logf("another tenant's create was ready in %s with %d slow creates queued", took, slow)
	if took > 5*time.Second {
		t.Fatalf("another tenant's create took %s behind the slow tenant's; want well under a slow create (30 s)", took)
	}
}

// TestShareDoesNotStallABacklog: a claim cut short by a tenant's share is
// not a drained queue. A backlog older than the quick claims' window is
// served as fast as the share allows, not one claim per poll.
func TestShareDoesNotStallABacklog(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	e := setupWith(t, clock)
	const n = 24
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.create(`{"create_delay_ms": 20}`).ID
	}
	clock.Advance(10 * time.Second) // older than the quick claims look back
	e.executor(lifecycle.ExecutorConfig{Concurrency: 4, PollInterval: time.Hour})
	start := time.Now()
	for _, id := range ids {
		e.waitFor(id, "ready", isState(domain.StateReady))
	}
	// 24 creates of 20 ms, 3 at a time (the tenant's share of 4 slots):
	// about 160 ms; a stalled executor would wait for its hourly poll.
	t.Logf("a backlog of %d served in %s", n, time.Since(start))
}

// countingStore counts the executor's claims of creates.
type countingStore struct {
	*store.Store
	claims atomic.Int32
}

func (s *countingStore) ClaimCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error) {
	s.claims.Add(1)
	return s.Store.ClaimCreates(ctx, provider, node, worker, limit, lease, share)
}

func (s *countingStore) ClaimNewCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, since time.Time, share store.Share) ([]store.Claim, error) {
	s.claims.Add(1)
	return s.Store.ClaimNewCreates(ctx, provider, node, worker, limit, lease, since, share)
}

// lookAgainCounter passes a notifier's changes on and counts the
// look-again signals (changes with no id: the notifier may have missed
// some, so everything is claimed again) among them.
type lookAgainCounter struct {
	*notify.Notifier
	seen atomic.Int32
}

func (c *lookAgainCounter) Subscribe() (<-chan domain.Change, func()) {
	in, unsubscribe := c.Notifier.Subscribe()
	out := make(chan domain.Change, cap(in))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case n := <-in:
				if n.ID == "" {
					c.seen.Add(1)
				}
				select {
				case out <- n:
				case <-done:
					return
				}
			}
		}
	})
	return out, func() {
		close(done)
		wg.Wait()
		unsubscribe()
	}
}

// TestOneClaimPerCreate: with free slots, a create ending does not make the
// executor claim again (it would find nothing: new requests announce
// themselves); one create at a time costs one claim each. With every slot
// busy, a create ending does claim the next, without waiting for a poll.
func TestOneClaimPerCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	st := &countingStore{Store: e.st}
	notes := &lookAgainCounter{Notifier: e.notifier}
	ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{Concurrency: 4, PollInterval: time.Hour},
		st, notes, []domain.Provider{e.sim}, e.log, lifecycle.NewMetrics(nil))
	ex.Start(e.ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ex.Stop(ctx)
	})
	for st.claims.Load() == 0 { // the first dispatch
		time.Sleep(time.Millisecond)
	}
	const n = 10
	for range n {
		e.waitFor(e.create("").ID, "ready", isState(domain.StateReady))
	}
	time.Sleep(50 * time.Millisecond) // room for a claim after the last, were there one
	// Besides the first dispatch's claim and one per create, one per
	// look-again signal: the notifier's first LISTEN, for one, may be
	// heard after the executor's first dispatch.
	if got, want := st.claims.Load(), 1+n+notes.seen.Load(); got > want {
		t.Errorf("%d creates one at a time took %d claims, want at most %d (%d look-again signals)", n, got, want, notes.seen.Load())
	}

	// A backlog: 12 slow creates at once on 4 slots, served by the ends of
	// calls (the poll is an hour away).
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = e.create(`{"create_delay_ms": 20}`).ID
	}
	for _, id := range ids {
		e.waitFor(id, "ready", isState(domain.StateReady))
	}
}
