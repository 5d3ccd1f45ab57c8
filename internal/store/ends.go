package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// Every statement that ends sandboxes is named here: endSQL is the end
// itself, the same for all of them, and each statement below is endSQL
// over the query that picks what it ends. Their arguments are named
// (namedArgs), so each reads on its own: the end's own are @now,
// @reason, @actor, @message, @key_id and @key_name (see endMany), and each
// pick names the rest.
var (
	// endSandboxSQL ends the sandbox @id of @tenant (EndSandbox, alone).
	endSandboxSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes WHERE id = @id AND tenant = @tenant FOR UPDATE`)

	// endSandboxesSQL is endSandboxSQL for many sandboxes at once
	// (EndSandbox, batched), given as arrays: the rows are locked in id
	// order, and each carries its own reason, actor, message and key.
	endSandboxesSQL = endSQLWith(`
		SELECT s.id, s.state, s.lease_owner, n.reason, n.actor, n.message, n.key_id, n.key_name
		FROM sandboxes s
		JOIN unnest(@ids::text[], @tenants::text[], @reasons::text[], @actors::text[], @messages::text[],
			@key_ids::text[], @key_names::text[])
			AS n(id, tenant, reason, actor, message, key_id, key_name)
			ON n.id = s.id AND n.tenant = s.tenant
		ORDER BY s.id
		FOR UPDATE OF s`,
		endValues{now: "@now::timestamptz", reason: "cur.reason", actor: "cur.actor", message: "cur.message",
			keyID: "cur.key_id", keyName: "cur.key_name"})

	// endLapsedOwnersSQL is the janitor's sweep of lapsed owners
	// (EndLapsedOwners): it ends up to @limit live sandboxes whose owner's
	// lease ended before @now, skipping rows another replica's sweep holds.
	endLapsedOwnersSQL = endSQL(`
		SELECT s.id, s.state, s.lease_owner FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.owner IS NOT NULL AND s.state IN ` + liveStates + ` AND o.expires_at < @now
		LIMIT @limit
		FOR UPDATE OF s SKIP LOCKED`)

	// endLapsedOwnerSQL ends the live sandboxes of the one owner @owner of
	// @tenant if its lease ended before @now: a heartbeat, a create or a
	// transfer naming a lapsed owner runs it before the owner's new lease
	// starts (lapseOwner).
	endLapsedOwnerSQL = endSQL(`
		SELECT s.id, s.state, s.lease_owner FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.tenant = @tenant AND s.owner = @owner AND s.state IN ` + liveStates + ` AND o.expires_at < @now
		FOR UPDATE OF s`)

	// endOwnerSQL ends every live sandbox of @owner of @tenant
	// (ReleaseOwner).
	endOwnerSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes
		WHERE tenant = @tenant AND owner = @owner AND state IN ` + liveStates + ` FOR UPDATE`)

	// endExpiredSQL ends up to @limit live sandboxes whose deadline passed
	// before @now, earliest first (EndExpired).
	endExpiredSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes
		WHERE state IN ` + liveStates + ` AND expires_at < @now
		ORDER BY expires_at
		LIMIT @limit
		FOR UPDATE SKIP LOCKED`)

	// cancelOverdueSQL cancels up to @limit requested sandboxes whose
	// creation deadline passed before @now (FailOverdue).
	cancelOverdueSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes
		WHERE state = 'requested' AND create_deadline < @now
		LIMIT @limit
		FOR UPDATE SKIP LOCKED`)

	// endLostSQL ends the ready or paused sandbox @id (MarkLost).
	endLostSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes WHERE id = @id AND ` + byIDState("state", settledHeld) + ` FOR UPDATE`)

	// endStrandedSQL ends the claimed live sandbox @id if it is still
	// placed on @node and that node has had no heartbeat within @grace
	// (MarkStranded).
	endStrandedSQL = endSQL(`
		SELECT id, state, lease_owner FROM sandboxes
		WHERE id = @id AND ` + byIDState("state", placedStates) + ` AND node = @node AND ` + nodeDead("sandboxes.node") + `
		FOR UPDATE`)
)

// endSQL ends the sandboxes that the pick query selects (it must select id,
// state and lease_owner of live sandboxes, locking them), appending one
// event each, and returns the ended sandboxes. The end's values are the
// named arguments @now, @reason, @actor, @message, @key_id and @key_name
// (see endMany); pick may use @now too.
func endSQL(pick string) string {
	return endSQLWith(pick, endValues{now: "@now::timestamptz", reason: "@reason::text", actor: "@actor::text",
		message: "@message::text", keyID: "@key_id::text", keyName: "@key_name::text"})
}

// endValues are the SQL expressions of an end's time, reason, actor,
// message and caller's key: named arguments, or columns of the pick
// query's rows (cur).
type endValues struct{ now, reason, actor, message, keyID, keyName string }

// endSQLWith is endSQL with the end's values given as SQL expressions.
//
// A sandbox that was never claimed (requested) ends cancelled and released:
// nothing exists at the provider. One being created ends cancelled; the
// executor whose call is in flight keeps its lease and releases whatever
// the call made as soon as it returns. A ready, pausing, paused or resuming
// one ends terminated and waits for a release worker; a pausing or resuming
// one's executor keeps its lease, like a create's, so that no release runs
// while its call is in flight (it releases the sandbox itself); so does the
// executor taking a snapshot of a ready or paused one (snapshotLeased),
// which hands the sandbox to the release workers when its copy ends.
func endSQLWith(pick string, v endValues) string {
	return `
		WITH cur AS (` + pick + `), upd AS (
			UPDATE sandboxes s SET
				state = CASE WHEN cur.state IN ('requested', 'creating') THEN 'cancelled' ELSE 'terminated' END,
				reason = ` + v.reason + `, ended_at = ` + v.now + `, updated_at = ` + v.now + `,
				released = cur.state = 'requested',
				released_at = CASE WHEN cur.state = 'requested' THEN ` + v.now + ` END,
				lease_owner = CASE WHEN cur.state IN ` + inFlightStates + ` OR ` + snapshotLeased(v.now) + ` THEN cur.lease_owner END,
				lease_expires_at = CASE WHEN (cur.state IN ` + inFlightStates + ` OR ` + snapshotLeased(v.now) + `)
					AND cur.lease_owner IS NOT NULL THEN s.lease_expires_at END
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

// end is what an end records with each sandbox it ends: when, why, who,
// and the API key of the client that asked, if one did.
type end struct {
	now     time.Time
	reason  domain.Reason
	actor   domain.Actor
	by      domain.Caller
	message string
}

// endMany runs stmt, one of the statements above, with the end's named
// arguments and pick's: the arguments of stmt's pick query other than @now.
func endMany(ctx context.Context, q querier, stmt string, e end, pick namedArgs) ([]domain.Sandbox, error) {
	rows, err := query(ctx, q, stmt, namedArgs{
		"now": e.now, "reason": string(e.reason), "actor": string(e.actor), "message": e.message,
		"key_id": nullable(e.by.KeyID), "key_name": nullable(e.by.KeyName),
	}, pick)
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
//
// A sandbox whose create commits while the end's statement runs is not in
// that statement's snapshot, yet the read after it finds the sandbox live:
// then the end runs again, so that a delete racing its own create (a
// client's replay with the same id) never answers a live sandbox as
// unchanged.
func (s *Store) EndSandbox(ctx context.Context, tenant, id string, reason domain.Reason, actor domain.Actor, by domain.Caller, message string) (sb domain.Sandbox, changed bool, err error) {
	const attempts = 3 // the second always sees a sandbox the first read found
	for range attempts {
		sb, err = s.ends.do(ctx, endRow{id: id, tenant: tenant, reason: reason, actor: actor, by: by, message: message})
		switch {
		case err == nil:
			return sb, true, nil
		case !errors.Is(err, errNotLive):
			return sb, false, wrap("end sandbox", err)
		}
		if s.afterNotLive != nil {
			s.afterNotLive()
		}
		sb, err = s.GetSandbox(ctx, tenant, id)
		if err != nil {
			return sb, false, err
		}
		if !sb.Live() {
			return sb, false, nil
		}
	}
	return domain.Sandbox{}, false, wrap("end sandbox", fmt.Errorf("sandbox %s stayed live after %d ends", id, attempts))
}

// endRow is one EndSandbox.
type endRow struct {
	id, tenant string
	reason     domain.Reason
	actor      domain.Actor
	by         domain.Caller
	message    string
}

// errNotLive is an endRow's result when the sandbox was not live (or not
// the tenant's): nothing changed.
var errNotLive = errors.New("sandbox not live")

func (s *Store) endOne(ctx context.Context, r endRow) (domain.Sandbox, error) {
	ended, err := endMany(ctx, s.pool, endSandboxSQL,
		end{now: s.Now(), reason: r.reason, actor: r.actor, by: r.by, message: r.message},
		namedArgs{"id": r.id, "tenant": r.tenant})
	if err != nil {
		return domain.Sandbox{}, err
	}
	if len(ended) == 0 {
		return domain.Sandbox{}, errNotLive
	}
	s.announce(ended...)
	return ended[0], nil
}

// endBatch is endOne for many sandboxes in one statement: the rows are
// locked in id order, and each carries its own reason, actor and message.
// It returns what it ended by endKey.
func (s *Store) endBatch(ctx context.Context, rows []endRow) (map[string]domain.Sandbox, error) {
	n := len(rows)
	ids, tenants, reasons, actors, messages := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keyIDs, keyNames := make([]*string, n), make([]*string, n)
	for i, r := range rows {
		ids[i], tenants[i], reasons[i], actors[i], messages[i] = r.id, r.tenant, string(r.reason), string(r.actor), r.message
		keyIDs[i], keyNames[i] = nullable(r.by.KeyID), nullable(r.by.KeyName)
	}
	pgRows, err := query(ctx, s.pool, endSandboxesSQL, namedArgs{
		"ids": ids, "tenants": tenants, "reasons": reasons, "actors": actors, "messages": messages,
		"key_ids": keyIDs, "key_names": keyNames, "now": s.Now(),
	})
	if err != nil {
		return nil, err
	}
	ended, err := collectSandboxes(pgRows)
	if err != nil {
		return nil, err
	}
	s.announce(ended...)
	byKey := make(map[string]domain.Sandbox, len(ended))
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
func (s *Store) EndExpired(ctx context.Context, limit int) ([]domain.Sandbox, error) {
	ended, err := endMany(ctx, s.work, endExpiredSQL,
		end{now: s.Now(), reason: domain.ReasonExpired, actor: domain.ActorJanitor, message: "ttl expired"},
		namedArgs{"limit": limit})
	if err != nil {
		return nil, wrap("end expired", err)
	}
	s.announce(ended...)
	return ended, nil
}

// failOverdueSQL fails up to @limit creating sandboxes whose creation
// deadline passed before @now, keeping the lease of an executor whose call
// is still in flight (FailOverdue).
var failOverdueSQL = `
		WITH cur AS (
			SELECT id, state FROM sandboxes
			WHERE state = 'creating' AND create_deadline < @now
			LIMIT @limit
			FOR UPDATE SKIP LOCKED
		), upd AS (
			UPDATE sandboxes s SET
				state = 'failed', reason = 'create_failed', ended_at = @now, updated_at = @now,
				error = 'creation deadline passed' || coalesce(': ' || s.error, ''),
				lease_owner = CASE WHEN s.lease_expires_at >= @now THEN s.lease_owner END,
				lease_expires_at = CASE WHEN s.lease_expires_at >= @now AND s.lease_owner IS NOT NULL THEN s.lease_expires_at END
			FROM cur WHERE s.id = cur.id
			RETURNING s.*
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, 'creating', 'failed', 'create_failed', 'janitor', 'creation deadline passed' FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`

// FailOverdue settles up to limit sandboxes whose creation deadline passed,
// and up to limit whose pause deadline did: creating ones fail
// (create_failed), keeping a live executor lease so that executor releases
// what its call makes; requested ones that no executor ever claimed are
// cancelled with reason create_failed; pausing and resuming ones fail
// (pause_failed, resume_failed), also keeping a live lease.
func (s *Store) FailOverdue(ctx context.Context, limit int) ([]domain.Sandbox, error) {
	now := s.Now()
	rows, err := query(ctx, s.work, failOverdueSQL, namedArgs{"now": now, "limit": limit})
	if err != nil {
		return nil, wrap("fail overdue", err)
	}
	failed, err := collectSandboxes(rows)
	if err != nil {
		return nil, wrap("fail overdue", err)
	}
	cancelled, err := endMany(ctx, s.work, cancelOverdueSQL,
		end{now: now, reason: domain.ReasonCreateFailed, actor: domain.ActorJanitor,
			message: "no executor claimed it before the creation deadline"},
		namedArgs{"limit": limit})
	if err != nil {
		return nil, wrap("cancel overdue", err)
	}
	stuck, err := s.failOverdueTransitions(ctx, now, limit)
	if err != nil {
		return nil, err
	}
	s.announce(failed...)
	s.announce(cancelled...)
	s.announce(stuck...)
	return append(append(failed, cancelled...), stuck...), nil
}

// snapshotLeased is the SQL condition, over an end's cur and s, of a ready
// or paused sandbox leased (live at now) to the executor taking its
// snapshot: the only lease such a sandbox has.
func snapshotLeased(now string) string {
	return `(cur.state IN ('ready', 'paused') AND cur.lease_owner IS NOT NULL AND s.lease_expires_at >= ` + now + `)`
}
