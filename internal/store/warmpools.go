package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tetherhq/tether/internal/domain"
)

// Warm pools (table pools). A pool's members are the live sandboxes of the
// tenant whose owner is domain.PoolOwner(name): they are counted through
// the index sandboxes_live_owner, never kept as a count on the pool row.
// The pool row is the lock that serialises what changes a pool's size —
// a refill, a shrink, a delete — so that replicas never over-create; a
// claim takes no lock on it, only on the member it takes.

// MaxPoolsPerTenant bounds each tenant's pools: every replica's refiller
// visits every pool each interval.
const MaxPoolsPerTenant = 100

// poolColumns is the select list of a pool read with its counts, in
// scanPool's order: p is the pool, m its members' counts (poolCounts).
const poolColumns = `p.tenant, p.name, p.provider, p.params, p.min_ready, p.max_size, p.created_at, p.updated_at, m.size, m.ready, ` + refillColumns

// refillColumns are a pool's refill state, in scanPool's order.
const refillColumns = `p.refill_failures, p.next_refill_at, p.refill_error, p.refill_error_at, cardinality(p.refill_pending)`

// poolCounts is the lateral join that counts pool p's live members (size)
// and its ready ones (ready).
const poolCounts = `LEFT JOIN LATERAL (
		SELECT count(*)::int AS size, (count(*) FILTER (WHERE s.state = 'ready'))::int AS ready
		FROM sandboxes s
		WHERE s.tenant = p.tenant AND s.owner = 'pool:' || p.name AND s.state IN ` + liveStates + `
	) m ON true`

// getPoolSQL reads the pool @name of @tenant with its counts.
const getPoolSQL = `SELECT ` + poolColumns + ` FROM pools p ` + poolCounts + `
		WHERE p.tenant = @tenant AND p.name = @name`

func scanPool(row pgx.Row) (domain.Pool, error) {
	var p domain.Pool
	var (
		params          []byte
		nextAt, errorAt *time.Time
		refillErr       *string
	)
	err := row.Scan(&p.Tenant, &p.Name, &p.Provider, &params, &p.MinReady, &p.MaxSize, &p.CreatedAt, &p.UpdatedAt, &p.Size, &p.Ready,
		&p.Refill.Failures, &nextAt, &refillErr, &errorAt, &p.Refill.Pending)
	p.Params = params
	if nextAt != nil {
		p.Refill.NextAt = *nextAt
	}
	if refillErr != nil {
		p.Refill.Error = *refillErr
	}
	if errorAt != nil {
		p.Refill.ErrorAt = *errorAt
	}
	return p, err
}

// poolNotFound is the error of a pool the tenant has not got.
func poolNotFound(name string) error {
	return fmt.Errorf("%w: pool %s", domain.ErrNotFound, name)
}

// CreatePool records a new pool of the tenant, empty: the refiller fills
// it. A name the tenant already uses is POOL_EXISTS; a tenant with
// MaxPoolsPerTenant pools is QUOTA_EXCEEDED.
func (s *Store) CreatePool(ctx context.Context, p domain.Pool) (domain.Pool, error) {
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	now := s.Now()
	out, err := scanPool(queryRow(ctx, s.pool, `
		WITH ins AS (
			INSERT INTO pools AS p (tenant, name, provider, params, min_ready, max_size, created_at, updated_at)
			SELECT @tenant, @name, @provider, @params, @min_ready, @max_size, @now, @now
			WHERE (SELECT count(*) FROM pools WHERE tenant = @tenant) < @max_pools
			RETURNING *
		)
		SELECT p.tenant, p.name, p.provider, p.params, p.min_ready, p.max_size, p.created_at, p.updated_at, 0, 0, `+refillColumns+` FROM ins p`,
		namedArgs{"tenant": p.Tenant, "name": p.Name, "provider": p.Provider, "params": params,
			"min_ready": p.MinReady, "max_size": p.MaxSize, "now": now, "max_pools": MaxPoolsPerTenant}))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return domain.Pool{}, domain.Errorf(domain.CodePoolExists, "pool %s exists", p.Name)
	case errors.Is(err, pgx.ErrNoRows):
		return domain.Pool{}, domain.Errorf(domain.CodeQuotaExceeded, "tenant %s has %d pools, its limit; delete one first", p.Tenant, MaxPoolsPerTenant)
	case err != nil:
		return domain.Pool{}, wrap("create pool", err)
	}
	return out, nil
}

