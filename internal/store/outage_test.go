package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// replicas is several replicas' stores on one database, each behind a link
// the test can cut, on one manual clock.
type replicas struct {
	ctx   context.Context
	clock *storetest.Clock
	links []*storetest.Link
	sts   []*store.Store
}

const tolerance = 2 * time.Second // two janitor intervals of 1 s

func newReplicas(t *testing.T, n int, ceiling time.Duration) replicas {
	t.Helper()
	url := storetest.NewURL(t)
	r := replicas{ctx: t.Context(), clock: storetest.NewClock()}
	for i := range n {
		l := storetest.NewLink(t, url)
		r.links = append(r.links, l)
		r.sts = append(r.sts, store.New(l.Pool, store.WithClock(r.clock.Now), store.WithOutagePolicy(store.OutagePolicy{
			Replica: string(rune('a' + i)), Tolerance: tolerance, Ceiling: ceiling,
		})))
	}
	if _, err := r.sts[0].RegisterAPIKey(r.ctx, "acme", "test", "key-acme"); err != nil {
		t.Fatal(err)
	}
	return r
}

// tick is one janitor interval: the clock moves a second, and every
// replica whose link is up runs the step before its sweep. A replica
// whose link is cut must fail it with ErrUnavailable.
func (r replicas) tick(t *testing.T) {
	t.Helper()
	r.clock.Advance(time.Second)
	for i, st := range r.sts {
		_, credited, err := st.CreditOutage(r.ctx)
		switch {
		case r.links[i].IsCut():
			if !errors.Is(err, domain.ErrUnavailable) {
				t.Fatalf("replica %d, cut off: CreditOutage = %v, want ErrUnavailable", i, err)
			}
		case err != nil:
			t.Fatalf("replica %d: CreditOutage: %v", i, err)
		case credited:
			t.Fatalf("replica %d credited an outage in a tick", i)
		}
	}
}

// credit runs the step on replica i, which must reach Postgres.
func (r replicas) credit(t *testing.T, i int) (store.OutageCredit, bool) {
	t.Helper()
	c, credited, err := r.sts[i].CreditOutage(r.ctx)
	if err != nil {
		t.Fatalf("replica %d: CreditOutage: %v", i, err)
	}
	return c, credited
}

