package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// ensureOwnerLease makes sure the owner has a live lease, in tx: an owner
// named for the first time, or whose lease lapsed, gets one of ttl. The
// sandboxes that outlived a lapsed lease are ended first, and returned.
func (s *Store) ensureOwnerLease(ctx context.Context, tx pgx.Tx, now time.Time, tenant, owner string, ttl time.Duration) ([]domain.Sandbox, error) {
	var expires time.Time
	err := queryRow(ctx, tx, `
		INSERT INTO owners (tenant, name, expires_at, created_at, updated_at) VALUES (@tenant, @owner, @expires_at, @now, @now)
		ON CONFLICT (tenant, name) DO UPDATE SET updated_at = owners.updated_at
		RETURNING expires_at`, namedArgs{"tenant": tenant, "owner": owner, "expires_at": now.Add(ttl), "now": now}).Scan(&expires)
	if err != nil {
		return nil, err
	}
	if !expires.Before(now) {
		return nil, nil
	}
	ended, err := lapseOwner(ctx, tx, now, tenant, owner)
	if err != nil {
		return nil, err
	}
	_, err = exec(ctx, tx, renewOwnerSQL, namedArgs{"tenant": tenant, "owner": owner, "expires_at": now.Add(ttl), "now": now})
	return ended, err
}

// renewOwnerSQL starts a new lease of the owner @owner of @tenant, until
// @expires_at.
const renewOwnerSQL = `UPDATE owners SET expires_at = @expires_at, updated_at = @now WHERE tenant = @tenant AND name = @owner`

// lapseOwner ends, in tx, the live sandboxes of an owner whose lease has
// lapsed (owner_expired), so that a new lease never revives sandboxes that
// outlived the old one.
func lapseOwner(ctx context.Context, tx pgx.Tx, now time.Time, tenant, owner string) ([]domain.Sandbox, error) {
	return endMany(ctx, tx, endLapsedOwnerSQL, ownerLapsed(now), namedArgs{"tenant": tenant, "owner": owner})
}

// ownerLapsed is the end of the sandboxes of an owner whose lease lapsed.
func ownerLapsed(now time.Time) end {
	return end{now: now, reason: domain.ReasonOwnerExpired, actor: domain.ActorJanitor, message: "owner lease lapsed"}
}

// RenewOwnerLease extends the tenant's owner's lease to now+ttl. If the
// lease had lapsed, the owner's sandboxes that outlived it are ended first
// (owner_expired): a heartbeat after a lapse starts a new lease, it does not
// revive the old one. An owner the tenant never named is ErrNotFound.
// Callers run SettleOutage first, so that an outage is credited before the
// lease is judged.
func (s *Store) RenewOwnerLease(ctx context.Context, tenant, owner string, ttl time.Duration) (time.Time, error) {
	now := s.Now()
	expires := now.Add(ttl)
	var lapsed []domain.Sandbox
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		err := queryRow(ctx, tx, `SELECT true FROM owners WHERE tenant = @tenant AND name = @owner FOR UPDATE`,
			namedArgs{"tenant": tenant, "owner": owner}).Scan(&exists)
		if err != nil {
			return err
		}
		if lapsed, err = lapseOwner(ctx, tx, now, tenant, owner); err != nil {
			return err
		}
		_, err = exec(ctx, tx, renewOwnerSQL, namedArgs{"tenant": tenant, "owner": owner, "expires_at": expires, "now": now})
		return err
	})
	if err != nil {
		return time.Time{}, wrap("renew owner lease", err)
	}
	s.announce(lapsed...)
	return expires, nil
}

// ReleaseOwner ends the owner's lease now and all its live sandboxes with
// reason owner_released, and returns them. An owner with no sandboxes, or
// one the tenant never named, ends nothing and is not an error.
//
// by is the API key of the client that asked.
func (s *Store) ReleaseOwner(ctx context.Context, tenant, owner string, by domain.Caller) ([]domain.Sandbox, error) {
	now := s.Now()
	var ended []domain.Sandbox
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := exec(ctx, tx, `UPDATE owners SET expires_at = least(expires_at, @now), updated_at = @now
			WHERE tenant = @tenant AND name = @owner`, namedArgs{"tenant": tenant, "owner": owner, "now": now}); err != nil {
			return err
		}
		var err error
		ended, err = endMany(ctx, tx, endOwnerSQL,
			end{now: now, reason: domain.ReasonOwnerReleased, actor: domain.ActorClient, by: by, message: "owner released"},
			namedArgs{"tenant": tenant, "owner": owner})
		return err
	})
	if err != nil {
		return nil, wrap("release owner", err)
	}
	s.announce(ended...)
	return ended, nil
}

