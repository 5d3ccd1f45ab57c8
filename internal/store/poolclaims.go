package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// claimMemberSQL takes the oldest ready member of the pool @pool of
// @tenant, through sandboxes_pool_ready (whose predicate the query repeats,
// so that the planner may use it), in one statement: the member is locked
// as it is picked (SKIP LOCKED, so
// that concurrent claims take different members and never wait for each
// other), moves from the pool's owner @pool_owner to @owner (NULL: none),
// gets the caller's @labels on top of its own and the deadline
// @expires_at (capped by its creation plus @max_lifetime), and the move
// is recorded as an event (owner_transferred). Only a member that may
// live until @min_expires is taken. A member ended, or claimed, since the
// statement's snapshot is re-checked when locked and passed over.
var claimMemberSQL = `
	WITH pick AS (
		SELECT id FROM sandboxes
		WHERE tenant = @tenant AND owner = @pool_owner AND state = 'ready' AND owner LIKE 'pool:%'
		  AND created_at + @max_lifetime::interval >= @min_expires::timestamptz
		ORDER BY created_at
		LIMIT 1
		FOR UPDATE SKIP LOCKED
	), upd AS (
		UPDATE sandboxes s SET owner = @owner::text,
			labels = s.labels || @labels::jsonb || jsonb_build_object('` + domain.PoolLabel + `', @pool::text),
			expires_at = least(@expires_at::timestamptz, s.created_at + @max_lifetime::interval), updated_at = @now
		FROM pick
		WHERE s.id = pick.id
		RETURNING s.*
	), ev AS (
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
		SELECT id, tenant, @now, 'ready', 'ready', 'owner_transferred', 'client',
			'claimed from pool ' || @pool::text || ': owner ' || @pool_owner::text || ' -> ' || coalesce('owner ' || @owner::text, 'no owner'),
			@key_id::text, @key_name::text
		FROM upd
	)
	SELECT ` + clientColumns + ` FROM upd s`

// ClaimFromPool claims a ready member of the tenant's pool for p's owner
// (see claimMemberSQL). Each member is claimed by one caller only, however
// many replicas claim at once. With no member ready it returns the pool
// (Claimed false), so that the caller may create a sandbox like its
// members; a pool the tenant has not got is ErrNotFound. An owner without
// a live lease gets one of p.OwnerTTL, in the same transaction. With an
// idempotency key, a key already used returns that request's sandbox
// (Replayed), or IDEMPOTENCY_KEY_REUSED for another request: the claim
// this call made is rolled back.
func (s *Store) ClaimFromPool(ctx context.Context, p domain.ClaimParams) (domain.PoolClaim, error) {
	labels, err := json.Marshal(nonNil(p.Labels))
	if err != nil {
		return domain.PoolClaim{}, wrap("claim from pool", err)
	}
	now := s.Now()
	minExpires := now
	if p.Explicit {
		minExpires = now.Add(p.TTL)
	}
	args := namedArgs{
		"tenant": p.Tenant, "pool": p.Pool, "pool_owner": domain.PoolOwner(p.Pool), "owner": nullable(p.Owner),
		"labels": labels, "now": now, "expires_at": now.Add(p.TTL), "min_expires": minExpires, "max_lifetime": p.MaxLifetime,
		"key_id": nullable(p.Caller.KeyID), "key_name": nullable(p.Caller.KeyName),
	}
	var (
		c      domain.PoolClaim
		lapsed []domain.Sandbox
	)
	if p.Owner == "" && p.IdempotencyKey == "" {
		// The common case is the one statement alone.
		c.Sandbox, err = scanSandbox(querySandbox(ctx, s.pool, claimMemberSQL, args))
	} else {
		err = s.pool.inTx(ctx, func(tx pgx.Tx) error {
			if p.Owner != "" {
				var err error
				if lapsed, err = s.ensureOwnerLease(ctx, tx, now, p.Tenant, p.Owner, p.OwnerTTL); err != nil {
					return err
				}
			}
			sb, err := scanSandbox(querySandbox(ctx, tx, claimMemberSQL, args))
			if err != nil || p.IdempotencyKey == "" {
				c.Sandbox = sb
				return err
			}
			c, err = keyClaim(ctx, tx, p, sb, now)
			return err
		})
	}
	s.announce(lapsed...)
	switch {
	case errors.Is(err, errReplay):
		return c, nil
	case errors.Is(err, pgx.ErrNoRows):
		return s.poolForCreate(ctx, p)
	case err != nil:
		return domain.PoolClaim{}, coded("claim from pool", err)
	}
	c.Claimed = true
	s.announce(c.Sandbox)
	return c, nil
}

// errReplay rolls a claim back whose idempotency key an earlier request
// used: the earlier request's sandbox is the answer.
var errReplay = errors.New("idempotency key replayed")

// keyClaim records p's idempotency key for the member sb just claimed, in
// tx. A key an earlier request recorded returns that request's sandbox
// with errReplay, or IDEMPOTENCY_KEY_REUSED for a different request; the
// claim then rolls back.
func keyClaim(ctx context.Context, tx pgx.Tx, p domain.ClaimParams, sb domain.Sandbox, now time.Time) (domain.PoolClaim, error) {
	cp := domain.CreateParams{Tenant: p.Tenant, IdempotencyKey: p.IdempotencyKey, RequestHash: p.RequestHash}
	earlier, replay, err := replayedCreate(ctx, tx, cp, sb.ID, now)
	if err != nil {
		return domain.PoolClaim{}, err
	}
	if replay {
		earlier.Env, earlier.Setup, earlier.Params = nil, "", nil
		return domain.PoolClaim{Sandbox: earlier, Replayed: true}, errReplay
	}
	return domain.PoolClaim{Sandbox: sb}, nil
}

// poolForCreate is ClaimFromPool's answer when no member was ready: the
// pool, for a create like its members (which, with p's idempotency key,
// finds the sandbox an earlier request with it got).
func (s *Store) poolForCreate(ctx context.Context, p domain.ClaimParams) (domain.PoolClaim, error) {
	pool, err := s.GetPool(ctx, p.Tenant, p.Pool)
	if err != nil {
		return domain.PoolClaim{}, err
	}
	return domain.PoolClaim{Pool: pool}, nil
}
