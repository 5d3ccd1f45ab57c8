package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/webhook"
)

// Webhook endpoints and their deliveries. The outbox is the event history
// and the releases (the sandbox_outbox view: sandbox_events and
// sandbox_releases, ids from one sequence): an endpoint's cursor is a
// position in its tenant's stream of both (ordered as StreamEvents orders
// events), and PlanWebhookDeliveries cuts the events after it into
// deliveries, recorded before they are sent. Nothing here runs on the
// create or delete path.

const webhookColumns = `id, tenant, url, description, filter_states, filter_reasons, filter_types, state, cursor_tx::text, cursor_id,
	created_at, coalesce(created_by_key_id, ''), failing_since`

func scanWebhook(row pgx.Row) (webhook.Endpoint, error) {
	var w webhook.Endpoint
	var states, reasons, types []string
	var tx string
	err := row.Scan(&w.ID, &w.Tenant, &w.URL, &w.Description, &states, &reasons, &types, &w.State, &tx, &w.Cursor.ID,
		&w.CreatedAt, &w.CreatedBy, &w.FailingSince)
	if err != nil {
		return w, err
	}
	for _, s := range states {
		w.Filter.States = append(w.Filter.States, domain.State(s))
	}
	for _, r := range reasons {
		w.Filter.Reasons = append(w.Filter.Reasons, domain.Reason(r))
	}
	for _, t := range types {
		w.Filter.Types = append(w.Filter.Types, domain.EventType(t))
	}
	w.Cursor.Tx, err = strconv.ParseUint(tx, 10, 64)
	return w, err
}

func filterArrays(f webhook.Filter) (states, reasons, types []string) {
	states, reasons, types = []string{}, []string{}, []string{}
	for _, s := range f.States {
		states = append(states, string(s))
	}
	for _, r := range f.Reasons {
		reasons = append(reasons, string(r))
	}
	for _, t := range f.Types {
		types = append(types, string(t))
	}
	return states, reasons, types
}

// CreateWebhook records a new endpoint whose cursor is the stream's end now
// (it gets the events that commit from now on), with a new random secret,
// and returns it with the secret. The asking key must be live and have
// manage_keys (else UNAUTHENTICATED or FORBIDDEN), and the tenant under
// its cap of endpoints (else QUOTA_EXCEEDED).
func (s *Store) CreateWebhook(ctx context.Context, ne webhook.NewEndpoint) (webhook.Endpoint, string, error) {
	secret := webhook.NewSecret()
	states, reasons, types := filterArrays(ne.Filter)
	var w webhook.Endpoint
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if err := mayManage(ctx, tx, ne.Tenant, ne.By, "create webhooks"); err != nil {
			return err
		}
		// One create at a time per tenant, so that the cap holds.
		if _, err := exec(ctx, tx, lockTenantSQL, namedArgs{"tenant": ne.Tenant}); err != nil {
			return err
		}
		if ne.Max > 0 {
			var n int
			if err := queryRow(ctx, tx, `SELECT count(*) FROM webhooks WHERE tenant = @tenant`, namedArgs{"tenant": ne.Tenant}).Scan(&n); err != nil {
				return err
			}
			if n >= ne.Max {
				return domain.Errorf(domain.CodeQuotaExceeded, "tenant %s has %d webhook endpoints, its limit; delete one first", ne.Tenant, n)
			}
		}
		var err error
		// The stream's end: everything of the oldest transaction still
		// running and later comes after (xmin-1, max).
		w, err = scanWebhook(queryRow(ctx, tx, `
			INSERT INTO webhooks (id, tenant, url, description, secret, filter_states, filter_reasons, filter_types,
				cursor_tx, cursor_id, created_at, created_by_key_id)
			VALUES (@id, @tenant, @url, @description, @secret, @states, @reasons, @types,
				(pg_snapshot_xmin(pg_current_snapshot())::text::numeric - 1)::text::xid8, 9223372036854775807, @now, @by)
			RETURNING `+webhookColumns, namedArgs{
			"id": webhook.NewEndpointID(), "tenant": ne.Tenant, "url": ne.URL, "description": ne.Description,
			"secret": secret, "now": s.Now(), "by": ne.By,
		}, namedArgs{"states": states, "reasons": reasons, "types": types}))
		return err
	})
	if err != nil {
		return webhook.Endpoint{}, "", coded("create webhook", err)
	}
	return w, secret, nil
}

