package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

type bundle struct {
	st    *store.Store
	clock *storetest.Clock
	ctx   context.Context
}

func setup(t *testing.T, opts ...store.Option) bundle {
	t.Helper()
	clock := storetest.NewClock()
	st := storetest.New(t, append([]store.Option{store.WithClock(clock.Now)}, opts...)...)
	ctx := t.Context()
	if _, err := st.RegisterAPIKey(ctx, "acme", "test", "key-acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterAPIKey(ctx, "other", "test", "key-other"); err != nil {
		t.Fatal(err)
	}
	return bundle{st: st, clock: clock, ctx: ctx}
}

func (b bundle) create(t *testing.T, mutate ...func(*domain.CreateParams)) domain.Sandbox {
	t.Helper()
	p := domain.CreateParams{
		Tenant: "acme", Provider: "sim", Labels: map[string]string{"team": "a"},
		TTL: time.Hour, CreateTimeout: 5 * time.Minute,
	}
	for _, m := range mutate {
		m(&p)
	}
	sb, created, err := b.st.CreateSandbox(b.ctx, p)
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if !created {
		t.Fatalf("CreateSandbox: created = false, want true")
	}
	return sb
}

// claimOne claims the one requested sandbox of provider sim for worker.
func (b bundle) claimOne(t *testing.T, worker string) store.Claim {
	t.Helper()
	claims, err := b.st.ClaimCreates(b.ctx, "sim", "", worker, 1, 10*time.Second, store.Share{})
	if err != nil {
		t.Fatalf("ClaimCreates: %v", err)
	}
	if len(claims) != 1 {
		t.Fatalf("ClaimCreates: got %d claims, want 1", len(claims))
	}
	return claims[0]
}

func (b bundle) events(t *testing.T, id string) []domain.Event {
	t.Helper()
	evs, err := b.st.SandboxEvents(b.ctx, id, 0, 500)
	if err != nil {
		t.Fatalf("SandboxEvents: %v", err)
	}
	return evs
}

// path renders a history as "requested>creating>ready".
func path(evs []domain.Event) string {
	s := ""
	for i, e := range evs {
		if i > 0 {
			s += ">"
		}
		s += string(e.To)
	}
	return s
}

func TestCreateAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, func(p *domain.CreateParams) { p.Owner = "agent-1" })
	if sb.State != domain.StateRequested || sb.Released || sb.Owner != "agent-1" {
		t.Fatalf("created sandbox = %+v, want requested, unreleased, owner agent-1", sb)
	}
	if !domain.ValidID(sb.ID) {
		t.Fatalf("id %q is not a valid sandbox id", sb.ID)
	}
	if got, want := sb.ExpiresAt, b.clock.Now().Add(time.Hour); !got.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", got, want)
	}
	got, err := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if got.ID != sb.ID || got.Labels["team"] != "a" {
		t.Errorf("GetSandbox = %+v, want the created sandbox", got)
	}
	if _, err := b.st.GetSandbox(b.ctx, "other", sb.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("GetSandbox from another tenant: err = %v, want ErrNotFound", err)
	}
	evs := b.events(t, sb.ID)
	if len(evs) != 1 || evs[0].From != "" || evs[0].To != domain.StateRequested || evs[0].Actor != domain.ActorClient {
		t.Errorf("events after create = %+v, want one request event", evs)
	}
}

// TestTransitionTableMatchesDatabase checks every (from, to) pair against
// both the Go transition table and the database trigger: they must agree,
// and the database must refuse every illegal transition whatever code path
// attempts it.
func TestTransitionTableMatchesDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, from := range domain.States {
		for _, to := range domain.States {
			if from == to {
				continue
			}
			t.Run(fmt.Sprintf("%s>%s", from, to), func(t *testing.T) {
				sb := b.create(t)
				// Put the row in state from directly (triggers off for setup).
				tx, err := b.st.Pool().Begin(b.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(b.ctx) }()
				// As the table's owner, not a superuser: the tests run as
				// Tether's own role. The DDL is undone with the transaction.
				if _, err := tx.Exec(b.ctx, `ALTER TABLE sandboxes DISABLE TRIGGER USER`); err != nil {
					t.Fatal(err)
				}
				ended := "NULL"
				if from.Terminal() {
					ended = "now()"
				}
				if _, err := tx.Exec(b.ctx, `UPDATE sandboxes SET state = $2, ended_at = `+ended+` WHERE id = $1`, sb.ID, string(from)); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(b.ctx, `ALTER TABLE sandboxes ENABLE TRIGGER USER`); err != nil {
					t.Fatal(err)
				}
				endedTo := "NULL"
				if to.Terminal() {
					endedTo = "coalesce(ended_at, now())"
				}
				_, err = tx.Exec(b.ctx, `UPDATE sandboxes SET state = $2, ended_at = `+endedTo+` WHERE id = $1`, sb.ID, string(to))
				allowed := domain.CanTransition(from, to)
				if allowed && err != nil {
					t.Errorf("database refused legal transition %s -> %s: %v", from, to, err)
				}
				if !allowed && err == nil {
					t.Errorf("database allowed illegal transition %s -> %s", from, to)
				}
			})
		}
	}
}

func TestEventsAreAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE sandbox_events SET message = 'rewritten' WHERE sandbox_id = $1`, sb.ID); err == nil {
		t.Error("UPDATE of sandbox_events succeeded, want it refused")
	}
	if _, err := b.st.Pool().Exec(b.ctx, `DELETE FROM sandbox_events WHERE sandbox_id = $1`, sb.ID); err == nil {
		t.Error("DELETE from sandbox_events succeeded, want it refused")
	}
}

// A delete can race the create of the same client-chosen id (dcode's
// provider replays its create, then deletes): if the create commits after
// the end's statement took its snapshot, the end finds nothing live but the
// read after it finds the sandbox requested. It must end it then, not
// answer it unchanged and leave it running.
func TestEndSandboxRacingItsCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := domain.NewID()
	reads := 0
	b.st.SetAfterNotLive(func() {
		reads++
		if reads == 1 {
			b.create(t, func(p *domain.CreateParams) { p.ID = id })
		}
	})
	got, changed, err := b.st.EndSandbox(b.ctx, "acme", id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye")
	if err != nil {
		t.Fatalf("EndSandbox: %v", err)
	}
	if !changed || got.State != domain.StateCancelled || !got.Released {
		t.Errorf("EndSandbox = %s (released %v), changed %v; want cancelled, released, changed", got.State, got.Released, changed)
	}
	if p := path(b.events(t, id)); p != "requested>cancelled" {
		t.Errorf("history = %s", p)
	}
	// With no create at all, the answer is still NOT_FOUND.
	_, _, err = b.st.EndSandbox(b.ctx, "acme", domain.NewID(), domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye")
	if !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("EndSandbox of an unknown id: err = %v, want ErrNotFound", err)
	}
}

func TestEndSandboxInEachState(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("requested", func(t *testing.T) {
		sb := b.create(t)
		got, changed, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye")
		if err != nil || !changed {
			t.Fatalf("EndSandbox = %v, %v; want changed", changed, err)
		}
		// Nothing was ever created at the provider: released at once.
		if got.State != domain.StateCancelled || !got.Released || got.Reason != domain.ReasonRequested || got.EndedAt == nil {
			t.Errorf("ended requested sandbox = %+v, want cancelled, released, reason requested", got)
		}
		if p := path(b.events(t, sb.ID)); p != "requested>cancelled" {
			t.Errorf("history = %s", p)
		}
	})
	t.Run("creating", func(t *testing.T) {
		sb := b.create(t)
		c := b.claimOne(t, "w1")
		got, changed, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye")
		if err != nil || !changed {
			t.Fatalf("EndSandbox = %v, %v; want changed", changed, err)
		}
		if got.State != domain.StateCancelled || got.Released {
			t.Errorf("ended creating sandbox = %+v, want cancelled and not yet released", got)
		}
		// The executor's result is refused...
		if _, err := b.st.MarkReady(b.ctx, sb.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "x"}); !errors.Is(err, domain.ErrFenced) {
			t.Errorf("MarkReady after cancel: err = %v, want ErrFenced", err)
		}
		// ...and the release queue leaves it to the executor while its lease lasts.
		if claims, err := b.st.ClaimReleases(b.ctx, "sim", "", "w2", 10, time.Second, store.Share{}); err != nil || len(claims) != 0 {
			t.Errorf("ClaimReleases during the creator's lease = %d claims, %v; want none", len(claims), err)
		}
		if err := b.st.MarkReleased(b.ctx, sb.ID, c.Sandbox.Epoch); err != nil {
			t.Errorf("MarkReleased by the creator: %v", err)
		}
		if p := path(b.events(t, sb.ID)); p != "requested>creating>cancelled" {
			t.Errorf("history = %s", p)
		}
	})
	t.Run("ready", func(t *testing.T) {
		sb := b.create(t)
		c := b.claimOne(t, "w1")
		if _, err := b.st.MarkReady(b.ctx, sb.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p-1", WorkDir: "/workspace"}); err != nil {
			t.Fatal(err)
		}
		got, changed, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonExpired, domain.ActorJanitor, domain.Caller{}, "ttl")
		if err != nil || !changed {
			t.Fatalf("EndSandbox = %v, %v; want changed", changed, err)
		}
		if got.State != domain.StateTerminated || got.Released || got.Reason != domain.ReasonExpired || got.ProviderID != "p-1" {
			t.Errorf("ended ready sandbox = %+v, want terminated, unreleased, reason expired", got)
		}
		claims, err := b.st.ClaimReleases(b.ctx, "sim", "", "w2", 10, time.Second, store.Share{})
		if err != nil || len(claims) != 1 || claims[0].Sandbox.ID != sb.ID {
			t.Fatalf("ClaimReleases = %+v, %v; want the terminated sandbox", claims, err)
		}
		if err := b.st.MarkReleased(b.ctx, sb.ID, claims[0].Sandbox.Epoch); err != nil {
			t.Fatal(err)
		}
		if p := path(b.events(t, sb.ID)); p != "requested>creating>ready>terminated" {
			t.Errorf("history = %s", p)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		sb := b.create(t)
		if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
		got, changed, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonOwnerReleased, domain.ActorClient, domain.Caller{}, "")
		if err != nil || changed {
			t.Fatalf("second EndSandbox = %v, %v; want unchanged, no error", changed, err)
		}
		if got.State != domain.StateCancelled || got.Reason != domain.ReasonRequested {
			t.Errorf("terminal sandbox changed: %+v", got)
		}
		if n := len(b.events(t, sb.ID)); n != 2 {
			t.Errorf("history has %d events, want 2 (no event for a no-op)", n)
		}
	})
	t.Run("other tenant", func(t *testing.T) {
		sb := b.create(t)
		if _, _, err := b.st.EndSandbox(b.ctx, "other", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("EndSandbox from another tenant: err = %v, want ErrNotFound", err)
		}
		if got, _ := b.st.GetSandbox(b.ctx, "acme", sb.ID); got.State != domain.StateRequested {
			t.Errorf("another tenant's delete changed the sandbox: %s", got.State)
		}
	})
}

// TestStolenLeaseIsFenced: an executor whose lease lapsed and was taken by
// another cannot overwrite the new owner's result.
func TestStolenLeaseIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	first := b.claimOne(t, "slow")
	if claims, _ := b.st.ClaimCreates(b.ctx, "sim", "", "fast", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatalf("claimed a sandbox whose lease is live")
	}
	b.clock.Advance(11 * time.Second) // the slow executor's lease lapses
	second := b.claimOne(t, "fast")
	if second.Sandbox.Epoch <= first.Sandbox.Epoch || second.From != domain.StateCreating {
		t.Fatalf("reclaim: epoch %d from %s, want epoch > %d from creating", second.Sandbox.Epoch, second.From, first.Sandbox.Epoch)
	}
	if _, err := b.st.RenewLease(b.ctx, sb.ID, first.Sandbox.Epoch, "slow", time.Minute); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("RenewLease with the stolen lease: err = %v, want ErrFenced", err)
	}
	if _, err := b.st.MarkReady(b.ctx, sb.ID, second.Sandbox.Epoch, domain.Resource{ProviderID: "fast-result"}); err != nil {
		t.Fatalf("MarkReady by the new owner: %v", err)
	}
	if _, err := b.st.MarkReady(b.ctx, sb.ID, first.Sandbox.Epoch, domain.Resource{ProviderID: "slow-result"}); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("MarkReady by the old owner: err = %v, want ErrFenced", err)
	}
	if _, err := b.st.MarkFailed(b.ctx, sb.ID, first.Sandbox.Epoch, domain.ActorExecutor, "late failure"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("MarkFailed by the old owner: err = %v, want ErrFenced", err)
	}
	if err := b.st.Unclaim(b.ctx, sb.ID, first.Sandbox.Epoch, b.clock.Now(), "x", false); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("Unclaim by the old owner: err = %v, want ErrFenced", err)
	}
	got, _ := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if got.State != domain.StateReady || got.ProviderID != "fast-result" {
		t.Errorf("sandbox = %s %q, want ready with the new owner's result", got.State, got.ProviderID)
	}
	if p := path(b.events(t, sb.ID)); p != "requested>creating>ready" {
		t.Errorf("history = %s", p)
	}
}

// TestConcurrentClaimsAreDisjoint: many workers claiming at once never get
// the same sandbox.
func TestConcurrentClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 60
	for range n {
		b.create(t)
	}
	var (
		mu    sync.Mutex
		seen  = map[string]string{}
		dupes []string
		wg    sync.WaitGroup
	)
	for w := range 6 {
		worker := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				claims, err := b.st.ClaimCreates(b.ctx, "sim", "", worker, 3, time.Minute, store.Share{})
				if err != nil {
					t.Error(err)
					return
				}
				if len(claims) == 0 {
					return
				}
				mu.Lock()
				for _, c := range claims {
					if prev, ok := seen[c.Sandbox.ID]; ok {
						dupes = append(dupes, c.Sandbox.ID+" by "+prev+" and "+worker)
					}
					seen[c.Sandbox.ID] = worker
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(dupes) > 0 {
		t.Errorf("claimed twice: %v", dupes)
	}
	if len(seen) != n {
		t.Errorf("claimed %d sandboxes, want %d", len(seen), n)
	}
}

func TestRetryAndHandBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	c := b.claimOne(t, "w1")
	if err := b.st.Unclaim(b.ctx, sb.ID, c.Sandbox.Epoch, b.clock.Now().Add(5*time.Second), "transient", false); err != nil {
		t.Fatal(err)
	}
	if claims, _ := b.st.ClaimCreates(b.ctx, "sim", "", "w2", 10, time.Minute, store.Share{}); len(claims) != 0 {
		t.Fatal("claimed a sandbox before its retry time")
	}
	got, _ := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if got.State != domain.StateCreating || got.Error != "transient" {
		t.Errorf("waiting sandbox = %s %q, want creating with the last error", got.State, got.Error)
	}
	b.clock.Advance(6 * time.Second)
	again := b.claimOne(t, "w2")
	if again.Sandbox.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", again.Sandbox.Attempts)
	}
	// Only the first claim is a transition.
	if p := path(b.events(t, sb.ID)); p != "requested>creating" {
		t.Errorf("history = %s", p)
	}
}

func TestReleaseRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	c := b.claimOne(t, "w1")
	if _, err := b.st.MarkFailed(b.ctx, sb.ID, c.Sandbox.Epoch, domain.ActorExecutor, "boom"); err != nil {
		t.Fatal(err)
	}
	// The failing executor still holds the lease: nobody else releases it.
	if claims, _ := b.st.ClaimReleases(b.ctx, "sim", "", "w2", 10, time.Minute, store.Share{}); len(claims) != 0 {
		t.Fatal("release claimed during the creator's lease")
	}
	if err := b.st.ReleaseFailed(b.ctx, sb.ID, c.Sandbox.Epoch, b.clock.Now().Add(time.Second), "destroy timed out"); err != nil {
		t.Fatal(err)
	}
	got, _ := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if got.Released || got.ReleaseError != "destroy timed out" || got.Reason != domain.ReasonCreateFailed || got.Error != "boom" {
		t.Errorf("sandbox after failed release = %+v", got)
	}
	b.clock.Advance(2 * time.Second)
	claims, err := b.st.ClaimReleases(b.ctx, "sim", "", "w2", 10, time.Minute, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("ClaimReleases = %d, %v; want 1", len(claims), err)
	}
	if err := b.st.MarkReleased(b.ctx, sb.ID, c.Sandbox.Epoch); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("MarkReleased with the old epoch: err = %v, want ErrFenced", err)
	}
	if err := b.st.MarkReleased(b.ctx, sb.ID, claims[0].Sandbox.Epoch); err != nil {
		t.Fatal(err)
	}
	got, _ = b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if !got.Released || got.ReleasedAt == nil || got.ReleaseError != "" {
		t.Errorf("sandbox after release = %+v, want released", got)
	}
	if claims, _ := b.st.ClaimReleases(b.ctx, "sim", "", "w3", 10, time.Minute, store.Share{}); len(claims) != 0 {
		t.Error("a released sandbox was claimed for release again")
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyed := func(key, hash string) func(*domain.CreateParams) {
		return func(p *domain.CreateParams) { p.IdempotencyKey, p.RequestHash = key, []byte(hash) }
	}
	first := b.create(t, keyed("k1", "h1"))
	again, created, err := b.st.CreateSandbox(b.ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour,
		CreateTimeout: time.Minute, IdempotencyKey: "k1", RequestHash: []byte("h1")})
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("repeat = %s created=%v err=%v; want %s, not created", again.ID, created, err, first.ID)
	}
	_, _, err = b.st.CreateSandbox(b.ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour,
		CreateTimeout: time.Minute, IdempotencyKey: "k1", RequestHash: []byte("h2")})
	if code := domain.ErrorCode(err); code != domain.CodeIdempotencyKeyReused {
		t.Errorf("reuse with another request: code %s (%v), want IDEMPOTENCY_KEY_REUSED", code, err)
	}
	other := b.create(t, keyed("k1", "h2"), func(p *domain.CreateParams) { p.Tenant = "other" })
	if other.ID == first.ID {
		t.Error("the same key in another tenant returned the first tenant's sandbox")
	}
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM sandboxes`).Scan(&n); err != nil || n != 2 {
		t.Errorf("sandboxes = %d (%v), want 2", n, err)
	}
}