func (r replicas) create(t *testing.T, i int, owner string, ttl time.Duration) domain.Sandbox {
	t.Helper()
	if err := r.sts[i].SettleOutage(r.ctx); err != nil {
		t.Fatal(err)
	}
	sb, _, err := r.sts[i].CreateSandbox(r.ctx, domain.CreateParams{
		Tenant: "acme", Provider: "sim", Owner: owner, OwnerTTL: ttl, TTL: time.Hour, CreateTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func (r replicas) lease(t *testing.T, owner string) time.Time {
	t.Helper()
	owners, err := r.sts[0].ListOwners(r.ctx, "acme", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Name == owner {
			return o.ExpiresAt
		}
	}
	t.Fatalf("no owner %s", owner)
	return time.Time{}
}

// creditEvents returns the sandbox's outage_credited events.
func (r replicas) creditEvents(t *testing.T, id string) []domain.Event {
	t.Helper()
	evs, err := r.sts[0].SandboxEvents(r.ctx, id, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	var out []domain.Event
	for _, e := range evs {
		if e.Reason == domain.ReasonOutageCredited {
			out = append(out, e)
		}
	}
	return out
}

func (r replicas) credits(t *testing.T) int {
	t.Helper()
	var n int
	if err := r.sts[0].Pool().QueryRow(r.ctx, `SELECT count(*) FROM outage_credits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOneReplicasOutageExtendsNoLease: replica b loses Postgres for 15 s
// while a reaches it; an owner takes a 4 s lease through a just before b
// comes back, then dies. b's return credits nothing: the lease lapses when
// it said, and b's own sweep ends the sandbox (the measurement of the
// issue, where the lease was stretched by b's 15 s).
func TestOneReplicasOutageExtendsNoLease(t *testing.T) {
	t.Parallel()
	r := newReplicas(t, 2, time.Hour)
	r.tick(t)
	r.links[1].Cut()
	for range 14 {
		r.tick(t)
	}
	if err := r.sts[1].SettleOutage(r.ctx); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("SettleOutage on the cut replica = %v, want ErrUnavailable", err)
	}
	sb := r.create(t, 0, "brief", 4*time.Second)
	lease := r.lease(t, "brief")
	r.tick(t)
	r.links[1].Restore()
	if c, credited := r.credit(t, 1); credited {
		t.Fatalf("b's return credited %s (%+v); want nothing: a reached Postgres all along", c.Length(), c)
	}
	if err := r.sts[1].SettleOutage(r.ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.lease(t, "brief"); !got.Equal(lease) {
		t.Errorf("the lease moved from %s to %s", lease, got)
	}
	for range 4 {
		r.tick(t)
	}
	ended, err := r.sts[1].EndLapsedOwners(r.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ended) != 1 || ended[0].ID != sb.ID || r.clock.Now().Sub(lease) > time.Second {
		t.Errorf("b's sweep at lease+%s ended %v, want the sandbox of the dead owner", r.clock.Now().Sub(lease), ended)
	}
	if evs, n := r.creditEvents(t, sb.ID), r.credits(t); len(evs) != 0 || n != 0 {
		t.Errorf("credit events %v and %d credits recorded, want none", evs, n)
	}
}

// TestWholeOutageCreditedOnce: every one of three replicas loses Postgres
// for 20 s. The first back credits the 20 s, once; the others credit
// nothing more; an owner that kept (trying to) heartbeat keeps its sandbox,
// one whose lease lapsed before the outage does not come back, and the
// credit is in the sandbox's history and in outage_credits.
func TestWholeOutageCreditedOnce(t *testing.T) {
	t.Parallel()
	r := newReplicas(t, 3, time.Hour)
	alive := r.create(t, 0, "alive", 10*time.Second)
	gone := r.create(t, 1, "gone", time.Second)
	ownerless, _, err := r.sts[2].CreateSandbox(r.ctx, domain.CreateParams{
		Tenant: "acme", Provider: "sim", TTL: 15 * time.Second, CreateTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.tick(t)
	r.tick(t) // "gone" lapsed a second ago
	if ended, err := r.sts[0].EndLapsedOwners(r.ctx, 100); err != nil || len(ended) != 1 || ended[0].ID != gone.ID {
		t.Fatalf("EndLapsedOwners = %v, %v; want the lapsed owner's sandbox", ended, err)
	}
	lease, deadline := r.lease(t, "alive"), ownerless.ExpiresAt
	from := r.clock.Now()
	for _, l := range r.links {
		l.Cut()
	}
	for range 20 {
		r.tick(t) // every replica fails its step
		for i, st := range r.sts {
			if _, err := st.RenewOwnerLease(r.ctx, "acme", "alive", 10*time.Second); !errors.Is(err, domain.ErrUnavailable) {
				t.Fatalf("replica %d: a heartbeat during the outage = %v, want ErrUnavailable", i, err)
			}
		}
	}
	for _, l := range r.links {
		l.Restore()
	}
	c, credited := r.credit(t, 1)
	if !credited || !c.From.Equal(from) || c.Length() != 20*time.Second || c.Replica != "b" || c.Owners != 1 || c.Sandboxes != 2 {
		t.Fatalf("the first replica back credited %+v (%v); want 20s from %s by b, 1 owner and 2 sandboxes", c, credited, from)
	}
	for _, i := range []int{0, 2} {
		if c, credited := r.credit(t, i); credited {
			t.Errorf("replica %d credited again: %+v", i, c)
		}
	}
	r.tick(t)
	if got, want := r.lease(t, "alive"), lease.Add(20*time.Second); !got.Equal(want) {
		t.Errorf("alive's lease ends %s, want %s (20s later)", got, want)
	}
	cur, err := r.sts[0].Sandbox(r.ctx, ownerless.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := deadline.Add(20 * time.Second); !cur.ExpiresAt.Equal(want) {
		t.Errorf("the ownerless sandbox's deadline is %s, want %s", cur.ExpiresAt, want)
	}
	for _, st := range r.sts {
		if ended, err := st.EndLapsedOwners(r.ctx, 100); err != nil || len(ended) != 0 {
			t.Errorf("EndLapsedOwners after the credit = %v, %v; want nothing ended", ended, err)
		}
	}
	evs := r.creditEvents(t, alive.ID)
	if len(evs) != 1 || evs[0].Actor != domain.ActorJanitor || evs[0].From != evs[0].To ||
		!strings.Contains(evs[0].Message, "replica b") || !strings.Contains(evs[0].Message, "(20s)") {
		t.Errorf("alive's credit events: %+v; want one naming replica b and 20s", evs)
	}
	if evs := r.creditEvents(t, gone.ID); len(evs) != 0 {
		t.Errorf("the ended sandbox got credit events: %+v", evs)
	}
	if n := r.credits(t); n != 1 {
		t.Errorf("%d credits recorded, want 1", n)
	}
}

// TestOutageCreditCeiling: after a 5-minute outage, with a 30 s ceiling, no
// lease ends more than 30 s after Postgres is back: a short lease gets the
// outage's length back in full, a longer one is cut to the ceiling, and one
// that ran past the ceiling anyway is left alone.
func TestOutageCreditCeiling(t *testing.T) {
	t.Parallel()
	const ceiling = 30 * time.Second
	r := newReplicas(t, 1, ceiling)
	r.create(t, 0, "short", 10*time.Second)
	r.create(t, 0, "medium", 2*time.Minute)
	r.create(t, 0, "long", 10*time.Minute)
	r.tick(t)
	short, medium, long := r.lease(t, "short"), r.lease(t, "medium"), r.lease(t, "long")
	r.clock.Advance(5 * time.Minute) // nobody reaches Postgres
	c, credited := r.credit(t, 0)
	back := r.clock.Now()
	if !credited || c.Length() != 5*time.Minute || c.Ceiling != ceiling || c.Owners != 2 {
		t.Fatalf("credit %+v (%v), want 5m with ceiling 30s over 2 owners", c, credited)
	}
	for _, tc := range []struct {
		owner string
		want  time.Time
	}{
		{"short", short.Add(5 * time.Minute)}, // 9 s after the return: what it had left
		{"medium", back.Add(ceiling)},         // it had 119 s left: cut to the ceiling
		{"long", long},                        // 9 min past the return: untouched
	} {
		if got := r.lease(t, tc.owner); !got.Equal(tc.want) {
			t.Errorf("%s's lease ends %s after the return, want %s", tc.owner, got.Sub(back), tc.want.Sub(back))
		}
	}
	if medium.Add(5*time.Minute).Before(back.Add(ceiling)) || !long.After(back.Add(ceiling)) {
		t.Fatal("the test's leases do not straddle the ceiling")
	}
	r.clock.Advance(ceiling + time.Second)
	ended, err := r.sts[0].EndLapsedOwners(r.ctx, 100)
	if err != nil || len(ended) != 2 {
		t.Errorf("EndLapsedOwners %s after the return = %v, %v; want short's and medium's sandboxes", ceiling+time.Second, ended, err)
	}
}

// TestSettleOutage: within the tolerance of its last step a replica judges
// leases without asking the database; past it, SettleOutage runs the step
// first, so a heartbeat through a replica that just came back from a whole
// outage finds its lease credited, not lapsed.
func TestSettleOutage(t *testing.T) {
	t.Parallel()
	r := newReplicas(t, 1, time.Hour)
	sb := r.create(t, 0, "o", 3*time.Second)
	r.credit(t, 0)
	r.links[0].Cut()
	if err := r.sts[0].SettleOutage(r.ctx); err != nil {
		t.Errorf("SettleOutage right after a step = %v, want nil without the database", err)
	}
	r.clock.Advance(tolerance + time.Millisecond)
	if err := r.sts[0].SettleOutage(r.ctx); !errors.Is(err, domain.ErrUnavailable) {
		t.Errorf("SettleOutage past the tolerance on a cut link = %v, want ErrUnavailable", err)
	}
	r.clock.Advance(10 * time.Second)
	r.links[0].Restore()
	if err := r.sts[0].SettleOutage(r.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sts[0].RenewOwnerLease(r.ctx, "acme", "o", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	cur, err := r.sts[0].Sandbox(r.ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !cur.Live() {
		t.Errorf("the heartbeat after the outage ended the sandbox: %s/%s", cur.State, cur.Reason)
	}
	if evs := r.creditEvents(t, sb.ID); len(evs) != 1 {
		t.Errorf("credit events %+v, want one", evs)
	}
}

// TestOutageCreditSkipsSandboxesEndedMeanwhile: a sandbox that another
// transaction ends while the credit runs (its row locked, then committed
// terminal) gets no credit event after its end, and is not counted.
func TestOutageCreditSkipsSandboxesEndedMeanwhile(t *testing.T) {
	t.Parallel()
	r := newReplicas(t, 1, time.Hour)
	kept := r.create(t, 0, "kept", 3*time.Second)
	ending := r.create(t, 0, "ending", 3*time.Second)
	r.credit(t, 0)
	r.clock.Advance(30 * time.Second) // nobody reaches Postgres

	tx, err := r.sts[0].Pool().Begin(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(r.ctx) }()
	if _, err := tx.Exec(r.ctx, `UPDATE sandboxes SET state = 'cancelled', reason = 'requested', ended_at = now() WHERE id = $1`, ending.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   store.OutageCredit
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, _, err := r.sts[0].CreditOutage(r.ctx)
		done <- result{c, err}
	}()
	// The credit waits on the ended sandbox's row lock; the end commits.
	var waiting bool
	for deadline := time.Now().Add(10 * time.Second); !waiting && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := r.sts[0].Pool().QueryRow(r.ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%outage_credits%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if !waiting {
		t.Fatal("the credit never waited on the locked sandbox")
	}
	if err := tx.Commit(r.ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.c.Sandboxes != 1 || res.c.Owners != 2 {
		t.Fatalf("credit = %+v, %v; want 2 owners and 1 sandbox (the one still live)", res.c, res.err)
	}
	if evs := r.creditEvents(t, ending.ID); len(evs) != 0 {
		t.Errorf("the sandbox ended meanwhile got credit events: %+v", evs)
	}
	if evs := r.creditEvents(t, kept.ID); len(evs) != 1 {
		t.Errorf("the live sandbox got %d credit events, want 1", len(evs))
	}
}

// TestOutageRecordWaitsForNoLock: a replica cut off from Postgres in the
// middle of a transaction that locked the outage record (its session idle
// in the transaction, as Postgres sees it, until it notices) does not stop
// the others from recording that they reached Postgres; before, each
// waited for the lock, so no replica recorded anything for as long as the
// cut lasted, and the span was credited as an outage of the whole service.
func TestOutageRecordWaitsForNoLock(t *testing.T) {
	r := newReplicas(t, 2, time.Minute)
	r.tick(t)
	holder, err := r.links[0].Pool.Begin(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := holder.Exec(r.ctx, `SELECT 1 FROM outage_credit WHERE id FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.clock.Advance(time.Second)
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		_, credited, err := r.sts[1].CreditOutage(ctx)
		cancel()
		if err != nil || credited {
			t.Fatalf("CreditOutage beside a held lock = credited %v, %v; want a record, at once", credited, err)
		}
	}
}

// TestIdleTransactionsEnd: Tether's sessions end a transaction left idle
// (a replica cut off between two of its statements) after 10 s, so its row
// locks are not held for as long as Postgres takes to notice the dead
// connection; a DATABASE_URL may say otherwise.
func TestIdleTransactionsEnd(t *testing.T) {
	url := storetest.NewURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, tc := range []struct{ url, want string }{
		{url, "10s"},
		{url + sep + "idle_in_transaction_session_timeout=0", "0"},
	} {
		pool, err := store.Connect(t.Context(), tc.url, 1)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(t.Context(), `SHOW idle_in_transaction_session_timeout`).Scan(&got)
		pool.Close()
		if err != nil || got != tc.want {
			t.Errorf("idle_in_transaction_session_timeout on %s = %q %v, want %s", tc.url, got, err, tc.want)
		}
	}
}