// Webhooks returns the tenant's endpoints, oldest first.
func (s *Store) Webhooks(ctx context.Context, tenant string) ([]webhook.Endpoint, error) {
	rows, err := query(ctx, s.pool, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant = @tenant ORDER BY created_at, id`,
		namedArgs{"tenant": tenant})
	if err != nil {
		return nil, wrap("webhooks", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhook.Endpoint, error) { return scanWebhook(r) })
	if err != nil {
		return nil, wrap("webhooks", err)
	}
	return out, nil
}

// Webhook returns the tenant's endpoint id, or ErrNotFound.
func (s *Store) Webhook(ctx context.Context, tenant, id string) (webhook.Endpoint, error) {
	w, err := scanWebhook(queryRow(ctx, s.pool, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant = @tenant AND id = @id`,
		namedArgs{"tenant": tenant, "id": id}))
	if err != nil {
		return w, wrap("webhook", err)
	}
	return w, nil
}

// DeleteWebhook deletes the tenant's endpoint and its deliveries, as the
// key by asks (it must have manage_keys), and returns it. A delivery being
// sent meanwhile records nothing.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id, by string) (webhook.Endpoint, error) {
	var w webhook.Endpoint
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if err := mayManage(ctx, tx, tenant, by, "delete webhooks"); err != nil {
			return err
		}
		var err error
		w, err = scanWebhook(queryRow(ctx, tx, `DELETE FROM webhooks WHERE tenant = @tenant AND id = @id RETURNING `+webhookColumns,
			namedArgs{"tenant": tenant, "id": id}))
		return err
	})
	if err != nil {
		return w, coded("delete webhook", err)
	}
	return w, nil
}