func TestCreateWithClientID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := domain.NewID()
	req := func(tenant, key, hash string) domain.CreateParams {
		return domain.CreateParams{ID: id, Tenant: tenant, Provider: "sim", TTL: time.Hour, CreateTimeout: time.Minute,
			IdempotencyKey: key, RequestHash: []byte(hash)}
	}
	first, created, err := b.st.CreateSandbox(b.ctx, req("acme", id, "h1"))
	if err != nil || !created || first.ID != id {
		t.Fatalf("create with id %s = %s created=%v err=%v", id, first.ID, created, err)
	}
	again, created, err := b.st.CreateSandbox(b.ctx, req("acme", id, "h1"))
	if err != nil || created || again.ID != id {
		t.Fatalf("replay = %s created=%v err=%v; want %s, not created", again.ID, created, err, id)
	}
	_, _, err = b.st.CreateSandbox(b.ctx, req("acme", id, "h2"))
	if code := domain.ErrorCode(err); code != domain.CodeIdempotencyKeyReused {
		t.Errorf("the id with another request: code %s (%v), want IDEMPOTENCY_KEY_REUSED", code, err)
	}
	for _, r := range []domain.CreateParams{req("other", id, "h1"), req("acme", "another-key", "h1")} {
		_, _, err = b.st.CreateSandbox(b.ctx, r)
		if code := domain.ErrorCode(err); code != domain.CodeSandboxIDTaken {
			t.Errorf("tenant %s, key %s: code %s (%v), want SANDBOX_ID_TAKEN", r.Tenant, r.IdempotencyKey, code, err)
		}
	}
	// Without a key (a store caller that is not the API), a taken id is
	// refused too, and never reaches the batched insert.
	r := req("acme", "", "")
	if _, _, err = b.st.CreateSandbox(b.ctx, r); domain.ErrorCode(err) != domain.CodeSandboxIDTaken {
		t.Errorf("without a key: %v, want SANDBOX_ID_TAKEN", err)
	}
	var n, keys int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*), (SELECT count(*) FROM idempotency_keys) FROM sandboxes`).Scan(&n, &keys); err != nil || n != 1 || keys != 1 {
		t.Errorf("sandboxes = %d, idempotency keys = %d (%v); want 1 and 1: a refused create writes nothing", n, keys, err)
	}

	// With an owner, as the Python client always sends: the owner's lease
	// is taken once, a replay is the same sandbox, a clash writes nothing.
	owned := domain.NewID()
	withOwner := func(tenant, hash string) domain.CreateParams {
		return domain.CreateParams{ID: owned, Tenant: tenant, Provider: "sim", Owner: "agent-7", TTL: time.Hour,
			OwnerTTL: time.Minute, CreateTimeout: time.Minute, IdempotencyKey: owned, RequestHash: []byte(hash)}
	}
	sb, created, err := b.st.CreateSandbox(b.ctx, withOwner("acme", "o1"))
	if err != nil || !created || sb.ID != owned || sb.Owner != "agent-7" {
		t.Fatalf("create with id and owner = %+v created=%v err=%v", sb, created, err)
	}
	again, created, err = b.st.CreateSandbox(b.ctx, withOwner("acme", "o1"))
	if err != nil || created || again.ID != owned {
		t.Fatalf("replay with owner = %s created=%v err=%v", again.ID, created, err)
	}
	if _, _, err = b.st.CreateSandbox(b.ctx, withOwner("other", "o1")); domain.ErrorCode(err) != domain.CodeSandboxIDTaken {
		t.Errorf("another tenant, with owner: %v, want SANDBOX_ID_TAKEN", err)
	}
	var owners int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM owners WHERE name = 'agent-7'`).Scan(&owners); err != nil || owners != 1 {
		t.Errorf("owner rows for agent-7 = %d (%v), want 1: the refused create of tenant other wrote one", owners, err)
	}
}

