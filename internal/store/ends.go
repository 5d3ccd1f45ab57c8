package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// endSQL ends the sandboxes that the pick query selects (it must select id,
// state and lease_owner of live sandboxes, locking them), appending one event
// each, and returns the ended sandboxes. Parameters $1-$4 are reason, now,
// actor and message; the pick query's own parameters start at $5, and its
// nargs are followed by the caller's key id and name.
func endSQL(pick string, nargs int) string {
	return endSQLWith(pick, endValues{now: "$2::timestamptz", reason: "$1::text", actor: "$3::text", message: "$4::text",
		keyID: fmt.Sprintf("$%d::text", 5+nargs), keyName: fmt.Sprintf("$%d::text", 6+nargs)})
}

// endValues are the SQL expressions of an end's time, reason, actor,
// message and caller's key: parameters, or columns of the pick query's rows
// (cur).
type endValues struct{ now, reason, actor, message, keyID, keyName string }

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
			RETURNING s.*, cur.state AS from_state, ` + v.actor + ` AS end_actor, ` + v.message + ` AS end_message,
				` + v.keyID + ` AS end_key_id, ` + v.keyName + ` AS end_key_name
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
			SELECT id, tenant, ended_at, from_state, state, reason, end_actor, end_message, end_key_id, end_key_name FROM upd ORDER BY id
		)
		SELECT ` + sandboxColumns + ` FROM upd s`
}

// querier is what endMany needs: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// endMany ends what pick selects on behalf of the executor or the janitor
// (no caller).
func endMany(ctx context.Context, q querier, pick string, now time.Time, reason sandbox.Reason, actor sandbox.Actor, message string, args ...any) ([]sandbox.Sandbox, error) {
	return endManyBy(ctx, q, pick, now, reason, actor, sandbox.Caller{}, message, args...)
}

// endManyBy is endMany on behalf of a client's API key.
func endManyBy(ctx context.Context, q querier, pick string, now time.Time, reason sandbox.Reason, actor sandbox.Actor, by sandbox.Caller, message string, args ...any) ([]sandbox.Sandbox, error) {
	params := append(append([]any{string(reason), now, string(actor), message}, args...), nullable(by.KeyID), nullable(by.KeyName))
	rows, err := q.Query(ctx, endSQL(pick, len(args)), params...)
	if err != nil {
		return nil, interpret(err)
	}
	out, err := collectSandboxes(rows)
	return out, interpret(err)
}

// EndSandbox moves a live sandbox of the tenant to its terminal state (see
// endSQL). changed is false, and the sandbox is returned as it is, when it
// was already terminal. Concurrent calls share a statement and a commit.
// by is the API key of the client that asked, if any.
func (s *Store) EndSandbox(ctx context.Context, tenant, id string, reason sandbox.Reason, actor sandbox.Actor, by sandbox.Caller, message string) (sb sandbox.Sandbox, changed bool, err error) {
	sb, err = s.ends.do(ctx, endRow{id: id, tenant: tenant, reason: reason, actor: actor, by: by, message: message})
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
	by         sandbox.Caller
	message    string
}

// errNotLive is an endRow's result when the sandbox was not live (or not
// the tenant's): nothing changed.
var errNotLive = errors.New("sandbox not live")

func (s *Store) endOne(ctx context.Context, r endRow) (sandbox.Sandbox, error) {
	ended, err := endManyBy(ctx, s.pool,
		`SELECT id, state, lease_owner FROM sandboxes WHERE id = $5 AND tenant = $6 FOR UPDATE`,
		s.Now(), r.reason, r.actor, r.by, r.message, r.id, r.tenant)
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
	keyIDs, keyNames := make([]*string, n), make([]*string, n)
	for i, r := range rows {
		ids[i], tenants[i], reasons[i], actors[i], messages[i] = r.id, r.tenant, string(r.reason), string(r.actor), r.message
		keyIDs[i], keyNames[i] = nullable(r.by.KeyID), nullable(r.by.KeyName)
	}
	pgRows, err := s.pool.Query(ctx, endSQLWith(`
		SELECT s.id, s.state, s.lease_owner, n.reason, n.actor, n.message, n.key_id, n.key_name
		FROM sandboxes s
		JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $7::text[], $8::text[])
			AS n(id, tenant, reason, actor, message, key_id, key_name)
			ON n.id = s.id AND n.tenant = s.tenant
		ORDER BY s.id
		FOR UPDATE OF s`,
		endValues{now: "$6::timestamptz", reason: "cur.reason", actor: "cur.actor", message: "cur.message",
			keyID: "cur.key_id", keyName: "cur.key_name"}),
		ids, tenants, reasons, actors, messages, s.Now(), keyIDs, keyNames)
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

// EndExpired ends up to limit live sandboxes whose deadline passed, with
// reason expired.
func (s *Store) EndExpired(ctx context.Context, limit int) ([]sandbox.Sandbox, error) {
	ended, err := endMany(ctx, s.work, `
		SELECT id, state, lease_owner FROM sandboxes
		WHERE state IN `+liveStates+` AND expires_at < $2
		ORDER BY expires_at
		LIMIT $5
		FOR UPDATE SKIP LOCKED`,
		s.Now(), sandbox.ReasonExpired, sandbox.ActorJanitor, "ttl expired", limit)
	if err != nil {
		return nil, wrap("end expired", err)
	}
	s.announce(ended...)
	return ended, nil
}

// FailOverdue settles up to limit sandboxes whose creation deadline passed:
// creating ones fail (create_failed), keeping a live executor lease so that
// executor releases what its call makes; requested ones that no executor
// ever claimed are cancelled with reason create_failed.
func (s *Store) FailOverdue(ctx context.Context, limit int) ([]sandbox.Sandbox, error) {
	now := s.Now()
	rows, err := s.work.Query(ctx, `
		WITH cur AS (
			SELECT id, state FROM sandboxes
			WHERE state = 'creating' AND create_deadline < $1
			LIMIT $2
			FOR UPDATE SKIP LOCKED
		), upd AS (
			UPDATE sandboxes s SET
				state = 'failed', reason = 'create_failed', ended_at = $1, updated_at = $1,
				error = 'creation deadline passed' || coalesce(': ' || s.error, ''),
				lease_owner = CASE WHEN s.lease_expires_at >= $1 THEN s.lease_owner END,
				lease_expires_at = CASE WHEN s.lease_expires_at >= $1 AND s.lease_owner IS NOT NULL THEN s.lease_expires_at END
			FROM cur WHERE s.id = cur.id
			RETURNING s.*
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, $1, 'creating', 'failed', 'create_failed', 'janitor', 'creation deadline passed' FROM upd
		)
		SELECT `+sandboxColumns+` FROM upd s`, now, limit)
	if err != nil {
		return nil, wrap("fail overdue", err)
	}
	failed, err := collectSandboxes(rows)
	if err != nil {
		return nil, wrap("fail overdue", err)
	}
	cancelled, err := endMany(ctx, s.work, `
		SELECT id, state, lease_owner FROM sandboxes
		WHERE state = 'requested' AND create_deadline < $2
		LIMIT $5
		FOR UPDATE SKIP LOCKED`,
		now, sandbox.ReasonCreateFailed, sandbox.ActorJanitor, "no executor claimed it before the creation deadline", limit)
	if err != nil {
		return nil, wrap("cancel overdue", err)
	}
	s.announce(failed...)
	s.announce(cancelled...)
	return append(failed, cancelled...), nil
}