// ReplayWebhook re-enables the tenant's endpoint (active again) and moves
// its cursor to where from says, cancelling its pending delivery: the
// events from there are delivered again, under new delivery ids. The
// asking key must have manage_keys. An event or delivery that is not the
// tenant's (or the endpoint's) is INVALID_REQUEST.
func (s *Store) ReplayWebhook(ctx context.Context, tenant, id, by string, from webhook.ReplayFrom) (webhook.Endpoint, error) {
	var w webhook.Endpoint
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		if err := mayManage(ctx, tx, tenant, by, "replay webhooks"); err != nil {
			return err
		}
		var err error
		if w, err = scanWebhook(queryRow(ctx, tx, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant = @tenant AND id = @id FOR UPDATE`,
			namedArgs{"tenant": tenant, "id": id})); err != nil {
			return err
		}
		cursor, err := replayCursor(ctx, tx, w, from)
		if err != nil {
			return err
		}
		if _, err := exec(ctx, tx, `UPDATE webhook_deliveries SET status = 'cancelled', next_attempt_at = NULL,
			lease_owner = NULL, lease_expires_at = NULL, error = 'cancelled by a replay'
			WHERE webhook_id = @id AND status = 'pending'`, namedArgs{"id": id}); err != nil {
			return err
		}
		w, err = scanWebhook(queryRow(ctx, tx, `UPDATE webhooks SET state = 'active', failing_since = NULL,
			cursor_tx = @cursor_tx::text::xid8, cursor_id = @cursor_id WHERE id = @id RETURNING `+webhookColumns,
			namedArgs{"id": id, "cursor_tx": strconv.FormatUint(cursor.Tx, 10), "cursor_id": cursor.ID}))
		return err
	})
	if err != nil {
		return w, coded("replay webhook", err)
	}
	return w, nil
}

// replayCursor is the position a replay of w from from starts after.
func replayCursor(ctx context.Context, tx pgx.Tx, w webhook.Endpoint, from webhook.ReplayFrom) (domain.StreamPosition, error) {
	var txid string
	var id int64
	var err error
	switch {
	case from.EventID > 0:
		id = from.EventID
		err = queryRow(ctx, tx, `SELECT txid::text FROM sandbox_outbox WHERE tenant = @tenant AND id = @id`,
			namedArgs{"tenant": w.Tenant, "id": id}).Scan(&txid)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.StreamPosition{}, domain.Errorf(domain.CodeInvalidRequest, "the tenant has no event %d", id)
		}
		id-- // from the event itself: after its predecessor in its transaction
	case from.DeliveryID != "":
		err = queryRow(ctx, tx, `SELECT after_tx::text, after_id FROM webhook_deliveries WHERE webhook_id = @webhook AND id = @id`,
			namedArgs{"webhook": w.ID, "id": from.DeliveryID}).Scan(&txid, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.StreamPosition{}, domain.Errorf(domain.CodeInvalidRequest, "webhook %s has no delivery %s", w.ID, from.DeliveryID)
		}
	default:
		return w.Cursor, nil
	}
	if err != nil {
		return domain.StreamPosition{}, err
	}
	n, err := strconv.ParseUint(txid, 10, 64)
	return domain.StreamPosition{Tx: n, ID: id}, err
}

const deliveryColumns = `seq, id, webhook_id, tenant, status, event_ids, after_tx::text, after_id, last_tx::text, last_id,
	attempts, created_at, next_attempt_at, last_attempt_at, delivered_at, coalesce(response_status, 0), coalesce(error, '')`

func scanDelivery(row pgx.Row, extra ...any) (webhook.Delivery, error) {
	var d webhook.Delivery
	var afterTx, lastTx string
	dest := append([]any{&d.Seq, &d.ID, &d.EndpointID, &d.Tenant, &d.Status, &d.EventIDs, &afterTx, &d.After.ID, &lastTx, &d.Last.ID,
		&d.Attempts, &d.CreatedAt, &d.NextAttemptAt, &d.LastAttemptAt, &d.DeliveredAt, &d.ResponseStatus, &d.Error}, extra...)
	if err := row.Scan(dest...); err != nil {
		return d, err
	}
	var err1, err2 error
	d.After.Tx, err1 = strconv.ParseUint(afterTx, 10, 64)
	d.Last.Tx, err2 = strconv.ParseUint(lastTx, 10, 64)
	return d, errors.Join(err1, err2)
}

// WebhookDeliveries returns the endpoint's deliveries newest first: at most
// limit of those before the one with sequence number before (0: from the
// newest). The caller checks the endpoint is the tenant's first.
func (s *Store) WebhookDeliveries(ctx context.Context, webhookID string, before int64, limit int) ([]webhook.Delivery, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := query(ctx, s.pool, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE webhook_id = @webhook AND seq < @before ORDER BY webhook_id, seq DESC LIMIT @limit`,
		namedArgs{"webhook": webhookID, "before": before, "limit": limit})
	if err != nil {
		return nil, wrap("webhook deliveries", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhook.Delivery, error) { return scanDelivery(r) })
	if err != nil {
		return nil, wrap("webhook deliveries", err)
	}
	return out, nil
}

// WebhookStats counts the endpoints that are failing and the deliveries
// pending, with the creation time of the oldest of those, for metrics.
func (s *Store) WebhookStats(ctx context.Context) (failing, pending int64, oldest *time.Time, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhooks WHERE state = 'failing'),
		count(*), min(created_at) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&failing, &pending, &oldest)
	if err != nil {
		return 0, 0, nil, wrap("webhook stats", err)
	}
	return failing, pending, oldest, nil
}