func TestListPaginationUnderInserts(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := t.Context()
	if _, err := st.RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	mk := func() string {
		sb, _, err := st.CreateSandbox(ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour, CreateTimeout: time.Minute})
		if err != nil {
			t.Error(err)
		}
		return sb.ID
	}
	before := map[string]bool{}
	for range 120 {
		before[mk()] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				mk()
			}
		}
	})
	seen := map[string]int{}
	var cursor *domain.Cursor
	var prev *domain.Sandbox
	for pages := 0; ; pages++ {
		items, next, err := st.ListSandboxes(ctx, domain.ListFilter{Tenant: "acme", Limit: 7, After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for i := range items {
			seen[items[i].ID]++
			if prev != nil && (items[i].CreatedAt.After(prev.CreatedAt) ||
				(items[i].CreatedAt.Equal(prev.CreatedAt) && items[i].ID > prev.ID)) {
				t.Errorf("not newest first: %s after %s", items[i].ID, prev.ID)
			}
			prev = &items[i]
		}
		if next == nil {
			break
		}
		cursor = next
	}
	close(stop)
	wg.Wait()
	for id := range before {
		if seen[id] != 1 {
			t.Errorf("pre-existing sandbox %s seen %d times, want 1", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("sandbox %s seen %d times", id, n)
		}
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.create(t, func(p *domain.CreateParams) {
		p.Owner = "o1"
		p.Labels = map[string]string{"env": "prod", "team": "x"}
	})
	b.clock.Advance(time.Second)
	c := b.create(t, func(p *domain.CreateParams) { p.Labels = map[string]string{"env": "prod"} })
	b.clock.Advance(time.Second)
	d := b.create(t, func(p *domain.CreateParams) { p.Provider = "local" })
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", c.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	released := true
	cases := []struct {
		name string
		f    domain.ListFilter
		want []string
	}{
		{"all newest first", domain.ListFilter{}, []string{d.ID, c.ID, a.ID}},
		{"state", domain.ListFilter{States: []domain.State{domain.StateCancelled}}, []string{c.ID}},
		{"states", domain.ListFilter{States: []domain.State{domain.StateCancelled, domain.StateRequested}}, []string{d.ID, c.ID, a.ID}},
		{"owner", domain.ListFilter{Owner: "o1"}, []string{a.ID}},
		{"provider", domain.ListFilter{Provider: "local"}, []string{d.ID}},
		{"label", domain.ListFilter{Labels: map[string]string{"env": "prod"}}, []string{c.ID, a.ID}},
		{"labels AND", domain.ListFilter{Labels: map[string]string{"env": "prod", "team": "x"}}, []string{a.ID}},
		{"created after", domain.ListFilter{CreatedAfter: a.CreatedAt}, []string{d.ID, c.ID}},
		{"created before", domain.ListFilter{CreatedBefore: c.CreatedAt}, []string{a.ID}},
		{"released", domain.ListFilter{Released: &released}, []string{c.ID}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Tenant, tc.f.Limit = "acme", 50
			items, next, err := b.st.ListSandboxes(b.ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || next != nil {
				t.Errorf("got %v (next %v), want %v", got, next, tc.want)
			}
		})
	}
	items, _, _ := b.st.ListSandboxes(b.ctx, domain.ListFilter{Tenant: "other", Limit: 50})
	if len(items) != 0 {
		t.Errorf("another tenant lists %d sandboxes, want 0", len(items))
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if k, err := b.st.Authenticate(b.ctx, "key-acme"); err != nil || k.Tenant != "acme" || k.Name != "test" || k.ID == "" {
		t.Errorf("Authenticate = %+v, %v; want acme's key named test", k, err)
	}
	if _, err := b.st.Authenticate(b.ctx, "nope"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("unknown key: err = %v, want ErrNotFound", err)
	}
	if _, err := b.st.RegisterAPIKey(b.ctx, "acme", "test", "key-acme"); err != nil {
		t.Errorf("re-registering the same key: %v", err)
	}
	if _, err := b.st.RegisterAPIKey(b.ctx, "other", "test", "key-acme"); err == nil {
		t.Error("registering acme's key for another tenant succeeded")
	}
	rec, key, err := b.st.CreateAPIKey(b.ctx, "new-tenant", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if k, err := b.st.Authenticate(b.ctx, key); err != nil || k.Tenant != "new-tenant" || k != rec {
		t.Errorf("Authenticate(new key) = %+v, %v; want %+v", k, err, rec)
	}
	var stored int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8')`, key).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("the raw key is stored (%d rows, %v)", stored, err)
	}
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec, key, err := b.st.CreateAPIKey(b.ctx, "acme", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.ID, "key_") || rec.Name != "deploy" || rec.LastUsedAt != nil || rec.RevokedAt != nil {
		t.Errorf("created key = %+v", rec)
	}
	keys, err := b.st.APIKeys(b.ctx, "acme")
	if err != nil || len(keys) != 2 || (keys[0] != rec && keys[1] != rec) {
		t.Fatalf("APIKeys(acme) = %+v, %v; want test and deploy", keys, err)
	}

	// last_used_at: written by the first use, then at most once a minute.
	lastUsed := func() *time.Time {
		t.Helper()
		var at *time.Time
		if err := b.st.Pool().QueryRow(b.ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, rec.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	first := b.clock.Now()
	if _, err := b.st.Authenticate(b.ctx, key); err != nil {
		t.Fatal(err)
	}
	if at := lastUsed(); at == nil || !at.Equal(first) {
		t.Errorf("last_used_at after first use = %v, want %v", at, first)
	}
	b.clock.Advance(30 * time.Second)
	if _, err := b.st.Authenticate(b.ctx, key); err != nil {
		t.Fatal(err)
	}
	if at := lastUsed(); at == nil || !at.Equal(first) {
		t.Errorf("last_used_at 30s later = %v, want unchanged %v", at, first)
	}
	b.clock.Advance(31 * time.Second)
	if _, err := b.st.Authenticate(b.ctx, key); err != nil {
		t.Fatal(err)
	}
	if at := lastUsed(); at == nil || !at.Equal(b.clock.Now()) {
		t.Errorf("last_used_at 61s later = %v, want %v", at, b.clock.Now())
	}

	// Another tenant can neither revoke it nor see it.
	others, err := b.st.APIKeys(b.ctx, "other")
	if err != nil || len(others) != 1 {
		t.Fatalf("APIKeys(other) = %+v, %v", others, err)
	}
	if _, err := b.st.RevokeAPIKey(b.ctx, "other", rec.ID, others[0].ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("other tenant revoking: err = %v, want ErrNotFound", err)
	}
	if keys, err := b.st.APIKeys(b.ctx, "other"); err != nil || len(keys) != 1 || keys[0].ID == rec.ID {
		t.Errorf("APIKeys(other) = %+v, %v", keys, err)
	}
	admin := keys[0].ID // the tenant's operator key ("test")
	if admin == rec.ID {
		admin = keys[1].ID
	}
	revoked, err := b.st.RevokeAPIKey(b.ctx, "acme", rec.ID, admin)
	if err != nil || revoked.RevokedAt == nil {
		t.Fatalf("revoke = %+v, %v", revoked, err)
	}
	b.clock.Advance(time.Second)
	if again, err := b.st.RevokeAPIKey(b.ctx, "acme", rec.ID, admin); err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("revoking again = %+v, %v; want the first revocation kept", again, err)
	}
	if _, err := b.st.Authenticate(b.ctx, key); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("revoked key: err = %v, want ErrNotFound", err)
	}
	// Registering a revoked key again (a restart with BOOTSTRAP_API_KEY)
	// does not bring it back.
	if _, err := b.st.RegisterAPIKey(b.ctx, "acme", "deploy", key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Authenticate(b.ctx, key); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("re-registered revoked key: err = %v, want ErrNotFound", err)
	}
}

func TestEventsRecordTheCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	by := domain.Caller{KeyID: "key_a", KeyName: "alice"}
	batched := b.create(t, func(p *domain.CreateParams) { p.Caller = by })
	owned := b.create(t, func(p *domain.CreateParams) { p.Caller = by; p.Owner = "agent"; p.OwnerTTL = time.Hour })
	if _, err := b.st.TransferOwner(b.ctx, "acme", batched.ID, "agent", time.Hour, by); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", batched.ID, domain.ReasonRequested, domain.ActorClient, by, "bye"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.ReleaseOwner(b.ctx, "acme", "agent", by); err != nil {
		t.Fatal(err)
	}
	expired := b.create(t)
	b.clock.Advance(2 * time.Hour)
	if _, err := b.st.EndExpired(b.ctx, 10); err != nil {
		t.Fatal(err)
	}
	events, err := b.st.TenantEvents(b.ctx, "acme", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{batched.ID: 3, owned.ID: 2} // request, transfer, end; request, release
	for _, e := range events {
		switch {
		case e.SandboxID == expired.ID:
			if e.Caller != (domain.Caller{}) {
				t.Errorf("event %+v of a sandbox made without a key names one", e)
			}
		case e.Actor == domain.ActorClient:
			if e.Caller != by {
				t.Errorf("client event %+v: caller = %+v, want %+v", e, e.Caller, by)
			}
			want[e.SandboxID]--
		}
	}
	if want[batched.ID] != 0 || want[owned.ID] != 0 {
		t.Errorf("client events not seen (left: %v) in %+v", want, events)
	}
}

func TestActivity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	code, n := 0, int64(12)
	long := strings.Repeat("é", domain.MaxActivityTarget) // 2 bytes each
	by := domain.Caller{KeyID: "key_a", KeyName: "alice"}
	for _, a := range []domain.Activity{
		{SandboxID: sb.ID, Tenant: "acme", Caller: by, Kind: domain.ActivityExec, Target: long, ExitCode: &code, Bytes: &n, Duration: 1500 * time.Millisecond},
		{SandboxID: sb.ID, Tenant: "acme", Kind: domain.ActivityFileRead, Target: "/workspace/a", Error: "FILE_NOT_FOUND"},
	} {
		if err := b.st.RecordActivity(b.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.st.RecordActivity(b.ctx, domain.Activity{SandboxID: sb.ID, Tenant: "acme", Kind: "bogus"}); err == nil {
		t.Error("an unknown kind was recorded")
	}
	got, err := b.st.SandboxActivity(b.ctx, sb.ID, 0, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("SandboxActivity = %+v, %v", got, err)
	}
	if a := got[0]; a.Caller != by || len(a.Target) != domain.MaxActivityTarget || *a.ExitCode != 0 || *a.Bytes != 12 ||
		a.Duration != 1500*time.Millisecond || !a.At.Equal(b.clock.Now()) {
		t.Errorf("exec record = %+v", a)
	}
	if a := got[1]; a.Caller != (domain.Caller{}) || a.ExitCode != nil || a.Bytes != nil || a.Error != "FILE_NOT_FOUND" {
		t.Errorf("file record = %+v", a)
	}
	if page, err := b.st.SandboxActivity(b.ctx, sb.ID, got[0].ID, 10); err != nil || len(page) != 1 || page[0].ID != got[1].ID {
		t.Errorf("page after the first = %+v, %v", page, err)
	}
}

func TestSchemaCurrent(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ok, err := st.SchemaCurrent(t.Context())
	if err != nil || !ok {
		t.Errorf("SchemaCurrent = %v, %v; want true", ok, err)
	}
	applied, err := st.Migrate(t.Context())
	if err != nil || len(applied) != 0 {
		t.Errorf("Migrate on a current schema applied %v, %v; want nothing", applied, err)
	}
}

func TestOwnerLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owned := func(p *domain.CreateParams) { p.Owner, p.OwnerTTL = "agent", 10*time.Second }

	if _, err := b.st.RenewOwnerLease(b.ctx, "acme", "agent", time.Minute); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("heartbeat of an owner never named: err = %v, want ErrNotFound", err)
	}
	first := b.create(t, owned)
	if _, err := b.st.RenewOwnerLease(b.ctx, "other", "agent", time.Minute); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("heartbeat of another tenant's owner: err = %v, want ErrNotFound", err)
	}
	expires, err := b.st.RenewOwnerLease(b.ctx, "acme", "agent", time.Minute)
	if err != nil || !expires.Equal(b.clock.Now().Add(time.Minute)) {
		t.Fatalf("heartbeat = %v, %v", expires, err)
	}
	// A create while the lease is live keeps the longer lease.
	b.clock.Advance(30 * time.Second)
	second := b.create(t, owned)
	b.clock.Advance(20 * time.Second) // 50s in: the 1-minute lease still holds
	if got, _ := b.st.GetSandbox(b.ctx, "acme", first.ID); got.State != domain.StateRequested {
		t.Fatalf("sandbox ended under a live lease: %s", got.State)
	}
	// After a lapse, a create ends what outlived the old lease and starts a new one.
	b.clock.Advance(20 * time.Second)
	third := b.create(t, owned)
	for _, id := range []string{first.ID, second.ID} {
		got, _ := b.st.GetSandbox(b.ctx, "acme", id)
		if got.State != domain.StateCancelled || got.Reason != domain.ReasonOwnerExpired {
			t.Errorf("sandbox of the lapsed lease = %s/%s, want cancelled/owner_expired", got.State, got.Reason)
		}
	}
	if got, _ := b.st.GetSandbox(b.ctx, "acme", third.ID); got.State != domain.StateRequested {
		t.Errorf("the new lease's sandbox = %s", got.State)
	}
	// A heartbeat after a lapse does the same.
	b.clock.Advance(11 * time.Second)
	if _, err := b.st.RenewOwnerLease(b.ctx, "acme", "agent", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.st.GetSandbox(b.ctx, "acme", third.ID); got.Reason != domain.ReasonOwnerExpired {
		t.Errorf("heartbeat after a lapse revived %s (%s)", third.ID, got.State)
	}
}

func TestReleaseOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owned := func(p *domain.CreateParams) { p.Owner, p.OwnerTTL = "agent", time.Minute }
	x, y := b.create(t, owned), b.create(t, owned)
	other := b.create(t)
	ended, err := b.st.ReleaseOwner(b.ctx, "acme", "agent", domain.Caller{})
	if err != nil || len(ended) != 2 {
		t.Fatalf("ReleaseOwner = %d, %v; want 2", len(ended), err)
	}
	for _, id := range []string{x.ID, y.ID} {
		if got, _ := b.st.GetSandbox(b.ctx, "acme", id); got.Reason != domain.ReasonOwnerReleased || got.Live() {
			t.Errorf("%s = %s/%s, want ended owner_released", id, got.State, got.Reason)
		}
	}
	if got, _ := b.st.GetSandbox(b.ctx, "acme", other.ID); !got.Live() {
		t.Error("another owner's sandbox ended")
	}
	if ended, err := b.st.ReleaseOwner(b.ctx, "acme", "agent", domain.Caller{}); err != nil || len(ended) != 0 {
		t.Errorf("second ReleaseOwner = %d, %v; want 0, nil", len(ended), err)
	}
	if ended, err := b.st.ReleaseOwner(b.ctx, "acme", "nobody", domain.Caller{}); err != nil || len(ended) != 0 {
		t.Errorf("ReleaseOwner of an unknown owner = %d, %v; want 0, nil", len(ended), err)
	}
	if ended, err := b.st.ReleaseOwner(b.ctx, "other", "agent", domain.Caller{}); err != nil || len(ended) != 0 {
		t.Errorf("another tenant ended %d of acme's sandboxes (%v)", len(ended), err)
	}
}

func TestRenewSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t)
	b.clock.Advance(time.Hour)
	got, capped, err := b.st.RenewSandbox(b.ctx, "acme", sb.ID, 2*time.Hour, 24*time.Hour)
	if err != nil || capped || !got.ExpiresAt.Equal(b.clock.Now().Add(2*time.Hour)) {
		t.Errorf("renew = %v capped=%v err=%v", got.ExpiresAt, capped, err)
	}
	got, capped, err = b.st.RenewSandbox(b.ctx, "acme", sb.ID, 24*time.Hour, 24*time.Hour)
	if err != nil || !capped || !got.ExpiresAt.Equal(sb.CreatedAt.Add(24*time.Hour)) {
		t.Errorf("renew past the max lifetime = %v capped=%v err=%v; want capped at creation+24h", got.ExpiresAt, capped, err)
	}
	if _, _, err := b.st.RenewSandbox(b.ctx, "other", sb.ID, time.Hour, 24*time.Hour); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("renew from another tenant: err = %v, want ErrNotFound", err)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.st.RenewSandbox(b.ctx, "acme", sb.ID, time.Hour, 24*time.Hour)
	var e *domain.Error
	if !errors.As(err, &e) || e.Code != domain.CodeStateConflict || domain.ConflictState(err) != domain.StateCancelled {
		t.Errorf("renew of an ended sandbox: err = %v, want SANDBOX_STATE_CONFLICT with state cancelled", err)
	}
}

