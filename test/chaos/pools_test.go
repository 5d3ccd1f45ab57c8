package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Warm pools in the storm (TestChaos only, over sim): a loop creates pools,
// resizes them (shrinks end members, pool_shrunk) and deletes them
// (pool_deleted), while claimers take members, with an owner of the storm's
// or a TTL, and the refillers of every replica refill, through the kill -9s
// and the Postgres crash. Invariants: no member is claimed twice (no two
// claims answered the same sandbox; no sandbox has two claim events), and
// none leaks (no live member of a pool that is gone, or of one whose owner
// lease lapsed more than a refill interval ago, with every replica up).

const (
	poolRefillInterval = 500 * time.Millisecond
	// poolLease is POOL_LEASE: short, so that a lapse would show within
	// the run.
	poolLease = 6 * time.Second
)

// poolEnv is the replicas' pool settings.
func poolEnv() []string {
	return []string{"POOL_REFILL_INTERVAL=" + poolRefillInterval.String(), "POOL_LEASE=" + poolLease.String()}
}

// poolChaos is what the pools' part of the storm saw.
type poolChaos struct {
	mu      sync.Mutex
	live    []string       // pools created and not deleted (as far as the storm knows)
	claimed map[string]int // sandbox id -> claims answered 201 with it
	made    int            // pools created
	leaked  []string       // endPools' finding
	ops     map[string]int // what the storm did, for the summary
	// deleted is when each pool's deletion was answered: its members
	// still in it must end within an interval of that.
	deleted map[string]time.Time
}

// deletedPool records that the pool's deletion was answered now.
func (p *poolChaos) deletedPool(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.deleted[name]; !ok {
		p.deleted[name] = time.Now()
	}
}

// bounds judges the members of deleted pools that were never claimed
// (still owned by the pool) against the pool's deletion: its owner, the
// pool's lease, ends there.
func (p *poolChaos) bounds(sandboxes map[string]ended) []bound {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bound
	for id, sb := range sandboxes {
		name, ok := strings.CutPrefix(sb.owner, "pool:")
		at, deleted := p.deleted[name]
		if !ok || !deleted {
			continue
		}
		b := bound{id: id, lapse: at}
		switch {
		case sb.endedAt.IsZero():
			b.toEnd, b.endedAfterLapse = time.Since(at), true
		case sb.endedAt.After(at):
			b.toEnd, b.endedAfterLapse = sb.endedAt.Sub(at), true
		}
		if b.endedAfterLapse && !sb.released.IsZero() {
			b.toRelease = max(0, sb.released.Sub(at))
		}
		out = append(out, b)
	}
	return out
}

// poolStorm starts the pools' loops of the storm on wg, until ctx ends.
func (h *chaos) poolStorm(ctx context.Context, wg *sync.WaitGroup) {
	if h.hosts != nil {
		return // TestChaosNodes: the sim storm only
	}
	h.pools = &poolChaos{claimed: map[string]int{}, ops: map[string]int{}, deleted: map[string]time.Time{}}
	wg.Go(func() { h.poolLoop(ctx) })
	for i := range 2 {
		wg.Go(func() { h.claimLoop(ctx, i) })
	}
}

func (p *poolChaos) count(op string) {
	p.mu.Lock()
	p.ops[op]++
	p.mu.Unlock()
}

func (p *poolChaos) random(h *chaos) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.live) == 0 {
		return ""
	}
	return p.live[h.intn(len(p.live))]
}

// poolLoop keeps one to four pools: it creates them, resizes them, and
// deletes them.
func (h *chaos) poolLoop(ctx context.Context) {
	p := h.pools
	for ctx.Err() == nil {
		p.mu.Lock()
		n := len(p.live)
		p.mu.Unlock()
		switch r := h.intn(10); {
		case n == 0 || (n < 4 && r < 3):
			p.mu.Lock()
			name := fmt.Sprintf("pool-%d", p.made)
			p.made++
			p.mu.Unlock()
			minReady := 1 + h.intn(4)
			params := map[string]any{"create_delay_ms": h.intn(300)}
			if h.intn(4) == 0 {
				params["fail"] = "destroy_once"
			}
			code, _ := h.call(http.MethodPost, "/v1/pools", map[string]any{"name": name, "min_ready": minReady,
				"max_size": minReady + h.intn(3), "params": params})
			// 0: no replica answered, and the pool may or may not exist.
			if code == http.StatusCreated || code == 0 || code == http.StatusServiceUnavailable {
				p.mu.Lock()
				p.live = append(p.live, name)
				p.mu.Unlock()
				p.count("create")
			}
		case r < 7:
			if name := p.random(h); name != "" {
				// Half of them shrink to one member: max_size below the
				// pool's size ends members (pool_shrunk).
				maxSize := 1
				if h.intn(2) == 0 {
					maxSize = 2 + h.intn(4)
				}
				code, _ := h.call(http.MethodPatch, "/v1/pools/"+name, map[string]any{"min_ready": h.intn(maxSize + 1), "max_size": maxSize})
				p.count(fmt.Sprintf("resize-%d", code))
			}
		default:
			if name := p.random(h); name != "" {
				if code, _ := h.call(http.MethodDelete, "/v1/pools/"+name, nil); code == http.StatusAccepted || code == http.StatusNotFound {
					p.deletedPool(name)
					p.mu.Lock()
					p.live = slices.DeleteFunc(p.live, func(s string) bool { return s == name })
					p.mu.Unlock()
					p.count("delete")
				}
			}
		}
		time.Sleep(h.between(300*time.Millisecond, 1200*time.Millisecond))
	}
}

