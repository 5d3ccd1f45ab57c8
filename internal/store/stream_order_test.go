package store_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// TestStreamKeepsEachSandboxsOrder: a transaction that got its id before a
// sandbox's previous event was written (it wrote something else first, then
// waited for the sandbox's row lock, as an owner's release does) writes the
// sandbox's next event; the stream still shows that sandbox's events in the
// order they happened. (Ordered by the writers' transaction ids alone, the
// later event would come first; found by TestChaosWebhooks.)
func TestStreamKeepsEachSandboxsOrder(t *testing.T) {
	b := setup(t)
	sb := b.create(t)
	pool := b.st.Pool()
	early, err := pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = early.Rollback(b.ctx) }()
	if _, err := early.Exec(b.ctx, `SELECT pg_current_xact_id()`); err != nil { // its id, now
		t.Fatal(err)
	}
	// The previous event: its transaction holds the sandbox's row while
	// the early one waits for it.
	prev, err := pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prev.Rollback(b.ctx) }()
	if _, err := prev.Exec(b.ctx, `
		WITH s AS (UPDATE sandboxes SET state = 'creating' WHERE id = $1 RETURNING id, tenant)
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, actor)
		SELECT id, tenant, now(), 'requested', 'creating', 'executor' FROM s`, sb.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := early.Exec(b.ctx, `
			WITH s AS (SELECT id, tenant FROM sandboxes WHERE id = $1 FOR UPDATE)
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor)
			SELECT id, tenant, now(), 'creating', 'cancelled', 'owner_released', 'client' FROM s`, sb.ID)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the early transaction waits for the row
	if err := prev.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := early.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := b.st.StreamEvents(b.ctx, "acme", domain.StreamPosition{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []domain.State
	for i, e := range evs {
		got = append(got, e.To)
		if i > 0 && !e.Position.After(evs[i-1].Position) {
			t.Errorf("stream positions not increasing: %v then %v", evs[i-1].Position, e.Position)
		}
	}
	want := []domain.State{domain.StateRequested, domain.StateCreating, domain.StateCancelled}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("stream: sandbox's events %v, want %v (the order they happened in)", got, want)
	}
}
