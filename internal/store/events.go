package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

const eventColumns = `id, sandbox_id, tenant, at, coalesce(from_state, ''), to_state, coalesce(reason, ''), actor, message`

// eventKeyColumns follow eventColumns in reads that show who caused each
// event (scanned into Event.Caller).
const eventKeyColumns = `, coalesce(actor_key_id, ''), coalesce(actor_key_name, '')`

// SandboxEvents returns the sandbox's history oldest first: at most limit
// events with ids above after. The caller checks the sandbox belongs to the
// tenant first.
func (s *Store) SandboxEvents(ctx context.Context, sandboxID string, after int64, limit int) ([]domain.Event, error) {
	rows, err := query(ctx, s.pool, `SELECT `+eventColumns+eventKeyColumns+` FROM sandbox_events
		WHERE sandbox_id = @sandbox_id AND (sandbox_id, id) > (@sandbox_id, @after) ORDER BY sandbox_id, id LIMIT @limit`,
		namedArgs{"sandbox_id": sandboxID, "after": after, "limit": limit})
	if err != nil {
		return nil, wrap("sandbox events", err)
	}
	return collectEvents(rows, "sandbox events")
}

// TenantEvents returns the tenant's events across all its sandboxes, oldest
// first: at most limit events with ids above after. (The row comparison
// on (tenant, id) keeps the planner on the (tenant, id) index: walking the
// primary key and filtering by tenant looks cheap on average and is slow
// exactly when other tenants' events come first.)
func (s *Store) TenantEvents(ctx context.Context, tenant string, after int64, limit int) ([]domain.Event, error) {
	rows, err := query(ctx, s.pool, `SELECT `+eventColumns+eventKeyColumns+` FROM sandbox_events
		WHERE tenant = @tenant AND (tenant, id) > (@tenant, @after) ORDER BY tenant, id LIMIT @limit`,
		namedArgs{"tenant": tenant, "after": after, "limit": limit})
	if err != nil {
		return nil, wrap("tenant events", err)
	}
	return collectEvents(rows, "tenant events")
}

func collectEvents(rows pgx.Rows, op string) ([]domain.Event, error) {
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Event, error) {
		var e domain.Event
		err := r.Scan(&e.ID, &e.SandboxID, &e.Tenant, &e.At, &e.From, &e.To, &e.Reason, &e.Actor, &e.Message, &e.Caller.KeyID, &e.Caller.KeyName)
		return e, err
	})
	if err != nil {
		return nil, wrap(op, err)
	}
	return events, nil
}

// TenantReleases returns the releases of the tenant's sandboxes (events of
// type sandbox.released, delivered by webhooks but not part of the state
// history), oldest first: at most limit with ids above after.
func (s *Store) TenantReleases(ctx context.Context, tenant string, after int64, limit int) ([]domain.Event, error) {
	rows, err := query(ctx, s.pool, `SELECT `+eventColumns+eventKeyColumns+` FROM sandbox_outbox
		WHERE tenant = @tenant AND type = @type AND id > @after ORDER BY id LIMIT @limit`,
		namedArgs{"tenant": tenant, "type": string(domain.EventReleased), "after": after, "limit": limit})
	if err != nil {
		return nil, wrap("tenant releases", err)
	}
	events, err := collectEvents(rows, "tenant releases")
	for i := range events {
		events[i].Type = domain.EventReleased
	}
	return events, err
}