// TestClientReadsLeaveOutProviderInputs: env (which may hold secrets) and
// the other creation inputs reach workers, not client reads.
func TestClientReadsLeaveOutProviderInputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, func(p *domain.CreateParams) {
		p.Env = map[string]string{"TOKEN": "secret"}
		p.Setup = "make deps"
	})
	got, err := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	listed, _, err := b.st.ListSandboxes(b.ctx, domain.ListFilter{Tenant: "acme", Limit: 10})
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v", err)
	}
	for _, c := range []domain.Sandbox{got, listed[0]} {
		if len(c.Env) != 0 || c.Setup != "" || got.Labels["team"] != "a" {
			t.Errorf("client read = env %v setup %q labels %v; want no env or setup, labels kept", c.Env, c.Setup, c.Labels)
		}
	}
	full, err := b.st.Sandbox(b.ctx, sb.ID)
	if err != nil || full.Env["TOKEN"] != "secret" || full.Setup != "make deps" {
		t.Errorf("worker read = env %v setup %q, %v; want them", full.Env, full.Setup, err)
	}
}

// TestConcurrentCreatesShareBatches creates many sandboxes at once, so that
// they go in shared statements, among them some that the database refuses
// (an unknown tenant): those fail alone, and every other caller gets its own
// sandbox, with its own labels and its own first event.
func TestConcurrentCreatesShareBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 120
	type outcome struct {
		sb  domain.Sandbox
		err error
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := domain.CreateParams{
				Tenant: "acme", Provider: "sim", Labels: map[string]string{"n": fmt.Sprint(i)},
				TTL: time.Hour, CreateTimeout: time.Minute,
			}
			if i%40 == 3 {
				p.Tenant = "no-such-tenant"
			}
			sb, _, err := b.st.CreateSandbox(b.ctx, p)
			outcomes[i] = outcome{sb, err}
		})
	}
	wg.Wait()
	if n := b.st.SharedCalls()["creates"]; n == 0 {
		t.Fatal("no create flew with company: the batched statement went untested")
	}
	ids := map[string]bool{}
	for i, o := range outcomes {
		if i%40 == 3 {
			if o.err == nil {
				t.Errorf("create %d for an unknown tenant succeeded", i)
			}
			continue
		}
		if o.err != nil {
			t.Errorf("create %d: %v", i, o.err)
			continue
		}
		if o.sb.Labels["n"] != fmt.Sprint(i) || o.sb.Tenant != "acme" || ids[o.sb.ID] {
			t.Errorf("create %d got %+v, not its own sandbox", i, o.sb)
		}
		ids[o.sb.ID] = true
		if evs := b.events(t, o.sb.ID); len(evs) != 1 || evs[0].To != domain.StateRequested {
			t.Errorf("create %d: events %+v, want one request event", i, evs)
		}
	}
	all, _, err := b.st.ListSandboxes(b.ctx, domain.ListFilter{Tenant: "acme", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(ids) {
		t.Errorf("%d sandboxes listed, want the %d created", len(all), len(ids))
	}
}

// TestConcurrentResultsShareBatches records many executors' results at
// once, so that they share statements, among them results that are fenced
// (the sandbox was cancelled, or the epoch is stale): each of those fails
// alone with ErrFenced, and every other sandbox gets its own result.
func TestConcurrentResultsShareBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 90
	for range n {
		b.create(t)
	}
	claims, err := b.st.ClaimCreates(b.ctx, "sim", "", "w", n, time.Minute, store.Share{})
	if err != nil || len(claims) != n {
		t.Fatalf("ClaimCreates: %d claims, %v", len(claims), err)
	}
	cancelled := map[string]bool{}
	for i, c := range claims {
		if i%3 == 0 {
			if _, _, err := b.st.EndSandbox(b.ctx, "acme", c.Sandbox.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "x"); err != nil {
				t.Fatal(err)
			}
			cancelled[c.Sandbox.ID] = true
		}
	}
	stale := func(i int) bool { return i%3 == 1 && i%2 == 0 }
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Go(func() {
			epoch := c.Sandbox.Epoch
			if stale(i) {
				epoch--
			}
			// Half through MarkReady, half through SetReady (the
			// executor's, which reads back less): both batch.
			res := domain.Resource{ProviderID: "p-" + c.Sandbox.ID}
			if i%2 == 0 {
				_, errs[i] = b.st.MarkReady(b.ctx, c.Sandbox.ID, epoch, res)
			} else {
				errs[i] = b.st.SetReady(b.ctx, c.Sandbox.ID, epoch, res)
			}
		})
	}
	wg.Wait()
	for _, kind := range []string{"readies", "quiet readies"} {
		if n := b.st.SharedCalls()[kind]; n == 0 {
			t.Fatalf("no %s result flew with company: the batched statement went untested", kind)
		}
	}
	for i, c := range claims {
		id := c.Sandbox.ID
		fenced := cancelled[id] || stale(i)
		if fenced != errors.Is(errs[i], domain.ErrFenced) || (!fenced && errs[i] != nil) {
			t.Errorf("MarkReady %d (fenced %v): err = %v", i, fenced, errs[i])
		}
		got, _ := b.st.GetSandbox(b.ctx, "acme", id)
		switch {
		case cancelled[id]:
			if got.State != domain.StateCancelled || got.ProviderID != "" {
				t.Errorf("cancelled sandbox %d became %s %q", i, got.State, got.ProviderID)
			}
		case stale(i):
			if got.State != domain.StateCreating {
				t.Errorf("sandbox %d with a stale result is %s, want still creating", i, got.State)
			}
		default:
			if got.State != domain.StateReady || got.ProviderID != "p-"+id {
				t.Errorf("sandbox %d = %s %q, want ready with its own result", i, got.State, got.ProviderID)
			}
			if p := path(b.events(t, id)); p != "requested>creating>ready" {
				t.Errorf("sandbox %d history = %s", i, p)
			}
		}
	}

	// The cancelled ones are released, some by a worker with a stale epoch,
	// once the creating worker's lease has lapsed.
	b.clock.Advance(2 * time.Minute)
	rel, err := b.st.ClaimReleases(b.ctx, "sim", "", "r", n, time.Minute, store.Share{})
	if err != nil || len(rel) != len(cancelled) {
		t.Fatalf("ClaimReleases: %d claims, %v; want %d", len(rel), err, len(cancelled))
	}
	relErrs := make([]error, len(rel))
	for i, c := range rel {
		wg.Go(func() {
			epoch := c.Sandbox.Epoch
			if i%4 == 0 {
				epoch++
			}
			relErrs[i] = b.st.MarkReleased(b.ctx, c.Sandbox.ID, epoch)
		})
	}
	wg.Wait()
	if n := b.st.SharedCalls()["releases"]; n == 0 {
		t.Fatal("no release flew with company: the batched statement went untested")
	}
	for i, c := range rel {
		got, _ := b.st.GetSandbox(b.ctx, "acme", c.Sandbox.ID)
		if want := i%4 != 0; got.Released != want || (relErrs[i] == nil) != want ||
			(!want && !errors.Is(relErrs[i], domain.ErrFenced)) {
			t.Errorf("release %d (fenced %v): released %v, err %v", i, !want, got.Released, relErrs[i])
		}
	}
}

