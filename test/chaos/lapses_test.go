package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The owner bound, judged from every lapse. The clients record every lease
// the API granted an owner (a heartbeat's answer says its expiry; a create
// naming an owner may start one) and every create they saw accepted. From
// those, and the outage credits the registry recorded, lapses finds each
// moment an owner's lease ran out with no renewal: every sandbox of the
// owner accepted before that moment must end within one janitor interval
// of it, even if a later renewal started a new lease, and the time until
// its provider no longer held it is measured too. Where the clients cannot
// tell whether the lease was renewed in time (a heartbeat that got no
// answer, a create that may have started a lease), no lapse is scored:
// the check is lenient there, never wrong.

// grant is one lease the API granted an owner, or may have, as its client
// saw it: sent and answered (recv; for a request that got no answer, when
// the client gave up).
type grant struct {
	sent, recv time.Time
	// expires is the expiry the answer gave. For a maybe grant, zero.
	expires time.Time
	// maybe is set for a request that may or may not have extended the
	// lease: a heartbeat that got no answer, or a create naming the owner
	// (which starts a lease when the owner has none live). Its lease can
	// last at most until recv plus the default owner TTL.
	maybe bool
}

// credit is an outage credit the registry recorded: leases alive at from
// were extended by to-from, to at most to+ceiling.
type credit struct {
	from, to time.Time
	ceiling  time.Duration
}

// extend returns e as the credits left it, for a grant sent at sent: a
// credit applies to a lease that may have been current when it was made.
func extend(e, sent time.Time, credits []credit) time.Time {
	for _, c := range credits {
		capAt := c.to.Add(c.ceiling)
		if sent.Before(c.to) && !e.Before(c.from) && e.Before(capAt) {
			e = e.Add(c.to.Sub(c.from))
			if e.After(capAt) {
				e = capAt
			}
		}
	}
	return e
}

