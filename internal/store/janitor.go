package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// TryLead takes or keeps the leadership of role for holder until now+ttl. It
// returns true while holder leads: when the role is free, its lease lapsed,
// or holder already holds it.
func (s *Store) TryLead(ctx context.Context, role, holder string, ttl time.Duration) (bool, error) {
	now := s.Now()
	var got string
	err := s.work.QueryRow(ctx, `
		INSERT INTO leaders (role, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (role) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE leaders.holder = EXCLUDED.holder OR leaders.expires_at < $4
		RETURNING holder`, role, holder, now.Add(ttl), now).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("try lead", err)
	}
	return got == holder, nil
}

// Resign gives up holder's leadership of role, so another replica can take
// over at once instead of after the lease.
func (s *Store) Resign(ctx context.Context, role, holder string) error {
	if _, err := s.work.Exec(ctx, `DELETE FROM leaders WHERE role = $1 AND holder = $2`, role, holder); err != nil {
		return wrap("resign", err)
	}
	return nil
}

// EndLapsedOwners ends up to limit live sandboxes whose owner's lease has
// lapsed, with reason owner_expired.
func (s *Store) EndLapsedOwners(ctx context.Context, limit int) ([]sandbox.Sandbox, error) {
	ended, err := endMany(ctx, s.work, `
		SELECT s.id, s.state, s.lease_owner FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.owner IS NOT NULL AND s.state IN `+liveStates+` AND o.expires_at < $2
		LIMIT $5
		FOR UPDATE OF s SKIP LOCKED`,
		s.Now(), sandbox.ReasonOwnerExpired, sandbox.ActorJanitor, "owner lease lapsed", limit)
	if err != nil {
		return nil, wrap("end lapsed owners", err)
	}
	s.announce(ended...)
	return ended, nil
}

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

// RescueLapsedLeases clears the leases that expired without being renewed
// (their worker died or hung) and returns how many. Clearing a lease
// announces the sandbox, so executors claim it again at once; their claim
// bumps the epoch, fencing out the old worker for good.
func (s *Store) RescueLapsedLeases(ctx context.Context) (int64, error) {
	tag, err := s.work.Exec(ctx, `
		UPDATE sandboxes SET lease_owner = NULL
		WHERE lease_owner IS NOT NULL AND lease_expires_at < $1`, s.Now())
	if err != nil {
		return 0, wrap("rescue lapsed leases", err)
	}
	if tag.RowsAffected() > 0 && s.announcer != nil {
		s.announcer.Announce(sandbox.Change{}) // look again: work was freed
	}
	return tag.RowsAffected(), nil
}

// Record is what the registry knows of a sandbox, for reconciliation.
type Record struct {
	ID       string
	Tenant   string
	State    sandbox.State
	Released bool
	// EndedAt is when a terminal sandbox ended.
	EndedAt *time.Time
}

// Records returns the registry's records of the given sandbox ids; ids it
// has no record of are absent from the map.
func (s *Store) Records(ctx context.Context, ids []string) (map[string]Record, error) {
	out := make(map[string]Record, len(ids))
	const chunk = 5000
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		rows, err := s.pool.Query(ctx, `SELECT id, tenant, state, released, ended_at FROM sandboxes WHERE id = ANY($1)`, part)
		if err != nil {
			return nil, wrap("records", err)
		}
		for rows.Next() {
			var r Record
			if err := rows.Scan(&r.ID, &r.Tenant, &r.State, &r.Released, &r.EndedAt); err != nil {
				rows.Close()
				return nil, wrap("records", err)
			}
			out[r.ID] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, wrap("records", err)
		}
	}
	return out, nil
}

// ReadyBefore calls fn with the id of every sandbox of the provider that has
// been ready since before t, streaming rather than loading them all.
func (s *Store) ReadyBefore(ctx context.Context, provider string, t time.Time, fn func(id string)) error {
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM sandboxes WHERE provider = $1 AND state = 'ready' AND ready_at < $2`, provider, t)
	if err != nil {
		return wrap("ready before", err)
	}
	defer rows.Close()
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return wrap("ready before", err)
		}
		fn(id)
	}
	if err := rows.Err(); err != nil {
		return wrap("ready before", err)
	}
	return nil
}

// MarkLost ends a ready sandbox whose resource the provider no longer has:
// terminated with reason lost, and recorded as a reconciliation event. The
// release workers still confirm with the provider (destroy of nothing is
// success) before it counts as released.
func (s *Store) MarkLost(ctx context.Context, id, message string) (sandbox.Sandbox, bool, error) {
	now := s.Now()
	var ended []sandbox.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		ended, err = endMany(ctx, tx, `
			SELECT id, state, lease_owner FROM sandboxes WHERE id = $5 AND state = 'ready' FOR UPDATE`,
			now, sandbox.ReasonLost, sandbox.ActorJanitor, message, id)
		if err != nil || len(ended) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO reconcile_events (at, provider, sandbox_id, tenant, action, message)
			VALUES ($1, $2, $3, $4, 'lost', $5)`, now, ended[0].Provider, id, ended[0].Tenant, message)
		return err
	})
	if err != nil {
		return sandbox.Sandbox{}, false, wrap("mark lost", err)
	}
	if len(ended) == 0 {
		return sandbox.Sandbox{}, false, nil
	}
	s.announce(ended...)
	return ended[0], true, nil
}

// ReconcileEvent is one thing the janitor's reconciliation found and did.
type ReconcileEvent struct {
	ID        int64
	At        time.Time
	Provider  string
	SandboxID string
	Tenant    string
	Action    string
	Message   string
}

// RecordReconcile appends a reconciliation event. tenant is empty for a
// resource whose sandbox Tether has no record of.
func (s *Store) RecordReconcile(ctx context.Context, provider, sandboxID, tenant, action, message string) error {
	_, err := s.work.Exec(ctx, `
		INSERT INTO reconcile_events (at, provider, sandbox_id, tenant, action, message)
		VALUES ($1, $2, $3, $4, $5, $6)`, s.Now(), provider, sandboxID, nullable(tenant), action, message)
	if err != nil {
		return wrap("record reconcile", err)
	}
	return nil
}

// ReconcileEvents returns reconciliation events with ids above after, oldest
// first; tenant "" returns every tenant's and the unattributed ones.
func (s *Store) ReconcileEvents(ctx context.Context, tenant string, after int64, limit int) ([]ReconcileEvent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, provider, sandbox_id, coalesce(tenant, ''), action, message FROM reconcile_events
		WHERE ($1 = '' OR tenant = $1) AND id > $2 ORDER BY id LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, wrap("reconcile events", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReconcileEvent, error) {
		var e ReconcileEvent
		err := r.Scan(&e.ID, &e.At, &e.Provider, &e.SandboxID, &e.Tenant, &e.Action, &e.Message)
		return e, err
	})
	if err != nil {
		return nil, wrap("reconcile events", err)
	}
	return out, nil
}

// ForgetIdempotencyKeys deletes up to limit idempotency keys used before
// cutoff and returns how many: after that, the same key makes a new
// sandbox.
func (s *Store) ForgetIdempotencyKeys(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.work.Exec(ctx, `
		DELETE FROM idempotency_keys WHERE (tenant, key) IN (
			SELECT tenant, key FROM idempotency_keys WHERE created_at < $1 LIMIT $2)`, cutoff, limit)
	if err != nil {
		return 0, wrap("forget idempotency keys", err)
	}
	return tag.RowsAffected(), nil
}
