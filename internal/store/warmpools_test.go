package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

var refillLimits = store.RefillLimits{Lease: time.Minute, MaxLifetime: 24 * time.Hour, CreateTimeout: 5 * time.Minute, Batch: 1000, Worker: "test"}

// poolReplicas returns n stores over one fresh database, each with its own
// connection pool, as n Tether replicas would be.
func poolReplicas(t *testing.T, n int) []*store.Store {
	t.Helper()
	url := storetest.NewURL(t)
	sts := make([]*store.Store, n)
	for i := range sts {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		sts[i] = store.New(pool)
	}
	if _, err := sts[0].RegisterAPIKey(t.Context(), "acme", "test", "key-acme"); err != nil {
		t.Fatal(err)
	}
	return sts
}

func mustPool(t *testing.T, st *store.Store, name string, minReady, maxSize int) domain.Pool {
	t.Helper()
	p, err := st.CreatePool(t.Context(), domain.Pool{Tenant: "acme", Name: name, Provider: "sim", MinReady: minReady, MaxSize: maxSize})
	if err != nil {
		t.Fatalf("CreatePool: %v", err)
	}
	return p
}

// readyAll makes every requested sim sandbox ready, as an executor would.
func readyAll(t *testing.T, st *store.Store) int {
	t.Helper()
	n, err := makeReady(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func makeReady(ctx context.Context, st *store.Store) (int, error) {
	claims, err := st.ClaimCreates(ctx, "sim", "", "w", 10000, time.Minute, store.Share{})
	if err != nil {
		return 0, err
	}
	for _, c := range claims {
		if _, err := st.MarkReady(ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p-" + c.Sandbox.ID}); err != nil && !errors.Is(err, domain.ErrFenced) {
			return 0, err
		}
	}
	return len(claims), nil
}

func poolMembers(t *testing.T, st *store.Store, name string) (live, all int) {
	t.Helper()
	live, all, err := countMembers(t.Context(), st, name)
	if err != nil {
		t.Fatal(err)
	}
	return live, all
}

// countMembers counts the pool's live members, and every sandbox ever
// labelled as the pool's.
func countMembers(ctx context.Context, st *store.Store, name string) (live, all int, err error) {
	err = st.Pool().QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE owner = $1 AND state IN ('requested', 'creating', 'ready')),
			count(*) FILTER (WHERE labels @> jsonb_build_object('tether.pool', $2::text))
		FROM sandboxes`, domain.PoolOwner(name), name).Scan(&live, &all)
	return live, all, err
}

func TestPoolCRUD(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := mustPool(t, b.st, "py", 2, 4)
	if p.Size != 0 || p.Ready != 0 || p.MinReady != 2 || p.MaxSize != 4 || string(p.Params) != "{}" {
		t.Fatalf("created pool = %+v", p)
	}
	_, err := b.st.CreatePool(b.ctx, domain.Pool{Tenant: "acme", Name: "py", Provider: "sim", MinReady: 1, MaxSize: 1})
	if domain.ErrorCode(err) != domain.CodePoolExists {
		t.Fatalf("second create: %v; want POOL_EXISTS", err)
	}
	// Another tenant may use the name, and does not see acme's pool.
	if _, err := b.st.CreatePool(b.ctx, domain.Pool{Tenant: "other", Name: "py", Provider: "sim", MinReady: 0, MaxSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.GetPool(b.ctx, "other", "nope"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("GetPool(missing) = %v; want ErrNotFound", err)
	}
	if _, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	got, err := b.st.GetPool(b.ctx, "acme", "py")
	if err != nil || got.Size != 2 || got.Ready != 0 {
		t.Fatalf("after refill: %+v, %v; want size 2, ready 0", got, err)
	}
	readyAll(t, b.st)
	list, err := b.st.ListPools(b.ctx, "acme")
	if err != nil || len(list) != 1 || list[0].Ready != 2 {
		t.Fatalf("ListPools = %+v, %v; want py with 2 ready", list, err)
	}
	three := 3
	if _, _, err := b.st.UpdatePool(b.ctx, "acme", "py", domain.PoolUpdate{MinReady: &three, MaxSize: new(int)}, domain.Caller{}); domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("min_ready over max_size: %v; want INVALID_REQUEST", err)
	}
	if _, err := b.st.DeletePool(b.ctx, "acme", "py", domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DeletePool(b.ctx, "acme", "py", domain.Caller{}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("second delete: %v; want ErrNotFound", err)
	}
	if live, all := poolMembers(t, b.st, "py"); live != 0 || all != 2 {
		t.Fatalf("after delete: %d live members of %d; want 0 of 2", live, all)
	}
	list, _ = b.st.ListPools(b.ctx, "")
	if len(list) != 1 || list[0].Tenant != "other" {
		t.Fatalf("every tenant's pools after the delete: %+v", list)
	}
}

// TestPoolShrink: lowering max_size below the size ends the surplus, those
// not ready first, with reason pool_shrunk; claimed members are not the
// pool's any more and are left alone.
func TestPoolShrink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mustPool(t, b.st, "py", 4, 6)
	if _, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	readyAll(t, b.st)
	c, err := b.st.ClaimFromPool(b.ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", Owner: "agent", TTL: time.Hour, OwnerTTL: time.Minute, MaxLifetime: 24 * time.Hour})
	if err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	r, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits) // back to 4: 3 ready, 1 requested
	if err != nil || len(r.Created) != 1 {
		t.Fatalf("refill after a claim: %+v, %v; want 1 created", r, err)
	}
	one, two := 1, 2
	p, ended, err := b.st.UpdatePool(b.ctx, "acme", "py", domain.PoolUpdate{MinReady: &one, MaxSize: &two}, domain.Caller{KeyName: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ended) != 2 || p.Size != 2 || p.Ready != 2 {
		t.Fatalf("shrunk to 2: ended %d, pool %+v; want 2 ended, size 2 ready 2", len(ended), p)
	}
	if ended[0].State != domain.StateCancelled && ended[1].State != domain.StateCancelled {
		t.Errorf("the requested member was not among the ended: %+v", ended)
	}
	for _, sb := range ended {
		if sb.Reason != domain.ReasonPoolShrunk {
			t.Errorf("ended with reason %s; want pool_shrunk", sb.Reason)
		}
	}
	claimed, err := b.st.GetSandbox(b.ctx, "acme", c.Sandbox.ID)
	if err != nil || claimed.State != domain.StateReady || claimed.Owner != "agent" {
		t.Fatalf("claimed member after the shrink: %+v, %v", claimed, err)
	}
}

// TestPoolRefillNeverAboveMaxSize: replicas refilling one pool at once,
// with members becoming ready, failing and being claimed in between,
// never make it bigger than max_size, and leave it at min_ready.
func TestPoolRefillNeverAboveMaxSize(t *testing.T) {
	t.Parallel()
	sts := poolReplicas(t, 4)
	ctx := t.Context()
	mustPool(t, sts[0], "py", 5, 5)
	// Members fail in the storm, so the pool backs off: by a microsecond
	// here, so that its steps need no waiting; one member at a time until
	// one is ready, then in full.
	l := refillLimits
	l.Backoff, l.MaxBackoff = time.Microsecond, time.Microsecond
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		st := sts[i%len(sts)]
		wg.Go(func() {
			for range 20 {
				if _, err := st.RefillPool(ctx, "acme", "py", l); err != nil {
					errs <- err
					return
				}
				live, _, err := countMembers(ctx, st, "py")
				if err == nil && live > 5 {
					err = fmt.Errorf("%d live members; max_size is 5", live)
				}
				if err != nil {
					errs <- err
					return
				}
				switch i % 4 {
				case 0:
					if _, err := makeReady(ctx, st); err != nil {
						errs <- err
						return
					}
				case 1: // a member fails
					claims, err := st.ClaimCreates(ctx, "sim", "", "w", 1, time.Minute, store.Share{})
					if err == nil && len(claims) == 1 {
						_, err = st.MarkFailed(ctx, claims[0].Sandbox.ID, claims[0].Sandbox.Epoch, domain.ActorExecutor, "boom")
					}
					if err != nil {
						errs <- err
						return
					}
				case 2:
					if _, err := st.ClaimFromPool(ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", TTL: time.Hour, MaxLifetime: 24 * time.Hour}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	live := 0
	var last []string
	for range 10 {
		r, err := sts[0].RefillPool(ctx, "acme", "py", l)
		if err != nil {
			t.Fatal(err)
		}
		last = append(last, fmt.Sprintf("%+v: created %d, found %d failed, deferred %v", r.Pool.Refill, len(r.Created), r.Failed, r.Deferred))
		if live, _ = poolMembers(t, sts[0], "py"); live == 5 {
			break
		}
		readyAll(t, sts[0])
	}
	if live != 5 {
		t.Fatalf("%d live members after the storm; want min_ready 5: %q", live, last)
	}
}

// TestPoolClaimExactlyOnce: many clients over several replicas claim from
// one pool at once; each member goes to exactly one of them, and the
// claims beyond the members find it empty.
func TestPoolClaimExactlyOnce(t *testing.T) {
	t.Parallel()
	sts := poolReplicas(t, 4)
	ctx := t.Context()
	const members = 60
	mustPool(t, sts[0], "py", members, members)
	if _, err := sts[0].RefillPool(ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	if n := readyAll(t, sts[0]); n != members {
		t.Fatalf("%d members made ready; want %d", n, members)
	}
	var (
		mu      sync.Mutex
		got     = map[string]string{} // member → claimer
		misses  int
		wg      sync.WaitGroup
		failure = make(chan error, 32*4)
	)
	for i := range 32 {
		st := sts[i%len(sts)]
		owner := fmt.Sprintf("agent-%d", i)
		wg.Go(func() {
			for range 4 {
				c, err := st.ClaimFromPool(ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", Owner: owner, Labels: map[string]string{"by": owner},
					TTL: time.Hour, Explicit: true, OwnerTTL: time.Minute, MaxLifetime: 24 * time.Hour})
				if err != nil {
					failure <- err
					return
				}
				mu.Lock()
				if !c.Claimed {
					misses++
				} else if prev, dup := got[c.Sandbox.ID]; dup {
					failure <- fmt.Errorf("member %s claimed by %s and %s", c.Sandbox.ID, prev, owner)
				} else {
					got[c.Sandbox.ID] = owner
					if c.Sandbox.Owner != owner || c.Sandbox.Labels["by"] != owner || c.Sandbox.Labels[domain.PoolLabel] != "py" || c.Sandbox.State != domain.StateReady {
						failure <- fmt.Errorf("claimed member %+v; want ready, owned by %s with its labels", c.Sandbox, owner)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(failure)
	for err := range failure {
		t.Fatal(err)
	}
	if len(got) != members || misses != 32*4-members {
		t.Fatalf("%d members claimed, %d misses; want %d and %d", len(got), misses, members, 32*4-members)
	}
	// Each claim is in the member's history, once.
	var transfers int
	if err := sts[0].Pool().QueryRow(ctx, `SELECT count(*) FROM sandbox_events WHERE reason = 'owner_transferred'`).Scan(&transfers); err != nil {
		t.Fatal(err)
	}
	if transfers != members {
		t.Fatalf("%d owner_transferred events; want %d", transfers, members)
	}
}

// TestPoolDeletedMidRefill: a pool deleted while replicas refill it keeps
// no live member, whoever wins each race.
func TestPoolDeletedMidRefill(t *testing.T) {
	t.Parallel()
	sts := poolReplicas(t, 4)
	ctx := t.Context()
	for round := range 10 {
		name := fmt.Sprintf("p%d", round)
		mustPool(t, sts[0], name, 8, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			st := sts[i%len(sts)]
			wg.Go(func() {
				for range 5 {
					if _, err := st.RefillPool(ctx, "acme", name, store.RefillLimits{Lease: time.Minute, MaxLifetime: time.Hour, CreateTimeout: time.Minute, Batch: 2, Worker: "w"}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			if _, err := sts[1].DeletePool(ctx, "acme", name, domain.Caller{}); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		if live, _ := poolMembers(t, sts[0], name); live != 0 {
			t.Fatalf("round %d: %d live members of the deleted pool", round, live)
		}
	}
}

// TestPoolClaimOwnerLease: a claimed member lives by its new owner's
// lease, and ends with it; the pool's own lease is the refiller's.
func TestPoolClaimOwnerLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mustPool(t, b.st, "py", 1, 1)
	if _, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	readyAll(t, b.st)
	c, err := b.st.ClaimFromPool(b.ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", Owner: "agent", TTL: time.Hour, Explicit: true,
		OwnerTTL: 30 * time.Second, MaxLifetime: 24 * time.Hour, Caller: domain.Caller{KeyID: "key_1", KeyName: "ci"}})
	if err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if want := b.clock.Now().Add(time.Hour).UTC().Truncate(time.Microsecond); !c.Sandbox.ExpiresAt.Equal(want) {
		t.Errorf("expires_at = %s; want %s", c.Sandbox.ExpiresAt, want)
	}
	evs := b.events(t, c.Sandbox.ID)
	last := evs[len(evs)-1]
	if last.Reason != domain.ReasonOwnerTransferred || last.Message != "claimed from pool py: owner pool:py -> owner agent" || last.Caller.KeyName != "ci" {
		t.Errorf("last event = %+v; want the transfer from the pool", last)
	}
	// The refiller renews the pool's lease, not the claimer's.
	b.clock.Advance(40 * time.Second)
	if _, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	ended, err := b.st.EndLapsedOwners(b.ctx, 100)
	if err != nil || len(ended) != 1 || ended[0].ID != c.Sandbox.ID || ended[0].Reason != domain.ReasonOwnerExpired {
		t.Fatalf("EndLapsedOwners = %+v, %v; want the claimed member, owner_expired", ended, err)
	}
	if live, _ := poolMembers(t, b.st, "py"); live != 1 {
		t.Fatalf("%d live pool members; want the refill's 1", live)
	}
	// An explicit TTL longer than a member may still live skips it.
	readyAll(t, b.st)
	b.clock.Advance(23*time.Hour + 30*time.Minute)
	c, err = b.st.ClaimFromPool(b.ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", TTL: time.Hour, Explicit: true, MaxLifetime: 24 * time.Hour})
	if err != nil || c.Claimed || c.Pool.Name != "py" || c.Pool.Ready != 1 {
		t.Fatalf("claim for an hour of a member with 30 minutes left: %+v, %v; want a miss", c, err)
	}
}

// TestPoolClaimIdempotent: a claim retried with its idempotency key gets
// the first one's sandbox, and returns the member it took meanwhile.
func TestPoolClaimIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mustPool(t, b.st, "py", 2, 2)
	if _, err := b.st.RefillPool(b.ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	readyAll(t, b.st)
	p := domain.ClaimParams{Tenant: "acme", Pool: "py", TTL: time.Hour, MaxLifetime: 24 * time.Hour, IdempotencyKey: "k1", RequestHash: []byte("h")}
	first, err := b.st.ClaimFromPool(b.ctx, p)
	if err != nil || !first.Claimed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := b.st.ClaimFromPool(b.ctx, p)
	if err != nil || !again.Replayed || again.Sandbox.ID != first.Sandbox.ID {
		t.Fatalf("retry: %+v, %v; want the first's sandbox, replayed", again, err)
	}
	if pool, _ := b.st.GetPool(b.ctx, "acme", "py"); pool.Ready != 1 {
		t.Fatalf("pool ready = %d after a claim and its retry; want 1", pool.Ready)
	}
	p.RequestHash = []byte("other")
	if _, err := b.st.ClaimFromPool(b.ctx, p); domain.ErrorCode(err) != domain.CodeIdempotencyKeyReused {
		t.Fatalf("reused key: %v; want IDEMPOTENCY_KEY_REUSED", err)
	}
}

// TestPoolRefillQuota: a refill leaves the tenant within its live cap.
func TestPoolRefillQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t)
	mustPool(t, b.st, "py", 5, 5)
	l := refillLimits
	l.TenantMaxLive = 3
	r, err := b.st.RefillPool(b.ctx, "acme", "py", l)
	if err != nil || len(r.Created) != 2 || r.Pool.Size != 2 {
		t.Fatalf("refill under a cap of 3 with 1 live: %+v, %v; want 2 created", r, err)
	}
}

// TestPoolClaimOldestFirst: a claim takes the oldest ready member (its
// lifetime runs out first), whatever the order the rows were written in.
func TestPoolClaimOldestFirst(t *testing.T) {
	t.Parallel()
	st := poolReplicas(t, 1)[0]
	ctx := t.Context()
	mustPool(t, st, "py", 3, 3)
	if _, err := st.RefillPool(ctx, "acme", "py", refillLimits); err != nil {
		t.Fatal(err)
	}
	if n := readyAll(t, st); n != 3 {
		t.Fatalf("%d members made ready; want 3", n)
	}
	// The member written last is made the oldest, then the first one.
	var ids []string
	rows, err := st.Pool().Query(ctx, `SELECT id FROM sandboxes WHERE owner = 'pool:py' ORDER BY ctid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) != 3 {
		t.Fatalf("members %v: %v", ids, err)
	}
	for i, id := range []string{ids[2], ids[0], ids[1]} {
		if _, err := st.Pool().Exec(ctx, `UPDATE sandboxes SET created_at = now() - make_interval(mins => 30 - $2::int) WHERE id = $1`, id, i); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{ids[2], ids[0]} {
		c, err := st.ClaimFromPool(ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", TTL: time.Minute, Explicit: true, MaxLifetime: 24 * time.Hour})
		if err != nil || !c.Claimed {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		if c.Sandbox.ID != want {
			t.Errorf("claimed %s; want the oldest ready member, %s", c.Sandbox.ID, want)
		}
	}
}