// claimLoop claims members of random pools, half for an owner of the
// storm's (which lapses when that owner stops), half with a short TTL, and
// some of the claimed sandboxes are then deleted by the clients' loops.
func (h *chaos) claimLoop(ctx context.Context, n int) {
	p := h.pools
	for ctx.Err() == nil {
		time.Sleep(h.between(20*time.Millisecond, 120*time.Millisecond))
		name := p.random(h)
		if name == "" {
			continue
		}
		body := map[string]any{"pool": name, "pool_only": h.intn(2) == 0, "labels": map[string]string{"claimer": fmt.Sprint(n)}}
		if o := h.randomOwner(); o != "" && h.intn(2) == 0 {
			body["owner"] = o
		} else {
			body["ttl_seconds"] = 3 + h.intn(10)
		}
		sent := time.Now()
		code, sb := h.call(http.MethodPost, "/v1/sandboxes", body)
		h.unanswered(code, body, sent)
		switch code {
		case http.StatusCreated:
			id, _ := sb["id"].(string)
			p.mu.Lock()
			p.claimed[id]++
			p.mu.Unlock()
			h.accept(id, body, sent)
			p.count("hit")
		case http.StatusAccepted:
			h.accept(sb["id"].(string), body, sent)
			p.count("miss")
		case http.StatusConflict:
			p.count("empty")
		}
	}
}

// checkPoolMembers returns the pools' leaks, with every replica up after
// the storm: live members (owner pool:NAME, unclaimed) of a pool that does
// not exist, and live members whose pool's owner lease lapsed more than a
// refill interval (and the slack of a loaded machine) ago.
func (h *chaos) checkPoolMembers(ctx context.Context, conn *pgx.Conn) []string {
	rows, err := conn.Query(ctx, `
		SELECT s.id || ' of ' || s.owner || CASE WHEN p.name IS NULL THEN ' (no pool)' ELSE ' (lease lapsed ' || (now() - o.expires_at)::text || ' ago)' END
		FROM sandboxes s
		LEFT JOIN pools p ON p.tenant = s.tenant AND 'pool:' || p.name = s.owner
		LEFT JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.owner LIKE 'pool:%' AND s.state IN ('requested', 'creating', 'ready')
		  AND (p.name IS NULL OR o.expires_at IS NULL OR o.expires_at < now() - $1::interval)`,
		poolRefillInterval+overshootSlack)
	if err != nil {
		h.t.Fatal(err)
	}
	leaked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	return leaked
}

// endPools deletes every pool after the storm (their members end,
// pool_deleted), so that the registry can quiesce: a pool's members are
// owned, and live for as long as it.
func (h *chaos) endPools() {
	if h.pools == nil {
		return
	}
	ctx := h.t.Context()
	conn, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	// With every replica back, the leases are renewed within a third of
	// POOL_LEASE; a lapse seen after that is one.
	time.Sleep(poolLease/3 + poolRefillInterval)
	h.pools.leaked = h.checkPoolMembers(ctx, conn)
	rows, err := conn.Query(ctx, `SELECT name FROM pools`)
	if err != nil {
		h.t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	for _, name := range names {
		if code, _ := h.call(http.MethodDelete, "/v1/pools/"+name, nil); code != http.StatusAccepted {
			h.t.Errorf("delete pool %s after the storm: %d", name, code)
		}
		h.pools.deletedPool(name)
	}
}

// checkPools checks the pools' invariants and logs what the storm did.
func (h *chaos) checkPools(ctx context.Context, conn *pgx.Conn) {
	p := h.pools
	if p == nil {
		return
	}
	var twice []string
	p.mu.Lock()
	for id, n := range p.claimed {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s×%d answered", id, n))
		}
	}
	ops := fmt.Sprint(p.ops)
	p.mu.Unlock()
	// The registry's side: one claim event per sandbox at most.
	rows, err := conn.Query(ctx, `
		SELECT sandbox_id || '×' || count(*) || ' claim events' FROM sandbox_events
		WHERE reason = 'owner_transferred' AND message LIKE 'claimed from pool %'
		GROUP BY sandbox_id HAVING count(*) > 1`)
	if err != nil {
		h.t.Fatal(err)
	}
	more, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	twice = append(twice, more...)
	var claims, members, shrunk, deleted int
	if err := conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE reason = 'owner_transferred' AND message LIKE 'claimed from pool %'),
		       (SELECT count(*) FROM sandboxes WHERE labels ? 'tether.pool'),
		       count(*) FILTER (WHERE reason = 'pool_shrunk'),
		       count(*) FILTER (WHERE reason = 'pool_deleted')
		FROM sandbox_events`).Scan(&claims, &members, &shrunk, &deleted); err != nil {
		h.t.Fatal(err)
	}
	summary := fmt.Sprintf("chaos pools: storm %s; claim_events=%d pool_sandboxes=%d pool_shrunk=%d pool_deleted=%d claimed_twice=%d leaked_members=%d",
		ops, claims, members, shrunk, deleted, len(twice), len(p.leaked))
	fmt.Println(summary)
	h.t.Log(summary)
	if len(twice) > 0 {
		h.t.Errorf("pool members claimed twice (%d): %v", len(twice), twice[:min(len(twice), 10)])
	}
	if len(p.leaked) > 0 {
		h.t.Errorf("pool members leaked (%d): %v", len(p.leaked), p.leaked[:min(len(p.leaked), 10)])
	}
	if claims == 0 || shrunk+deleted == 0 {
		h.t.Errorf("the storm claimed %d members and ended %d by shrink or delete; the run proves little about pools", claims, shrunk+deleted)
	}
}