// GetPool returns the tenant's pool with its counts, or ErrNotFound.
func (s *Store) GetPool(ctx context.Context, tenant, name string) (domain.Pool, error) {
	p, err := scanPool(queryRow(ctx, s.pool, getPoolSQL, namedArgs{"tenant": tenant, "name": name}))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("store: get pool: %w", poolNotFound(name))
	}
	if err != nil {
		return p, wrap("get pool", err)
	}
	return p, nil
}

// ListPools returns the tenant's pools by name, each with its counts; or,
// for tenant "", every tenant's (for the refiller and metrics).
func (s *Store) ListPools(ctx context.Context, tenant string) ([]domain.Pool, error) {
	rows, err := query(ctx, s.pool, `SELECT `+poolColumns+` FROM pools p `+poolCounts+`
		WHERE @tenant::text = '' OR p.tenant = @tenant ORDER BY p.tenant, p.name`, namedArgs{"tenant": tenant})
	if err != nil {
		return nil, wrap("list pools", err)
	}
	pools, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Pool, error) { return scanPool(r) })
	if err != nil {
		return nil, wrap("list pools", err)
	}
	return pools, nil
}

// lockPool locks the tenant's pool row in tx and returns it, with its
// counts read after the lock was granted (so that they include every
// change another holder of the lock committed). skip makes a pool another
// transaction holds read as missing rather than waited for.
func lockPool(ctx context.Context, tx pgx.Tx, tenant, name string, skip bool) (domain.Pool, error) {
	lock := `FOR UPDATE`
	if skip {
		lock += ` SKIP LOCKED`
	}
	var held string
	err := queryRow(ctx, tx, `SELECT name FROM pools WHERE tenant = @tenant AND name = @name `+lock,
		namedArgs{"tenant": tenant, "name": name}).Scan(&held)
	if err != nil {
		return domain.Pool{}, err
	}
	// A statement of its own, so that its snapshot is taken after the lock.
	return scanPool(queryRow(ctx, tx, getPoolSQL, namedArgs{"tenant": tenant, "name": name}))
}