// lapses returns the moments an owner's lease certainly ran out unrenewed,
// in order: the expiry (credits applied) of an answered grant that no
// other grant sent before it may have extended.
func lapses(grants []grant, credits []credit, ttl time.Duration) []time.Time {
	latest := func(g grant) time.Time {
		if g.maybe {
			return extend(g.recv.Add(ttl), g.sent, credits)
		}
		return extend(g.expires, g.sent, credits)
	}
	var out []time.Time
	for i, g := range grants {
		if g.maybe {
			continue
		}
		at := latest(g)
		certain := true
		for j, o := range grants {
			if j != i && o.sent.Before(at) && latest(o).After(at) {
				certain = false
				break
			}
		}
		if certain && !slices.ContainsFunc(out, at.Equal) {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// accepted is a create the clients saw accepted: the owner it named and
// when it was sent and answered.
type accepted struct {
	owner      string
	sent, recv time.Time
}

// leaseBook is what the clients saw of leases and creates.
type leaseBook struct {
	mu      sync.Mutex
	grants  map[string][]grant  // by owner, in the order sent
	creates map[string]accepted // by sandbox id
	// released is when each owner that was ended (DELETE) was first
	// sent that: its lease may be gone from then on.
	released map[string]time.Time
}

func newLeaseBook() *leaseBook {
	return &leaseBook{grants: map[string][]grant{}, creates: map[string]accepted{}, released: map[string]time.Time{}}
}

// release records that the owner was ended (DELETE /v1/owners/NAME) by a
// request sent at sent: a create after that may start a new lease.
func (b *leaseBook) release(owner string, sent time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.released[owner]; !ok {
		b.released[owner] = sent
	}
}

// heartbeat records a heartbeat's outcome: its answer's expiry, or nothing
// (zero) when none came.
func (b *leaseBook) heartbeat(owner string, sent, recv, expires time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grants[owner] = append(b.grants[owner], grant{sent: sent, recv: recv, expires: expires, maybe: expires.IsZero()})
}

// create records a create the API accepted (owner may be empty). Unless
// an answer the client had before sending it shows the owner's lease live
// until after its answer, the create may have started a lease: a maybe
// grant.
func (b *leaseBook) create(id, owner string, sent, recv time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.creates[id] = accepted{owner: owner, sent: sent, recv: recv}
	if owner == "" {
		return
	}
	if at, ok := b.released[owner]; !ok || recv.Before(at) {
		for _, g := range b.grants[owner] {
			if !g.maybe && !g.recv.After(sent) && g.expires.After(recv) {
				return // live throughout: the create started no lease
			}
		}
	}
	b.grants[owner] = append(b.grants[owner], grant{sent: sent, recv: recv, maybe: true})
}

// unanswered records a create naming owner that no replica answered: it
// may have been accepted, and may have started a lease.
func (b *leaseBook) unanswered(owner string, sent, recv time.Time) {
	if owner == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grants[owner] = append(b.grants[owner], grant{sent: sent, recv: recv, maybe: true})
}

// live reports whether owner's lease, as far as the clients know, lasts
// past at: a create naming the owner before then does not start a lease.
func (b *leaseBook) live(owner string, at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.released[owner]; ok {
		return false
	}
	for _, g := range slices.Backward(b.grants[owner]) {
		if !g.maybe {
			return g.expires.After(at)
		}
	}
	return false
}

// ended is a sandbox as the registry has it after the storm.
type ended struct {
	owner         string
	createdAt     time.Time // the registry's
	endedAt       time.Time // zero: still live
	destroyFaulty bool      // its params inject destroy failures
	released      time.Time // when its provider no longer held it; zero: never held, or not seen
}

// bound is the owner bound's verdict on one sandbox: the lapse it had to
// end by, how long after it it ended and was released.
type bound struct {
	id              string
	lapse           time.Time
	toEnd           time.Duration
	toRelease       time.Duration // 0 when not measured
	destroyFaulty   bool
	endedAfterLapse bool
}

// bounds judges every sandbox of an owner the clients played against the
// first certain lapse of that owner's lease after its create was answered
// (for a create whose answer never came, after the registry made it). A
// lapse while Postgres was down (or an interval before) counts from its
// return: nothing can end a sandbox without it.
func (b *leaseBook) bounds(sandboxes map[string]ended, credits []credit, ttl time.Duration, pgDown, pgUp time.Time) []bound {
	b.mu.Lock()
	defer b.mu.Unlock()
	byOwner := map[string][]time.Time{}
	for owner, gs := range b.grants {
		byOwner[owner] = lapses(gs, credits, ttl)
	}
	var out []bound
	for id, sb := range sandboxes {
		ls, played := byOwner[sb.owner]
		if sb.owner == "" || !played {
			continue // unowned, or owned by no owner of the clients' (a pool)
		}
		after := sb.createdAt
		if a, ok := b.creates[id]; ok && a.owner == sb.owner {
			after = a.recv
		}
		i := sort.Search(len(ls), func(i int) bool { return ls[i].After(after) })
		if i == len(ls) {
			continue // no certain lapse after it: nothing to judge
		}
		from := ls[i]
		if !pgDown.IsZero() && from.After(pgDown.Add(-janitorInterval)) && from.Before(pgUp) {
			from = pgUp
		}
		bd := bound{id: id, lapse: from, destroyFaulty: sb.destroyFaulty}
		switch {
		case sb.endedAt.IsZero():
			bd.toEnd = time.Since(from) // still live: as far past as now
			bd.endedAfterLapse = true
		case sb.endedAt.After(from):
			bd.toEnd, bd.endedAfterLapse = sb.endedAt.Sub(from), true
		}
		if bd.endedAfterLapse && !sb.released.IsZero() {
			bd.toRelease = max(0, sb.released.Sub(from))
		}
		out = append(out, bd)
	}
	return out
}

// overshoots returns the bounds whose sandbox ended later than limit after
// its lapse.
func overshoots(bs []bound, limit time.Duration) []string {
	var out []string
	for _, b := range bs {
		if b.toEnd > limit {
			out = append(out, fmt.Sprintf("%s +%s after the lapse at %s", b.id, b.toEnd.Round(time.Millisecond), b.lapse.Format("15:04:05.000")))
		}
	}
	return out
}

// spread is the p50 and maximum of some durations, and how many.
type spread struct {
	n        int
	p50, max time.Duration
}

func (s spread) String() string {
	if s.n == 0 {
		return "n=0"
	}
	return fmt.Sprintf("p50=%s max=%s n=%d", s.p50.Round(time.Millisecond), s.max.Round(time.Millisecond), s.n)
}

func spreadOf(ds []time.Duration) spread {
	if len(ds) == 0 {
		return spread{}
	}
	slices.Sort(ds)
	return spread{n: len(ds), p50: ds[len(ds)/2], max: ds[len(ds)-1]}
}

// lapseFigures are the owner bound's two figures, lapse → ended and
// lapse → released, without and with injected destroy failures, over the
// sandboxes that outlived their lapse.
type lapseFigures struct {
	ended, released, endedFaulty, releasedFaulty spread
}

func figures(bs []bound) lapseFigures {
	var e, r, ef, rf []time.Duration
	for _, b := range bs {
		if !b.endedAfterLapse {
			continue
		}
		if b.destroyFaulty {
			ef = append(ef, b.toEnd)
			if b.toRelease > 0 {
				rf = append(rf, b.toRelease)
			}
			continue
		}
		e = append(e, b.toEnd)
		if b.toRelease > 0 {
			r = append(r, b.toRelease)
		}
	}
	return lapseFigures{spreadOf(e), spreadOf(r), spreadOf(ef), spreadOf(rf)}
}

func (f lapseFigures) String() string {
	return fmt.Sprintf("lapse_to_ended{%s} lapse_to_released{%s} with_destroy_faults: lapse_to_ended{%s} lapse_to_released{%s}",
		f.ended, f.released, f.endedFaulty, f.releasedFaulty)
}

// readCredits reads the outage credits the registry recorded.
func readCredits(ctx context.Context, conn *pgx.Conn) ([]credit, error) {
	rows, err := conn.Query(ctx, `SELECT unreached_from, unreached_to, ceiling FROM outage_credits ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (credit, error) {
		var c credit
		err := r.Scan(&c.from, &c.to, &c.ceiling)
		return c, err
	})
}

// unaccounted returns the accepted creates the registry lacks, and those
// it has that never settled.
func unaccounted(acceptedIDs []string, states map[string]string) []string {
	var out []string
	for _, id := range acceptedIDs {
		st, ok := states[id]
		switch {
		case !ok:
			out = append(out, id+" accepted, not in the registry")
		case st == "requested" || st == "creating" || st == "pausing" || st == "resuming":
			out = append(out, id+" accepted, still "+st)
		}
	}
	slices.Sort(out)
	return out
}

// judgeBounds reads every sandbox and the outage credits, and judges the
// owner bound of every owned sandbox the clients saw accepted (leaseBook)
// and of every pool member never claimed (poolBounds). It also returns the
// accepted creates the registry lost or never settled.
func (h *chaos) judgeBounds(ctx context.Context, conn *pgx.Conn) ([]bound, []string) {
	rows, err := conn.Query(ctx, `SELECT id, state, coalesce(owner, ''), created_at, ended_at, coalesce(params->>'fail', '') FROM sandboxes`)
	if err != nil {
		h.t.Fatal(err)
	}
	released := h.providerReleases()
	sandboxes, states := map[string]ended{}, map[string]string{}
	for rows.Next() {
		var id, state, owner, fail string
		var createdAt time.Time
		var endedAt *time.Time
		if err := rows.Scan(&id, &state, &owner, &createdAt, &endedAt, &fail); err != nil {
			h.t.Fatal(err)
		}
		sb := ended{owner: owner, createdAt: createdAt, destroyFaulty: fail == "destroy_once", released: released[id]}
		if endedAt != nil {
			sb.endedAt = *endedAt
		}
		sandboxes[id], states[id] = sb, state
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	credits, err := readCredits(ctx, conn)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	pgDown, pgUp := h.pgDown, h.pgUp
	h.mu.Unlock()
	bs := h.leases.bounds(sandboxes, credits, ownerTTL, pgDown, pgUp)
	if h.pools != nil {
		bs = append(bs, h.pools.bounds(sandboxes)...)
	}
	var ids []string
	h.created.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	return bs, unaccounted(ids, states)
}

// providerReleases returns, per sandbox, when its provider no longer held
// it, as observed: the sim's destroy that removed its file, or the
// removal of its last folder on the hosts.
func (h *chaos) providerReleases() map[string]time.Time {
	if h.folders != nil {
		lives, _ := h.folders.record()
		return gone(lives)
	}
	return removals(h.calls())
}

// finalOvershoots is the owner bound against each owner's final lease as
// the registry has it (credits included): it judges the sandboxes whose
// lapses the clients cannot be sure of, which bounds leaves out. No owned
// sandbox may end later than an interval (and slack) after its owner's
// last expiry, a lapse while Postgres was down counting from its return.
func finalOvershoots(ctx context.Context, conn *pgx.Conn, pgDown, pgUp time.Time) ([]string, time.Duration, error) {
	rows, err := conn.Query(ctx, `
		SELECT s.id, s.ended_at, o.expires_at FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.ended_at IS NOT NULL AND s.ended_at > o.expires_at`)
	if err != nil {
		return nil, 0, err
	}
	var out []string
	var most time.Duration
	var id string
	var endedAt, lapsed time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &endedAt, &lapsed}, func() error {
		from := lapsed
		if !pgDown.IsZero() && lapsed.After(pgDown.Add(-janitorInterval)) && lapsed.Before(pgUp) {
			from = pgUp
		}
		over := endedAt.Sub(from)
		most = max(most, over)
		if over > janitorInterval+overshootSlack {
			out = append(out, fmt.Sprintf("%s +%s after its owner's final expiry", id, over.Round(time.Millisecond)))
		}
		return nil
	})
	return out, most, err
}
