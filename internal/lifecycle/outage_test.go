package lifecycle_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestJanitorsCreditAWholeOutageOnce: three replicas' janitors, each on its
// own link to one database, sweep every second. Postgres is cut off from
// all three for 12 s: their sweeps fail and judge nothing. Once it is back,
// one sweep credits the 12 s, the others nothing, and the owner whose
// heartbeats failed meanwhile keeps its sandbox; the owner that was
// already dead loses its sandbox within one interval of its credited lease.
// Then one replica alone is cut off for 12 s: the other two sweep on, the
// credit is nothing, and a dead owner's sandbox ends on time.
func TestJanitorsCreditAWholeOutageOnce(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	url := storetest.NewURL(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var (
		links    []*storetest.Link
		stores   []*store.Store
		janitors []*lifecycle.Janitor
	)
	for i := range 3 {
		l := storetest.NewLink(t, url)
		st := store.New(l.Pool, store.WithClock(clock.Now), store.WithOutagePolicy(store.OutagePolicy{
			Replica: string(rune('a' + i)), Tolerance: 2 * time.Second, Ceiling: time.Minute,
		}))
		links, stores = append(links, l), append(stores, st)
		janitors = append(janitors, lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Second}, st, nil, log, nil))
	}
	ctx := t.Context()
	if _, err := stores[0].RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	create := func(owner string, ttl time.Duration) sandbox.Sandbox {
		t.Helper()
		if err := stores[0].SettleOutage(ctx); err != nil {
			t.Fatal(err)
		}
		sb, _, err := stores[0].CreateSandbox(ctx, sandbox.CreateParams{
			Tenant: "acme", Provider: "sim", Owner: owner, OwnerTTL: ttl, TTL: time.Hour, CreateTimeout: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	// sweep is one interval: every janitor sweeps; it returns how many
	// credited an outage and how many sandboxes ended owner_expired.
	sweep := func() (credits, ended int) {
		t.Helper()
		clock.Advance(time.Second)
		for i, j := range janitors {
			rep, err := j.Sweep(ctx)
			if links[i].IsCut() {
				if !errors.Is(err, sandbox.ErrUnavailable) || rep.OwnerExpired != 0 {
					t.Fatalf("replica %d, cut off: sweep = %+v, %v; want ErrUnavailable and nothing judged", i, rep, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("replica %d: sweep: %v", i, err)
			}
			credits += rep.OutagesCredited
			ended += rep.OwnerExpired
		}
		return credits, ended
	}
	state := func(id string) sandbox.Sandbox {
		t.Helper()
		sb, err := stores[0].Sandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}

	heartbeating := create("heartbeating", 3*time.Second)
	dead := create("dead", 3*time.Second)
	sweep()
	for _, l := range links {
		l.Cut()
	}
	for range 12 {
		sweep()
	}
	for _, l := range links {
		l.Restore()
	}
	// The sweep that brings them back: the first janitor credits 12 s
	// (from the last record, 2 s before the dead owner's lease ran out).
	if credits, ended := sweep(); credits != 1 || ended != 0 {
		t.Fatalf("the first sweeps back credited %d outages and ended %d sandboxes; want 1 and 0", credits, ended)
	}
	if _, err := stores[1].RenewOwnerLease(ctx, "acme", "heartbeating", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if credits, _ := sweep(); credits != 0 {
		t.Fatalf("a later sweep credited %d outages, want 0", credits)
	}
	// dead's lease: 3 s from its start, plus 13 s of credit (the 12 cut
	// sweeps and the one back); it ends within one sweep of that.
	var waited int
	for s := state(dead.ID); s.Live(); s = state(dead.ID) {
		if waited++; waited > 3 {
			t.Fatal("the dead owner's sandbox outlived its credited lease by more than one interval")
		}
		sweep()
		if _, err := stores[2].RenewOwnerLease(ctx, "acme", "heartbeating", 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if sb := state(heartbeating.ID); !sb.Live() {
		t.Fatalf("the owner that heartbeated through the outage lost its sandbox: %s/%s", sb.State, sb.Reason)
	}

	// Now replica c alone loses Postgres, for longer than the lease.
	late := create("late", 3*time.Second)
	links[2].Cut()
	for range 12 {
		if credits, _ := sweep(); credits != 0 {
			t.Fatal("a sweep credited an outage while two replicas reached Postgres")
		}
	}
	links[2].Restore()
	if credits, _ := sweep(); credits != 0 {
		t.Fatal("c's return credited its own outage")
	}
	sb := state(late.ID)
	if sb.Live() || sb.Reason != sandbox.ReasonOwnerExpired || sb.EndedAt == nil {
		t.Fatalf("the late owner's sandbox is %s/%s, want ended owner_expired", sb.State, sb.Reason)
	}
	if took := sb.EndedAt.Sub(late.CreatedAt); took > 4*time.Second {
		t.Errorf("the late owner's sandbox ended %s after its 3 s lease began, want within 4 s", took)
	}
}