// endPoolMembersSQL ends up to @limit of the unclaimed members of the pool
// whose owner is @owner of @tenant, those not yet ready first, then the
// newest. A member another transaction holds (a claim taking it) is
// skipped: it is leaving the pool anyway.
var endPoolMembersSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes
		WHERE tenant = @tenant AND owner = @owner AND state IN ` + liveStates + `
		ORDER BY state = 'ready', created_at DESC
		LIMIT @limit
		FOR UPDATE SKIP LOCKED`)

// trimPool ends, in tx, the members of the locked pool p beyond its
// max_size (reason pool_shrunk).
func trimPool(ctx context.Context, tx pgx.Tx, p domain.Pool, e end) ([]domain.Sandbox, error) {
	if p.Size <= p.MaxSize {
		return nil, nil
	}
	e.reason = domain.ReasonPoolShrunk
	e.message = fmt.Sprintf("pool %s shrunk to max_size %d", p.Name, p.MaxSize)
	return endMany(ctx, tx, endPoolMembersSQL, e,
		namedArgs{"tenant": p.Tenant, "owner": domain.PoolOwner(p.Name), "limit": p.Size - p.MaxSize})
}

// UpdatePool changes the tenant's pool's sizes and returns it. Lowering
// max_size below the pool's size ends the surplus members at once (reason
// pool_shrunk), not-yet-ready ones first; they are returned. A change that
// would leave min_ready above max_size is INVALID_REQUEST. by is the API
// key of the client that asked.
func (s *Store) UpdatePool(ctx context.Context, tenant, name string, u domain.PoolUpdate, by domain.Caller) (domain.Pool, []domain.Sandbox, error) {
	now := s.Now()
	var (
		p     domain.Pool
		ended []domain.Sandbox
	)
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if p, err = lockPool(ctx, tx, tenant, name, false); err != nil {
			return err
		}
		if u.MinReady != nil {
			p.MinReady = *u.MinReady
		}
		if u.MaxSize != nil {
			p.MaxSize = *u.MaxSize
		}
		if p.MinReady > p.MaxSize {
			return domain.Errorf(domain.CodeInvalidRequest, "min_ready (%d) must not exceed max_size (%d)", p.MinReady, p.MaxSize)
		}
		if _, err := exec(ctx, tx, `UPDATE pools SET min_ready = @min_ready, max_size = @max_size, updated_at = @now
			WHERE tenant = @tenant AND name = @name`,
			namedArgs{"min_ready": p.MinReady, "max_size": p.MaxSize, "now": now, "tenant": tenant, "name": name}); err != nil {
			return err
		}
		p.UpdatedAt = now
		ended, err = trimPool(ctx, tx, p, end{now: now, actor: domain.ActorClient, by: by})
		p.Size -= len(ended)
		for _, sb := range ended {
			if sb.State == domain.StateTerminated { // it was ready
				p.Ready--
			}
		}
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil, fmt.Errorf("store: update pool: %w", poolNotFound(name))
	}
	if err != nil {
		return p, nil, coded("update pool", err)
	}
	s.announce(ended...)
	return p, ended, nil
}

// DeletePool deletes the tenant's pool and, in the same transaction, ends
// its unclaimed members (reason pool_deleted) and its owner lease, and
// returns the members it ended. Claimed members are their owners' and
// live on. A refill that holds the pool's row finishes first, and its
// members are ended with the others; one that comes after finds no pool.
// A pool the tenant has not got is ErrNotFound.
func (s *Store) DeletePool(ctx context.Context, tenant, name string, by domain.Caller) ([]domain.Sandbox, error) {
	now := s.Now()
	owner := domain.PoolOwner(name)
	var ended []domain.Sandbox
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := exec(ctx, tx, `DELETE FROM pools WHERE tenant = @tenant AND name = @name`, namedArgs{"tenant": tenant, "name": name})
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return poolNotFound(name)
		}
		ended, err = endMany(ctx, tx, endOwnerSQL,
			end{now: now, reason: domain.ReasonPoolDeleted, actor: domain.ActorClient, by: by, message: "pool " + name + " deleted"},
			namedArgs{"tenant": tenant, "owner": owner})
		if err != nil {
			return err
		}
		_, err = exec(ctx, tx, `DELETE FROM owners WHERE tenant = @tenant AND name = @owner`, namedArgs{"tenant": tenant, "owner": owner})
		return err
	})
	if err != nil {
		return nil, wrap("delete pool", err)
	}
	s.announce(ended...)
	return ended, nil
}

// RefillLimits are what a refill of a pool may create.
type RefillLimits struct {
	// Lease is the pool's owner lease, renewed by each refill.
	Lease time.Duration
	// MaxLifetime is every member's lifetime; CreateTimeout bounds its
	// creation.
	MaxLifetime, CreateTimeout time.Duration
	// TenantMaxLive is the server's cap on a tenant's live sandboxes
	// (a tenant's own quota overrides it, its 0 lifting it); 0 or less: no cap.
	TenantMaxLive int
	// Batch bounds the members one refill creates.
	Batch int
	// Worker names the refiller in the members' first events.
	Worker string
	// Backoff is how long a refill waits after a round whose members all
	// failed before it requests another member; it doubles with each
	// further failed round, up to MaxBackoff. Zero: DefaultRefillBackoff
	// and DefaultRefillMaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// The refill backoff's defaults, for zero RefillLimits fields.
const (
	DefaultRefillBackoff    = time.Second
	DefaultRefillMaxBackoff = 5 * time.Minute
)

// refillBackoff is the wait after the failures-th failed round in a row.
func refillBackoff(l RefillLimits, failures int) time.Duration {
	base, ceiling := cmp.Or(l.Backoff, DefaultRefillBackoff), cmp.Or(l.MaxBackoff, DefaultRefillMaxBackoff)
	d := base
	for i := 1; i < failures && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// Refill is what one refill of a pool did.
type Refill struct {
	// Skipped: the pool is gone, or another replica is refilling it.
	Skipped bool
	Created []domain.Sandbox
	// Ended are members ended: surplus over max_size, or members of an
	// owner lease that had lapsed (Tether was down longer than the lease).
	Ended []domain.Sandbox
	// Failed counts the members earlier refills requested that this one
	// found failed; Readied says one of them became ready (which ends a
	// backoff).
	Failed  int
	Readied bool
	// Deferred: the pool is backing off (Pool.Refill.NextAt), so this
	// refill requested no member.
	Deferred bool
	// Pool is the pool as the refill left it.
	Pool domain.Pool
}

// RefillPool tops the tenant's pool up to min_ready members, in one
// transaction under the pool row's lock: it renews the pool's owner lease
// (ending the members of a lapsed one first, owner_expired), ends members
// beyond max_size (pool_shrunk), then counts the members and creates the
// missing ones (requested, for the executors), never more than max_size,
// the tenant's live-sandbox quota or l.Batch allow. A pool another replica
// is refilling, or that is gone, is skipped.
func (s *Store) RefillPool(ctx context.Context, tenant, name string, l RefillLimits) (Refill, error) {
	now := s.Now()
	var r Refill
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		p, err := lockPool(ctx, tx, tenant, name, true)
		if errors.Is(err, pgx.ErrNoRows) {
			r.Skipped = true
			return nil
		}
		if err != nil {
			return err
		}
		owner := domain.PoolOwner(name)
		if r.Ended, err = s.ensureOwnerLease(ctx, tx, now, tenant, owner, l.Lease); err != nil {
			return err
		}
		if _, err := exec(ctx, tx, `UPDATE owners SET expires_at = greatest(expires_at, @expires), updated_at = @now
			WHERE tenant = @tenant AND name = @owner`,
			namedArgs{"expires": now.Add(l.Lease), "now": now, "tenant": tenant, "owner": owner}); err != nil {
			return err
		}
		p.Size -= len(r.Ended)
		trimmed, err := trimPool(ctx, tx, p, end{now: now, actor: domain.ActorExecutor})
		if err != nil {
			return err
		}
		r.Ended, p.Size = append(r.Ended, trimmed...), p.Size-len(trimmed)
		if err := s.refillMembers(ctx, tx, &p, l, now, &r); err != nil {
			return err
		}
		r.Pool = p
		return nil
	})
	if err != nil {
		return Refill{}, wrap("refill pool", err)
	}
	s.announce(r.Ended...)
	s.announce(r.Created...)
	return r, nil
}

// insertMembersSQL inserts the requested members @ids of a pool, owned by
// @owner and labelled @labels, with their first events.
var insertMembersSQL = `
	WITH ins AS (
		INSERT INTO sandboxes AS s (id, tenant, state, provider, owner, labels, env, setup, params,
			created_at, updated_at, expires_at, create_deadline)
		SELECT n.id, @tenant, 'requested', @provider, @owner, @labels, '{}', '', @params,
			@now, @now, @expires_at, @create_deadline
		FROM unnest(@ids::text[]) AS n(id)
		ORDER BY n.id
		RETURNING *
	), ev AS (
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
		SELECT id, tenant, @now, NULL, 'requested', 'requested', 'executor', @message FROM ins ORDER BY id
	)
	SELECT ` + sandboxColumns + ` FROM ins s`

// pendingOutcomesSQL reads what became of the members @ids that refills
// requested: their state, whether they were ever ready, and a failed
// one's error and end.
const pendingOutcomesSQL = `SELECT id, state, ready_at IS NOT NULL, coalesce(error, ''), ended_at
	FROM sandboxes WHERE id = ANY(@ids::text[])`

// refillMembers is the part of a refill of the locked pool p that
// requests members, with its backoff: it looks up the members earlier
// refills requested (the pool's refill_pending). One of them ready ends a
// backoff; failed ones and none ready make one more failed round, which
// puts the next request off by refillBackoff. Unless the pool is backing
// off, it then requests the members p lacks (addMembers), one only while
// p has failed rounds (a probe: one failed sandbox per backoff, not a
// batch). The pool's refill state is written back if it changed, and p,
// r are updated with what was done.
func (s *Store) refillMembers(ctx context.Context, tx pgx.Tx, p *domain.Pool, l RefillLimits, now time.Time, r *Refill) error {
	var pending []string
	if err := queryRow(ctx, tx, `SELECT refill_pending FROM pools WHERE tenant = @tenant AND name = @name`,
		namedArgs{"tenant": p.Tenant, "name": p.Name}).Scan(&pending); err != nil {
		return err
	}
	before := p.Refill
	st := p.Refill
	keep, err := pendingOutcomes(ctx, tx, pending, r, &st)
	if err != nil {
		return err
	}
	switch {
	case r.Readied:
		st.Failures, st.NextAt = 0, time.Time{}
	case r.Failed > 0:
		st.Failures++
		st.NextAt = now.Add(refillBackoff(l, st.Failures))
	}
	if st.NextAt.After(now) {
		r.Deferred = true
	} else {
		batch := l.Batch
		if st.Failures > 0 {
			batch = 1
		}
		created, quota, err := s.addMembers(ctx, tx, *p, l, batch, now)
		if err != nil {
			return err
		}
		if quota != "" && quota != st.Error {
			st.Error, st.ErrorAt = quota, now
		}
		if st.Failures > 0 && len(created) > 0 {
			// The probe's outcome is awaited until the next step of the
			// backoff; one ready sooner ends it at the next look.
			st.NextAt = now.Add(refillBackoff(l, st.Failures))
		}
		for _, sb := range created {
			keep = append(keep, sb.ID)
		}
		r.Created = created
		p.Size += len(created)
	}
	st.Pending = len(keep)
	p.Refill = st
	if st == before && slices.Equal(keep, pending) {
		return nil
	}
	if keep == nil {
		keep = []string{}
	}
	_, err = exec(ctx, tx, `UPDATE pools SET refill_failures = @failures, next_refill_at = @next_at, refill_error = @error,
			refill_error_at = @error_at, refill_pending = @pending
		WHERE tenant = @tenant AND name = @name`,
		namedArgs{"failures": st.Failures, "next_at": nullTime(st.NextAt), "error": nullable(st.Error), "error_at": nullTime(st.ErrorAt),
			"pending": keep, "tenant": p.Tenant, "name": p.Name})
	return err
}

// pendingOutcomes looks up what became of the members earlier refills
// requested (pending): it counts them in r (Readied, Failed), keeps the
// last failed one's error in st, and returns those still on their way.
func pendingOutcomes(ctx context.Context, tx pgx.Tx, pending []string, r *Refill, st *domain.PoolRefill) ([]string, error) {
	if len(pending) == 0 {
		return nil, nil
	}
	rows, err := query(ctx, tx, pendingOutcomesSQL, namedArgs{"ids": pending})
	if err != nil {
		return nil, err
	}
	var (
		keep           []string
		id, state, msg string
		readied        bool
		endedAt        *time.Time
		lastAt         time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &readied, &msg, &endedAt}, func() error {
		switch {
		case readied:
			r.Readied = true
		case state == string(domain.StateFailed):
			r.Failed++
			if endedAt != nil && !endedAt.Before(lastAt) {
				lastAt, st.Error, st.ErrorAt = *endedAt, msg, *endedAt
			}
		case state == string(domain.StateRequested) || state == string(domain.StateCreating):
			keep = append(keep, id)
		}
		return nil
	})
	return keep, err
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// addMembers creates, in tx, the members the locked pool p lacks: up to
// min_ready, within max_size, the tenant's quota and batch. When the
// tenant's quota alone stops it, it says so (quota).
func (s *Store) addMembers(ctx context.Context, tx pgx.Tx, p domain.Pool, l RefillLimits, batch int, now time.Time) (created []domain.Sandbox, quota string, err error) {
	n := min(p.MinReady-p.Size, p.MaxSize-p.Size, batch)
	if n <= 0 {
		return nil, "", nil
	}
	var (
		maxLive *int
		live    int
	)
	if err := queryRow(ctx, tx, `SELECT t.max_live_sandboxes,
			(SELECT count(*)::int FROM sandboxes s WHERE s.tenant = t.name AND s.state IN `+liveStates+`)
		FROM tenants t WHERE t.name = @tenant`, namedArgs{"tenant": p.Tenant}).Scan(&maxLive, &live); err != nil {
		return nil, "", err
	}
	limit := l.TenantMaxLive
	if maxLive != nil {
		limit = *maxLive
	}
	if limit > 0 {
		n = min(n, limit-live)
	}
	if n <= 0 {
		return nil, fmt.Sprintf("%s: tenant %s has %d live sandboxes, its limit: no member requested", domain.CodeQuotaExceeded, p.Tenant, live), nil
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = domain.NewID()
	}
	labels, err := json.Marshal(map[string]string{domain.PoolLabel: p.Name})
	if err != nil {
		return nil, "", err
	}
	rows, err := query(ctx, tx, insertMembersSQL, namedArgs{
		"ids": ids, "tenant": p.Tenant, "provider": p.Provider, "owner": domain.PoolOwner(p.Name), "labels": labels,
		"params": []byte(p.Params), "now": now, "expires_at": now.Add(l.MaxLifetime), "create_deadline": now.Add(l.CreateTimeout),
		"message": "requested for pool " + p.Name + " by " + l.Worker,
	})
	if err != nil {
		return nil, "", err
	}
	created, err = collectSandboxes(rows)
	return created, "", err
}
