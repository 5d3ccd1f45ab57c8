package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// liveStates is the SQL list of non-terminal states.
const liveStates = `('requested', 'creating', 'ready')`

// endSQL ends the sandboxes that the pick query selects (it must select id,
// state and lease_owner of live sandboxes, locking them), appending one event
// each, and returns the ended sandboxes. Parameters $1-$4 are reason, now,
// actor and message; the pick query's own parameters start at $5.
//
// A sandbox that was never claimed (requested) ends cancelled and released:
// nothing exists at the provider. One being created ends cancelled; the
// executor whose call is in flight keeps its lease and releases whatever
// the call made as soon as it returns. A ready one ends terminated and
// waits for a release worker.
func endSQL(pick string) string {
	return `
		WITH cur AS (` + pick + `), upd AS (
			UPDATE sandboxes s SET
				state = CASE cur.state WHEN 'ready' THEN 'terminated' ELSE 'cancelled' END,
				reason = $1, ended_at = $2, updated_at = $2,
				released = cur.state = 'requested',
				released_at = CASE WHEN cur.state = 'requested' THEN $2::timestamptz END,
				lease_owner = CASE WHEN cur.state = 'creating' THEN cur.lease_owner END,
				lease_expires_at = CASE WHEN cur.state = 'creating' AND cur.lease_owner IS NOT NULL THEN s.lease_expires_at END
			FROM cur
			WHERE s.id = cur.id AND cur.state IN ` + liveStates + `
			RETURNING s.*, cur.state AS from_state
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, $2, from_state, state, $1, $3, $4 FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`
}

// querier is what endMany needs: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func endMany(ctx context.Context, q querier, pick string, now time.Time, reason sandbox.Reason, actor sandbox.Actor, message string, args ...any) ([]sandbox.Sandbox, error) {
	rows, err := q.Query(ctx, endSQL(pick), append([]any{string(reason), now, string(actor), message}, args...)...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []sandbox.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, interpret(rows.Err())
}

// EndSandbox moves a live sandbox of the tenant to its terminal state (see
// endSQL). changed is false, and the sandbox is returned as it is, when it
// was already terminal.
func (s *Store) EndSandbox(ctx context.Context, tenant, id string, reason sandbox.Reason, actor sandbox.Actor, message string) (sb sandbox.Sandbox, changed bool, err error) {
	ended, err := endMany(ctx, s.pool,
		`SELECT id, state, lease_owner FROM sandboxes WHERE id = $5 AND tenant = $6 FOR UPDATE`,
		s.Now(), reason, actor, message, id, tenant)
	if err != nil {
		return sb, false, wrap("end sandbox", err)
	}
	if len(ended) == 1 {
		s.announce(ended...)
		return ended[0], true, nil
	}
	sb, err = s.GetSandbox(ctx, tenant, id)
	if err != nil {
		return sb, false, err
	}
	return sb, false, nil
}

// lapseOwner ends, in tx, the live sandboxes of an owner whose lease has
// lapsed (owner_expired), so that a new lease never revives sandboxes that
// outlived the old one.
func lapseOwner(ctx context.Context, tx pgx.Tx, now time.Time, tenant, owner string) ([]sandbox.Sandbox, error) {
	return endMany(ctx, tx, `
		SELECT s.id, s.state, s.lease_owner FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.tenant = $5 AND s.owner = $6 AND s.state IN `+liveStates+` AND o.expires_at < $2
		FOR UPDATE OF s`,
		now, sandbox.ReasonOwnerExpired, sandbox.ActorJanitor, "owner lease lapsed", tenant, owner)
}

// RenewOwnerLease extends the tenant's owner's lease to now+ttl. If the
// lease had lapsed, the owner's sandboxes that outlived it are ended first
// (owner_expired): a heartbeat after a lapse starts a new lease, it does not
// revive the old one. An owner the tenant never named is ErrNotFound.
func (s *Store) RenewOwnerLease(ctx context.Context, tenant, owner string, ttl time.Duration) (time.Time, error) {
	now := s.Now()
	expires := now.Add(ttl)
	var lapsed []sandbox.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		err := tx.QueryRow(ctx, `SELECT true FROM owners WHERE tenant = $1 AND name = $2 FOR UPDATE`, tenant, owner).Scan(&exists)
		if err != nil {
			return err
		}
		if lapsed, err = lapseOwner(ctx, tx, now, tenant, owner); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE owners SET expires_at = $3, updated_at = $4 WHERE tenant = $1 AND name = $2`,
			tenant, owner, expires, now)
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
func (s *Store) ReleaseOwner(ctx context.Context, tenant, owner string) ([]sandbox.Sandbox, error) {
	now := s.Now()
	var ended []sandbox.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE owners SET expires_at = least(expires_at, $3), updated_at = $3
			WHERE tenant = $1 AND name = $2`, tenant, owner, now); err != nil {
			return err
		}
		var err error
		ended, err = endMany(ctx, tx, `
			SELECT id, state, lease_owner FROM sandboxes
			WHERE tenant = $5 AND owner = $6 AND state IN `+liveStates+` FOR UPDATE`,
			now, sandbox.ReasonOwnerReleased, sandbox.ActorClient, "owner released", tenant, owner)
		return err
	})
	if err != nil {
		return nil, wrap("release owner", err)
	}
	s.announce(ended...)
	return ended, nil
}

// RenewSandbox sets the live sandbox's deadline to now+ttl, capped at its
// creation plus maxLifetime; capped reports whether the cap applied. A
// terminal sandbox is a SANDBOX_STATE_CONFLICT.
func (s *Store) RenewSandbox(ctx context.Context, tenant, id string, ttl, maxLifetime time.Duration) (sb sandbox.Sandbox, capped bool, err error) {
	now := s.Now()
	sb, err = scanSandbox(s.pool.QueryRow(ctx, `
		UPDATE sandboxes s SET expires_at = least($3::timestamptz, s.created_at + $4::interval), updated_at = $5
		WHERE s.id = $1 AND s.tenant = $2 AND s.state IN `+liveStates+`
		RETURNING `+sandboxColumns,
		id, tenant, now.Add(ttl), maxLifetime, now))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := s.GetSandbox(ctx, tenant, id)
		if gerr != nil {
			return cur, false, gerr
		}
		return cur, false, sandbox.StateConflict(id, cur.State, "renew a sandbox that has ended")
	}
	if err != nil {
		return sb, false, wrap("renew sandbox", err)
	}
	return sb, sb.ExpiresAt.Before(now.Add(ttl)), nil
}
