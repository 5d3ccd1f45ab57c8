package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// endSQL ends the sandboxes that the pick query selects (it must select id,
// state and lease_owner of live sandboxes, locking them), appending one event
// each, and returns the ended sandboxes. Parameters $1-$4 are reason, now,
// actor and message; the pick query's own parameters start at $5.
func endSQL(pick string) string {
	return endSQLWith(pick, endValues{now: "$2::timestamptz", reason: "$1::text", actor: "$3::text", message: "$4::text"})
}

// endValues are the SQL expressions of an end's time, reason, actor and
// message: parameters, or columns of the pick query's rows (cur).
type endValues struct{ now, reason, actor, message string }

// endSQLWith is endSQL with the end's values given as SQL expressions.
//
// A sandbox that was never claimed (requested) ends cancelled and released:
// nothing exists at the provider. One being created ends cancelled; the
// executor whose call is in flight keeps its lease and releases whatever
// the call made as soon as it returns. A ready one ends terminated and
// waits for a release worker.
func endSQLWith(pick string, v endValues) string {
	return `
		WITH cur AS (` + pick + `), upd AS (
			UPDATE sandboxes s SET
				state = CASE cur.state WHEN 'ready' THEN 'terminated' ELSE 'cancelled' END,
				reason = ` + v.reason + `, ended_at = ` + v.now + `, updated_at = ` + v.now + `,
				released = cur.state = 'requested',
				released_at = CASE WHEN cur.state = 'requested' THEN ` + v.now + ` END,
				lease_owner = CASE WHEN cur.state = 'creating' THEN cur.lease_owner END,
				lease_expires_at = CASE WHEN cur.state = 'creating' AND cur.lease_owner IS NOT NULL THEN s.lease_expires_at END
			FROM cur
			WHERE s.id = cur.id AND cur.state IN ` + liveStates + `
			RETURNING s.*, cur.state AS from_state, ` + v.actor + ` AS end_actor, ` + v.message + ` AS end_message
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, ended_at, from_state, state, reason, end_actor, end_message FROM upd ORDER BY id
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
	out, err := collectSandboxes(rows)
	return out, interpret(err)
}

// EndSandbox moves a live sandbox of the tenant to its terminal state (see
// endSQL). changed is false, and the sandbox is returned as it is, when it
// was already terminal. Concurrent calls share a statement and a commit.
func (s *Store) EndSandbox(ctx context.Context, tenant, id string, reason sandbox.Reason, actor sandbox.Actor, message string) (sb sandbox.Sandbox, changed bool, err error) {
	sb, err = s.ends.do(ctx, endRow{id: id, tenant: tenant, reason: reason, actor: actor, message: message})
	switch {
	case err == nil:
		return sb, true, nil
	case !errors.Is(err, errNotLive):
		return sb, false, wrap("end sandbox", err)
	}
	sb, err = s.GetSandbox(ctx, tenant, id)
	if err != nil {
		return sb, false, err
	}
	return sb, false, nil
}

// endRow is one EndSandbox.
type endRow struct {
	id, tenant string
	reason     sandbox.Reason
	actor      sandbox.Actor
	message    string
}

// errNotLive is an endRow's result when the sandbox was not live (or not
// the tenant's): nothing changed.
var errNotLive = errors.New("sandbox not live")

func (s *Store) endOne(ctx context.Context, r endRow) (sandbox.Sandbox, error) {
	ended, err := endMany(ctx, s.pool,
		`SELECT id, state, lease_owner FROM sandboxes WHERE id = $5 AND tenant = $6 FOR UPDATE`,
		s.Now(), r.reason, r.actor, r.message, r.id, r.tenant)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if len(ended) == 0 {
		return sandbox.Sandbox{}, errNotLive
	}
	s.announce(ended...)
	return ended[0], nil
}

// endBatch is endOne for many sandboxes in one statement: the rows are
// locked in id order, and each carries its own reason, actor and message.
// It returns what it ended by endKey.
func (s *Store) endBatch(ctx context.Context, rows []endRow) (map[string]sandbox.Sandbox, error) {
	n := len(rows)
	ids, tenants, reasons, actors, messages := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		ids[i], tenants[i], reasons[i], actors[i], messages[i] = r.id, r.tenant, string(r.reason), string(r.actor), r.message
	}
	pgRows, err := s.pool.Query(ctx, endSQLWith(`
		SELECT s.id, s.state, s.lease_owner, n.reason, n.actor, n.message
		FROM sandboxes s
		JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS n(id, tenant, reason, actor, message)
			ON n.id = s.id AND n.tenant = s.tenant
		ORDER BY s.id
		FOR UPDATE OF s`,
		endValues{now: "$6::timestamptz", reason: "cur.reason", actor: "cur.actor", message: "cur.message"}),
		ids, tenants, reasons, actors, messages, s.Now())
	if err != nil {
		return nil, err
	}
	ended, err := collectSandboxes(pgRows)
	if err != nil {
		return nil, err
	}
	s.announce(ended...)
	byKey := make(map[string]sandbox.Sandbox, len(ended))
	for _, sb := range ended {
		byKey[endKey(sb.Tenant, sb.ID)] = sb
	}
	return byKey, nil
}

// endKey identifies an endRow in a batch: a sandbox id is only ever
// answered to the tenant that asked.
func endKey(tenant, id string) string { return tenant + "\x00" + id }

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
