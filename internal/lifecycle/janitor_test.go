package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

const grace = 10 * time.Second

// janitorEnv is an env on a manual clock with a janitor that the test runs
// by hand, one sweep at a time.
type janitorEnv struct {
	*env
	janitor *lifecycle.Janitor
}

func setupJanitor(t *testing.T) janitorEnv {
	t.Helper()
	e := setupWith(t, storetest.NewClock())
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Second, OrphanGrace: grace},
		e.st, []domain.Provider{e.sim}, e.log, nil)
	return janitorEnv{env: e, janitor: j}
}

func (e janitorEnv) sweep() lifecycle.Report {
	e.t.Helper()
	rep, err := e.janitor.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	return rep
}

// ready drives a sandbox to ready by hand, with a real sim resource.
func (e janitorEnv) ready(mutate ...func(*domain.CreateParams)) domain.Sandbox {
	e.t.Helper()
	sb := e.create("", mutate...)
	claims, err := e.st.ClaimCreates(e.ctx, "sim", "", "w", 1, time.Hour, store.Share{})
	if err != nil || len(claims) != 1 || claims[0].Sandbox.ID != sb.ID {
		e.t.Fatalf("claim: %v %v", claims, err)
	}
	res, err := e.sim.Create(e.ctx, domain.CreateSpec{SandboxID: sb.ID})
	if err != nil {
		e.t.Fatal(err)
	}
	sb, err = e.st.MarkReady(e.ctx, sb.ID, claims[0].Sandbox.Epoch, res)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e janitorEnv) get(id string) domain.Sandbox {
	e.t.Helper()
	sb, err := e.st.Sandbox(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func owned(owner string, ttl time.Duration) func(*domain.CreateParams) {
	return func(p *domain.CreateParams) { p.Owner, p.OwnerTTL = owner, ttl }
}

func TestJanitorEndsSandboxesOfLapsedOwners(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	lapsing := e.ready(owned("lapsing", 10*time.Second))
	alive := e.ready(owned("alive", 10*time.Second))
	unowned := e.ready()
	queued := e.create("", owned("lapsing", 10*time.Second))

	e.clock.Advance(5 * time.Second)
	if _, err := e.st.RenewOwnerLease(e.ctx, "acme", "alive", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.OwnerExpired != 0 {
		t.Fatalf("sweep before any lapse ended %d sandboxes", rep.OwnerExpired)
	}
	e.clock.Advance(6 * time.Second) // "lapsing" lapsed 1s ago; "alive" has 19s left
	if rep := e.sweep(); rep.OwnerExpired != 2 {
		t.Errorf("OwnerExpired = %d, want 2", rep.OwnerExpired)
	}
	if got := e.get(lapsing.ID); got.State != domain.StateTerminated || got.Reason != domain.ReasonOwnerExpired {
		t.Errorf("lapsed owner's ready sandbox = %s/%s, want terminated/owner_expired", got.State, got.Reason)
	}
	if got := e.get(queued.ID); got.State != domain.StateCancelled || !got.Released || got.Reason != domain.ReasonOwnerExpired {
		t.Errorf("lapsed owner's requested sandbox = %s/%s released=%v, want cancelled, released", got.State, got.Reason, got.Released)
	}
	for _, id := range []string{alive.ID, unowned.ID} {
		if got := e.get(id); got.State != domain.StateReady {
			t.Errorf("sandbox %s = %s, want still ready", id, got.State)
		}
	}
}

func TestJanitorEndsExpiredSandboxes(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	short := e.ready(func(p *domain.CreateParams) { p.TTL = 5 * time.Second })
	long := e.ready(func(p *domain.CreateParams) { p.TTL = time.Hour })
	queued := e.create("", func(p *domain.CreateParams) { p.TTL = 5 * time.Second })
	e.clock.Advance(6 * time.Second)
	if rep := e.sweep(); rep.Expired != 2 {
		t.Errorf("Expired = %d, want 2", rep.Expired)
	}
	if got := e.get(short.ID); got.State != domain.StateTerminated || got.Reason != domain.ReasonExpired {
		t.Errorf("expired sandbox = %s/%s, want terminated/expired", got.State, got.Reason)
	}
	if got := e.get(queued.ID); got.State != domain.StateCancelled || got.Reason != domain.ReasonExpired {
		t.Errorf("expired queued sandbox = %s/%s", got.State, got.Reason)
	}
	if got := e.get(long.ID); got.State != domain.StateReady {
		t.Errorf("unexpired sandbox = %s", got.State)
	}
	// A renewal moves the deadline.
	if _, _, err := e.st.RenewSandbox(e.ctx, "acme", long.ID, 2*time.Hour, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(90 * time.Minute)
	e.sweep()
	if got := e.get(long.ID); got.State != domain.StateReady {
		t.Errorf("renewed sandbox = %s, want ready", got.State)
	}
}

func TestJanitorSettlesOverdueCreations(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	stuck := e.create("")
	if _, err := e.st.ClaimCreates(e.ctx, "sim", "", "hung", 1, time.Hour, store.Share{}); err != nil {
		t.Fatal(err)
	}
	unclaimed := e.create("", func(p *domain.CreateParams) { p.Provider = "nowhere" })
	e.clock.Advance(2 * time.Minute) // both are past their one-minute creation deadline
	if rep := e.sweep(); rep.Overdue != 2 {
		t.Errorf("Overdue = %d, want 2", rep.Overdue)
	}
	got := e.get(stuck.ID)
	if got.State != domain.StateFailed || got.Reason != domain.ReasonCreateFailed || got.Released {
		t.Errorf("stuck creation = %s/%s released=%v, want failed/create_failed, not yet released", got.State, got.Reason, got.Released)
	}
	got = e.get(unclaimed.ID)
	if got.State != domain.StateCancelled || got.Reason != domain.ReasonCreateFailed || !got.Released {
		t.Errorf("unclaimed = %s/%s released=%v, want cancelled/create_failed, released", got.State, got.Reason, got.Released)
	}
	// The hung executor's lease still holds the failed sandbox; once it
	// lapses, a release worker may take it.
	e.clock.Advance(time.Hour)
	claims, err := e.st.ClaimReleases(e.ctx, "sim", "", "w2", 10, time.Minute, store.Share{})
	if err != nil || len(claims) != 1 || claims[0].Sandbox.ID != stuck.ID {
		t.Errorf("release claim = %v, %v; want the failed sandbox", claims, err)
	}
}

func TestJanitorRescuesLapsedLeases(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	sb := e.create("")
	first, err := e.st.ClaimCreates(e.ctx, "sim", "", "dead", 1, 10*time.Second, store.Share{})
	if err != nil || len(first) != 1 {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.LeasesRescued != 0 {
		t.Errorf("rescued %d live leases", rep.LeasesRescued)
	}
	e.clock.Advance(11 * time.Second)
	if rep := e.sweep(); rep.LeasesRescued != 1 {
		t.Errorf("LeasesRescued = %d, want 1", rep.LeasesRescued)
	}
	again, err := e.st.ClaimCreates(e.ctx, "sim", "", "alive", 1, 10*time.Second, store.Share{})
	if err != nil || len(again) != 1 || again[0].Sandbox.ID != sb.ID || again[0].Sandbox.Epoch <= first[0].Sandbox.Epoch {
		t.Fatalf("re-claim = %+v, %v", again, err)
	}
	if _, err := e.st.RenewLease(e.ctx, sb.ID, first[0].Sandbox.Epoch, "dead", time.Minute); err == nil {
		t.Error("the dead executor renewed its lease after the rescue")
	}
}

func TestJanitorDestroysOrphans(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	// A resource Tether has no record of, e.g. from a crash of another install.
	stranger := domain.NewID()
	if _, err := e.sim.Create(e.ctx, domain.CreateSpec{SandboxID: stranger}); err != nil {
		t.Fatal(err)
	}
	// A resource whose sandbox was cancelled and released before a late
	// create landed.
	late := e.create("")
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", late.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.Create(e.ctx, domain.CreateSpec{SandboxID: late.ID}); err != nil {
		t.Fatal(err)
	}
	live := e.ready()

	if rep := e.sweep(); rep.OrphansDestroyed != 0 {
		t.Fatalf("destroyed %d orphans within the grace period", rep.OrphansDestroyed)
	}
	// The sim stamps resources with the wall clock, which ran on while the
	// test set up: move the store's clock past the grace period from now.
	e.clock.Advance(time.Since(e.clock.Now()) + grace + time.Second)
	if rep := e.sweep(); rep.OrphansDestroyed != 2 {
		t.Errorf("OrphansDestroyed = %d, want 2", rep.OrphansDestroyed)
	}
	for _, id := range []string{stranger, late.ID} {
		if e.holds(id) {
			t.Errorf("orphan %s still held", id)
		}
	}
	if !e.holds(live.ID) {
		t.Error("the janitor destroyed a live sandbox's resource")
	}
	evs, err := e.st.ReconcileEvents(e.ctx, "", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, ev := range evs {
		actions[ev.SandboxID] = ev.Action + "/" + ev.Tenant
	}
	if actions[stranger] != "orphan_destroyed/" || actions[late.ID] != "orphan_destroyed/acme" {
		t.Errorf("reconcile events = %v", actions)
	}
}

func TestJanitorMarksLostSandboxes(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	gone := e.ready()
	kept := e.ready()
	if err := os.Remove(filepath.Join(e.simDir, gone.ID)); err != nil {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.Lost != 0 {
		t.Fatalf("marked %d sandboxes lost within the grace period", rep.Lost)
	}
	e.clock.Advance(grace + time.Second)
	if rep := e.sweep(); rep.Lost != 1 {
		t.Errorf("Lost = %d, want 1", rep.Lost)
	}
	if got := e.get(gone.ID); got.State != domain.StateTerminated || got.Reason != domain.ReasonLost {
		t.Errorf("lost sandbox = %s/%s, want terminated/lost", got.State, got.Reason)
	}
	if got := e.get(kept.ID); got.State != domain.StateReady {
		t.Errorf("intact sandbox = %s, want ready", got.State)
	}
	if h := e.history(gone.ID); h != "requested>creating>ready>terminated" {
		t.Errorf("history = %s", h)
	}
}

// TestJanitorWithExecutorReleasesEverything: janitor and executor together
// leave no resource behind the ended sandboxes.
func TestJanitorWithExecutorReleasesEverything(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	sb := e.ready(owned("short", 5*time.Second))
	e.executor(lifecycle.ExecutorConfig{})
	e.clock.Advance(6 * time.Second)
	e.sweep()
	e.waitFor(sb.ID, "released", isReleased)
	if e.holds(sb.ID) {
		t.Error("resource held after the owner lapsed")
	}
}

func TestJanitorLeadership(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	lead := func(holder string) bool {
		ok, err := e.st.TryLead(e.ctx, "janitor", holder, 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !lead("a") || lead("b") {
		t.Fatal("want a to lead and b not")
	}
	e.clock.Advance(10 * time.Second)
	if !lead("a") || lead("b") {
		t.Fatal("a's renewed lease lost to b")
	}
	e.clock.Advance(16 * time.Second) // a stopped renewing
	if !lead("b") || lead("a") {
		t.Fatal("b did not take over a lapsed leadership")
	}
	if err := e.st.Resign(e.ctx, "janitor", "b"); err != nil {
		t.Fatal(err)
	}
	if !lead("a") {
		t.Fatal("leadership not free after resigning")
	}
}

// slowInventory is a provider whose inventory takes long to list, like a
// cloud API under load.
type slowInventory struct {
	*sim.Provider
	delay time.Duration
}

func (s slowInventory) List(ctx context.Context) ([]domain.Resource, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(s.delay):
	}
	return s.Provider.List(ctx)
}

// TestSlowReconcileDoesNotDelaySweeps: the leader's reconciliation may wait
// on a slow provider, but lapsed owners' sandboxes still end within about
// one interval.
func TestSlowReconcileDoesNotDelaySweeps(t *testing.T) {
	t.Parallel()
	e := setup(t)
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: 100 * time.Millisecond},
		e.st, []domain.Provider{slowInventory{e.sim, 5 * time.Second}}, e.log, nil)
	j.Start(e.ctx)
	t.Cleanup(func() { j.Stop(context.Background()) })
	sb := e.create("", owned("brief", 300*time.Millisecond))
	lapse := sb.CreatedAt.Add(300 * time.Millisecond)
	ended := e.waitFor(sb.ID, "ended", func(s domain.Sandbox) bool { return s.State.Terminal() })
	if ended.Reason != domain.ReasonOwnerExpired {
		t.Errorf("reason = %s, want owner_expired", ended.Reason)
	}
	if over := ended.EndedAt.Sub(lapse); over > 2*time.Second {
		t.Errorf("the sandbox outlived its owner by %s while a reconciliation was listing for 5s", over)
	}
}

func TestJanitorForgetsOldIdempotencyKeys(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	keyed := func(key string) domain.Sandbox {
		sb, _, err := e.st.CreateSandbox(e.ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: 48 * time.Hour,
			CreateTimeout: time.Minute, IdempotencyKey: key, RequestHash: []byte("h")})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	old := keyed("old")
	e.clock.Advance(23 * time.Hour)
	recent := keyed("recent")
	e.clock.Advance(2 * time.Hour) // "old" is 25h old, "recent" 2h
	if rep := e.sweep(); rep.KeysForgotten != 1 {
		t.Errorf("KeysForgotten = %d, want 1", rep.KeysForgotten)
	}
	if again := keyed("old"); again.ID == old.ID {
		t.Error("a forgotten key still returned its old sandbox")
	}
	if again, _, err := e.st.CreateSandbox(e.ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour,
		CreateTimeout: time.Minute, IdempotencyKey: "recent", RequestHash: []byte("h")}); err != nil || again.ID != recent.ID {
		t.Errorf("a recent key = %s, %v; want its sandbox %s", again.ID, err, recent.ID)
	}
}
