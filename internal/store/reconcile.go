package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// Record is what the registry knows of a sandbox, for reconciliation.
type Record struct {
	ID       string
	Tenant   string
	State    domain.State
	Released bool
	// EndedAt is when a terminal sandbox ended.
	EndedAt *time.Time
	// Node is the node a host-bound sandbox was placed on, or "".
	Node string
}

// Records returns the registry's records of the given sandbox ids; ids it
// has no record of are absent from the map.
func (s *Store) Records(ctx context.Context, ids []string) (map[string]Record, error) {
	out := make(map[string]Record, len(ids))
	const chunk = 5000
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		rows, err := query(ctx, s.pool, `SELECT id, tenant, state, released, ended_at, COALESCE(node, '') FROM sandboxes WHERE id = ANY(@ids)`,
			namedArgs{"ids": part})
		if err != nil {
			return nil, wrap("records", err)
		}
		for rows.Next() {
			var r Record
			if err := rows.Scan(&r.ID, &r.Tenant, &r.State, &r.Released, &r.EndedAt, &r.Node); err != nil {
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
// been ready since before t and is ready or paused now (no call in flight), streaming rather than loading them all. A
// non-empty node limits it to the sandboxes placed on that node.
func (s *Store) ReadyBefore(ctx context.Context, provider, node string, t time.Time, fn func(id string)) error {
	rows, err := query(ctx, s.pool, `
		SELECT id FROM sandboxes WHERE provider = @provider AND state IN `+settledHeld+` AND ready_at < @before
		  AND (@node::text = '' OR node = @node)`, namedArgs{"provider": provider, "before": t, "node": node})
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

// MarkLost ends a ready or paused sandbox whose resource the provider no longer has:
// terminated with reason lost, and recorded as a reconciliation event. The
// release workers still confirm with the provider (destroy of nothing is
// success) before it counts as released.
func (s *Store) MarkLost(ctx context.Context, id, message string) (domain.Sandbox, bool, error) {
	return s.markLost(ctx, endLostSQL, message, namedArgs{"id": id})
}

// MarkStranded is MarkLost for a live sandbox past requested of a dead node
// (a creating one ends cancelled, reason lost): it ends the sandbox only if
// it is still placed on node and that node is still dead when the
// statement runs, so a node that beat again meanwhile keeps it. The node
// releases it when it comes back.
func (s *Store) MarkStranded(ctx context.Context, id, node, message string) (domain.Sandbox, bool, error) {
	return s.markLost(ctx, endStrandedSQL, message, namedArgs{"id": id, "node": node, "grace": s.nodeGrace})
}

// markLost ends with reason lost the sandbox that stmt, endLostSQL or
// endStrandedSQL, picks with the arguments pick.
func (s *Store) markLost(ctx context.Context, stmt, message string, pick namedArgs) (domain.Sandbox, bool, error) {
	now := s.Now()
	var ended []domain.Sandbox
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		ended, err = endMany(ctx, tx, stmt, end{now: now, reason: domain.ReasonLost, actor: domain.ActorJanitor, message: message}, pick)
		if err != nil || len(ended) == 0 {
			return err
		}
		_, err = exec(ctx, tx, `
			INSERT INTO reconcile_events (at, provider, sandbox_id, tenant, action, message)
			VALUES (@now, @provider, @id, @tenant, 'lost', @message)`,
			namedArgs{"now": now, "provider": ended[0].Provider, "id": ended[0].ID, "tenant": ended[0].Tenant, "message": message})
		return err
	})
	if err != nil {
		return domain.Sandbox{}, false, wrap("mark lost", err)
	}
	if len(ended) == 0 {
		return domain.Sandbox{}, false, nil
	}
	s.announce(ended...)
	return ended[0], true, nil
}

// ReconcileEvent is one thing the janitor's reconciliation found and did.
type ReconcileEvent = domain.ReconcileEvent

// RecordReconcile appends a reconciliation event. tenant is empty for a
// resource whose sandbox Tether has no record of.
func (s *Store) RecordReconcile(ctx context.Context, provider, sandboxID, tenant, action, message string) error {
	_, err := exec(ctx, s.work, `
		INSERT INTO reconcile_events (at, provider, sandbox_id, tenant, action, message)
		VALUES (@now, @provider, @id, @tenant, @action, @message)`,
		namedArgs{"now": s.Now(), "provider": provider, "id": sandboxID, "tenant": nullable(tenant), "action": action, "message": message})
	if err != nil {
		return wrap("record reconcile", err)
	}
	return nil
}

// ReconcileEvents returns reconciliation events with ids above after, oldest
// first; tenant "" returns every tenant's and the unattributed ones.
func (s *Store) ReconcileEvents(ctx context.Context, tenant string, after int64, limit int) ([]ReconcileEvent, error) {
	// The tenant's reads walk its (tenant, id) index, as its events do.
	stmt := `SELECT id, at, provider, sandbox_id, coalesce(tenant, ''), action, message FROM reconcile_events
		WHERE tenant = @tenant AND (tenant, id) > (@tenant, @after) ORDER BY tenant, id LIMIT @limit`
	if tenant == "" {
		stmt = `SELECT id, at, provider, sandbox_id, coalesce(tenant, ''), action, message FROM reconcile_events
		WHERE @tenant = '' AND id > @after ORDER BY id LIMIT @limit`
	}
	rows, err := query(ctx, s.pool, stmt, namedArgs{"tenant": tenant, "after": after, "limit": limit})
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