// EndLapsedOwners ends up to limit live sandboxes whose owner's lease has
// lapsed, with reason owner_expired (the statement endLapsedOwnersSQL, in
// ends.go). It extends no lease: the janitor runs CreditOutage first, so
// that an outage is credited before leases are judged.
func (s *Store) EndLapsedOwners(ctx context.Context, limit int) ([]domain.Sandbox, error) {
	ended, err := endMany(ctx, s.work, endLapsedOwnersSQL, ownerLapsed(s.Now()), namedArgs{"limit": limit})
	if err != nil {
		return nil, wrap("end lapsed owners", err)
	}
	s.announce(ended...)
	return ended, nil
}

// TransferOwner makes owner the owner of the tenant's live sandbox, so that
// a new process can adopt it: the sandbox then lives as long as owner's
// lease, which starts (of ttl) if owner has none live. The change is
// recorded as an event. Naming the current owner changes nothing. A sandbox
// that has ended is a SANDBOX_STATE_CONFLICT; one of another tenant is
// ErrNotFound. by is the API key of the client that asked. Callers run
// SettleOutage first: the new owner's lease may be judged.
func (s *Store) TransferOwner(ctx context.Context, tenant, id, owner string, ttl time.Duration, by domain.Caller) (domain.Sandbox, error) {
	now := s.Now()
	var (
		sb    domain.Sandbox
		ended []domain.Sandbox
	)
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var (
			state domain.State
			prev  *string
		)
		err := queryRow(ctx, tx, `SELECT state, owner FROM sandboxes WHERE id = @id AND tenant = @tenant FOR UPDATE`,
			namedArgs{"id": id, "tenant": tenant}).Scan(&state, &prev)
		if err != nil {
			return err
		}
		if state.Terminal() {
			return domain.StateConflict(id, state, "change the owner of a sandbox that has ended")
		}
		if prev != nil && *prev == owner {
			sb, err = scanSandbox(querySandbox(ctx, tx, sandboxSQL, namedArgs{"id": id}))
			return err
		}
		if ended, err = s.ensureOwnerLease(ctx, tx, now, tenant, owner, ttl); err != nil {
			return err
		}
		sb, err = scanSandbox(querySandbox(ctx, tx, `
			UPDATE sandboxes s SET owner = @owner, updated_at = @now WHERE s.id = @id AND s.tenant = @tenant
			RETURNING `+sandboxColumns, namedArgs{"id": id, "tenant": tenant, "owner": owner, "now": now}))
		if err != nil {
			return err
		}
		from := "no owner"
		if prev != nil {
			from = "owner " + *prev
		}
		_, err = exec(ctx, tx, `
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
			VALUES (@id, @tenant, @now, @state, @state, @reason, @actor, @message, @key_id, @key_name)`,
			namedArgs{
				"id": id, "tenant": tenant, "now": now, "state": state, "reason": domain.ReasonOwnerTransferred,
				"actor": domain.ActorClient, "message": from + " -> owner " + owner,
			},
			namedArgs{"key_id": nullable(by.KeyID), "key_name": nullable(by.KeyName)})
		return err
	})
	if err != nil {
		return sb, wrap("transfer owner", err)
	}
	s.announce(ended...)
	return sb, nil
}

// ListOwners returns up to limit of the tenant's owners after the name
// after, in name order, each with its lease and its live sandboxes.
func (s *Store) ListOwners(ctx context.Context, tenant, after string, limit int) ([]domain.Owner, error) {
	rows, err := query(ctx, s.pool, `
		SELECT o.name, o.expires_at, o.created_at,
			(SELECT count(*) FROM sandboxes s WHERE s.tenant = o.tenant AND s.owner = o.name AND s.state IN `+liveStates+`)
		FROM owners o WHERE o.tenant = @tenant AND o.name > @after ORDER BY o.name LIMIT @limit`,
		namedArgs{"tenant": tenant, "after": after, "limit": limit})
	if err != nil {
		return nil, wrap("list owners", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Owner, error) {
		var o domain.Owner
		err := r.Scan(&o.Name, &o.ExpiresAt, &o.CreatedAt, &o.Live)
		return o, err
	})
	if err != nil {
		return nil, wrap("list owners", err)
	}
	return out, nil
}