// TestClaimNewCreates checks that a quick claim sees only the sandboxes
// requested since the given time, oldest first, and that a full claim still
// finds the older ones.
func TestClaimNewCreates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := map[string]bool{b.create(t).ID: true, b.create(t).ID: true}
	b.clock.Advance(time.Minute)
	since := b.clock.Now()
	first, second := b.create(t), b.create(t)
	claims, err := b.st.ClaimNewCreates(b.ctx, "sim", "", "w", 10, time.Minute, since, store.Share{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 || claims[0].Sandbox.ID != first.ID || claims[1].Sandbox.ID != second.ID {
		t.Fatalf("quick claim got %d claims, want the two new sandboxes in order", len(claims))
	}
	if claims[0].Sandbox.State != domain.StateCreating || claims[0].From != domain.StateRequested {
		t.Errorf("quick claim: %s from %s, want creating from requested", claims[0].Sandbox.State, claims[0].From)
	}
	if again, _ := b.st.ClaimNewCreates(b.ctx, "sim", "", "w", 10, time.Minute, since, store.Share{}); len(again) != 0 {
		t.Errorf("a second quick claim got %d claims, want none", len(again))
	}
	claims, err = b.st.ClaimCreates(b.ctx, "sim", "", "w", 10, time.Minute, store.Share{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 || !old[claims[0].Sandbox.ID] || !old[claims[1].Sandbox.ID] {
		t.Errorf("full claim got %d claims, want the two old sandboxes", len(claims))
	}
	if p := path(b.events(t, first.ID)); p != "requested>creating" {
		t.Errorf("history after a quick claim = %s", p)
	}
}

// TestConcurrentEndsShareBatches ends many sandboxes at once, so that the
// ends share statements: each sandbox is ended by its own tenant three times
// over and by another tenant once. Exactly one of its tenant's calls
// changes it, the other tenant never sees it, and its history gains one
// end event.
func TestConcurrentEndsShareBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	var sbs []domain.Sandbox
	for range n {
		sbs = append(sbs, b.create(t))
	}
	// The older half are made ready; the others stay requested.
	claims, err := b.st.ClaimCreates(b.ctx, "sim", "", "w", n/2, time.Minute, store.Share{})
	if err != nil || len(claims) != n/2 {
		t.Fatalf("ClaimCreates: %d, %v", len(claims), err)
	}
	isReady := map[string]bool{}
	for _, c := range claims {
		if _, err := b.st.MarkReady(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p"}); err != nil {
			t.Fatal(err)
		}
		isReady[c.Sandbox.ID] = true
	}
	type outcome struct {
		tenant  string
		got     domain.Sandbox
		changed bool
		err     error
	}
	outcomes := make([][]outcome, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, sb := range sbs {
		for _, tenant := range []string{"acme", "other", "acme", "acme"} {
			wg.Go(func() {
				got, changed, err := b.st.EndSandbox(b.ctx, tenant, sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "deleted by "+tenant)
				mu.Lock()
				outcomes[i] = append(outcomes[i], outcome{tenant, got, changed, err})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if n := b.st.SharedCalls()["ends"]; n == 0 {
		t.Fatal("no end flew with company: the batched statement went untested")
	}
	for i, sb := range sbs {
		want := domain.StateCancelled
		if isReady[sb.ID] {
			want = domain.StateTerminated
		}
		changed := 0
		for _, o := range outcomes[i] {
			switch {
			case o.tenant == "other":
				if !errors.Is(o.err, domain.ErrNotFound) || o.got.ID != "" {
					t.Errorf("sandbox %d: the other tenant got %+v, %v; want not found", i, o.got, o.err)
				}
			case o.err != nil:
				t.Errorf("sandbox %d: end: %v", i, o.err)
			case o.got.ID != sb.ID || o.got.State != want:
				t.Errorf("sandbox %d: end returned %s %s, want %s %s", i, o.got.ID, o.got.State, sb.ID, want)
			case o.changed:
				changed++
			}
		}
		if changed != 1 {
			t.Errorf("sandbox %d: %d calls changed it, want 1", i, changed)
		}
		evs := b.events(t, sb.ID)
		if last := evs[len(evs)-1]; last.To != want || last.Message != "deleted by acme" || len(evs) != map[bool]int{true: 4, false: 2}[isReady[sb.ID]] {
			t.Errorf("sandbox %d: history %s, last %+v", i, path(evs), last)
		}
	}
}

// TestStateLists: the SQL lists of live and terminal states are the
// domain's.
func TestStateLists(t *testing.T) {
	t.Parallel()
	var live, terminal []string
	for _, s := range domain.States {
		if s.Terminal() {
			terminal = append(terminal, "'"+string(s)+"'")
		} else {
			live = append(live, "'"+string(s)+"'")
		}
	}
	if want := "(" + strings.Join(live, ", ") + ")"; store.LiveStatesSQL != want {
		t.Errorf("liveStates = %s, want %s", store.LiveStatesSQL, want)
	}
	if want := "(" + strings.Join(terminal, ", ") + ")"; store.TerminalStatesSQL != want {
		t.Errorf("terminalStates = %s, want %s", store.TerminalStatesSQL, want)
	}
}
