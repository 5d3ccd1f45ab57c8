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

// PlanWebhookDeliveries records the next delivery of up to limit active
// endpoints that have none pending and have events (state changes or
// releases: the sandbox_outbox view) past their cursor, and
// returns how many it recorded. A delivery holds up to batch of the
// endpoint's matching events, in stream order; the events are read the
// way StreamEvents reads them (only transactions older than the oldest
// one still running), so none that commits later can fall behind a
// cursor. Events the filter refuses are skipped (up to scan of them a
// call): an endpoint whose filter matched none moves its cursor without a
// delivery. Replicas plan different endpoints (SKIP LOCKED), and an
// endpoint holds at most one pending delivery (a unique index), which
// keeps its deliveries in order. The commit is durable, so the events
// the delivery names are durable before it is sent.
func (s *Store) PlanWebhookDeliveries(ctx context.Context, limit, batch, scan int) (int, error) {
	planned := 0
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := query(ctx, tx, `SELECT `+webhookColumns+` FROM webhooks w
			WHERE state = 'active'
			  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending')
			  AND EXISTS (SELECT 1 FROM sandbox_outbox e
				WHERE e.tenant = w.tenant AND (e.tenant, e.txid, e.id) > (w.tenant, w.cursor_tx, w.cursor_id)
				  AND e.txid < pg_snapshot_xmin(pg_current_snapshot()))
			ORDER BY id LIMIT @limit FOR UPDATE SKIP LOCKED`, namedArgs{"limit": limit})
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhook.Endpoint, error) { return scanWebhook(r) })
		if err != nil {
			return err
		}
		for _, w := range due {
			ok, err := s.planOne(ctx, tx, w, batch, scan)
			if err != nil {
				return err
			}
			if ok {
				planned++
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrap("plan webhook deliveries", err)
	}
	return planned, nil
}

// planOne cuts endpoint w's next delivery (or, when no event matched, only
// moves its cursor) and reports whether it recorded a delivery.
func (s *Store) planOne(ctx context.Context, tx pgx.Tx, w webhook.Endpoint, batch, scan int) (bool, error) {
	rows, err := query(ctx, tx, `SELECT id, txid::text, to_state, coalesce(reason, ''), type FROM sandbox_outbox e
		WHERE e.tenant = @tenant AND (e.tenant, e.txid, e.id) > (@tenant, @cursor_tx::text::xid8, @cursor_id)
		  AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY e.tenant, e.txid, e.id LIMIT @limit`,
		namedArgs{"tenant": w.Tenant, "cursor_tx": strconv.FormatUint(w.Cursor.Tx, 10), "cursor_id": w.Cursor.ID, "limit": scan})
	if err != nil {
		return false, err
	}
	var ids []int64
	last := w.Cursor
	for rows.Next() {
		var e domain.Event
		var txid string
		if err := rows.Scan(&e.ID, &txid, &e.To, &e.Reason, &e.Type); err != nil {
			rows.Close()
			return false, err
		}
		n, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			rows.Close()
			return false, err
		}
		if len(ids) == batch {
			break // the batch is full: it ends at its last event
		}
		last = domain.StreamPosition{Tx: n, ID: e.ID}
		if w.Filter.Match(e) {
			ids = append(ids, e.ID)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if len(ids) == 0 {
		_, err := exec(ctx, tx, `UPDATE webhooks SET cursor_tx = @cursor_tx::text::xid8, cursor_id = @cursor_id WHERE id = @id`,
			namedArgs{"id": w.ID, "cursor_tx": strconv.FormatUint(last.Tx, 10), "cursor_id": last.ID})
		return false, err
	}
	now := s.Now()
	_, err = exec(ctx, tx, `INSERT INTO webhook_deliveries (id, webhook_id, tenant, status, event_ids,
			after_tx, after_id, last_tx, last_id, created_at, next_attempt_at)
		VALUES (@id, @webhook, @tenant, 'pending', @event_ids, @after_tx::text::xid8, @after_id, @last_tx::text::xid8, @last_id, @now, @now)`,
		namedArgs{"id": webhook.NewDeliveryID(), "webhook": w.ID, "tenant": w.Tenant, "event_ids": ids, "now": now},
		namedArgs{
			"after_tx": strconv.FormatUint(w.Cursor.Tx, 10), "after_id": w.Cursor.ID,
			"last_tx": strconv.FormatUint(last.Tx, 10), "last_id": last.ID,
		})
	return err == nil, err
}

// DeliveryClaim is a delivery claimed for sending, with what sending it
// takes.
type DeliveryClaim struct {
	webhook.Delivery
	URL    string
	Secret string
	// Events are the delivery's events, in its order.
	Events []domain.Event
}

// ClaimLimits bounds a claim of webhook deliveries, so that each tenant
// gets a share of a worker's slots: one tenant's slow receivers hold at
// most PerTenant of them, and the others' deliveries go out beside them.
type ClaimLimits struct {
	// Max is the most deliveries claimed (the worker's free slots).
	Max int
	// PerTenant is the most deliveries of one tenant the worker may hold
	// at once, those in Held included; 0 bounds none.
	PerTenant int
	// Held is how many deliveries of each tenant the worker holds now.
	Held map[string]int
}

// claimScan bounds the due deliveries a claim weighs, per delivery it may
// claim: room for those of tenants that have more due than their share,
// and for those another replica's claim locks meanwhile.
const claimScan = 8

// claimWebhookDeliveriesSQL picks due deliveries no live lease holds, in
// turns across tenants (each tenant's oldest first, counted after what the
// worker holds of it; a tenant at its share is left out), and leases them.
// The rows are locked in that order, skipping those another claim holds
// (which go to it), so concurrent claims take different deliveries and
// none waits.
const claimWebhookDeliveriesSQL = `
	WITH due AS (
		SELECT seq, tenant, next_attempt_at FROM webhook_deliveries
		WHERE status = 'pending' AND next_attempt_at <= @now AND (lease_expires_at IS NULL OR lease_expires_at < @now)
		  AND NOT (tenant = ANY(@full::text[]))
		ORDER BY next_attempt_at LIMIT @scan
	), ranked AS (
		SELECT due.seq, due.next_attempt_at,
			row_number() OVER (PARTITION BY due.tenant ORDER BY due.next_attempt_at, due.seq) + coalesce(h.held, 0) AS turn
		FROM due LEFT JOIN unnest(@tenants::text[], @held::int[]) AS h(tenant, held) ON h.tenant = due.tenant
	), picked AS (
		SELECT d.seq FROM webhook_deliveries d JOIN ranked r ON r.seq = d.seq
		WHERE (@per_tenant::int = 0 OR r.turn <= @per_tenant::int)
		  AND d.status = 'pending' AND (d.lease_expires_at IS NULL OR d.lease_expires_at < @now)
		ORDER BY r.turn, r.next_attempt_at LIMIT @max
		FOR UPDATE OF d SKIP LOCKED
	), upd AS (
		UPDATE webhook_deliveries d SET attempts = d.attempts + 1, lease_owner = @worker, lease_expires_at = @until, last_attempt_at = @now
		FROM picked WHERE d.seq = picked.seq
		RETURNING d.*
	)
	SELECT ` + deliveryColumns + `,
		(SELECT w.url FROM webhooks w WHERE w.id = upd.webhook_id),
		(SELECT w.secret FROM webhooks w WHERE w.id = upd.webhook_id)
	FROM upd`

// ClaimWebhookDeliveries claims pending deliveries that are due and that no
// live lease holds, within limits (see ClaimLimits), for worker, until
// now+lease, counting an attempt for each; rows other replicas hold are
// skipped, so no two send one delivery at once. A claim whose lease lapses
// (its worker died) is claimed again. An endpoint has at most one pending
// delivery, so at most one of its deliveries is ever in flight.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, worker string, limits ClaimLimits, lease time.Duration) ([]DeliveryClaim, error) {
	if limits.Max <= 0 {
		return nil, nil
	}
	now := s.Now()
	full, tenants, held := []string{}, []string{}, []int32{}
	for tenant, n := range limits.Held {
		tenants, held = append(tenants, tenant), append(held, int32(min(n, 1<<30)))
		if limits.PerTenant > 0 && n >= limits.PerTenant {
			full = append(full, tenant)
		}
	}
	rows, err := query(ctx, s.work, claimWebhookDeliveriesSQL, namedArgs{
		"now": now, "until": now.Add(lease), "worker": worker, "max": limits.Max, "scan": claimScan * limits.Max,
		"per_tenant": limits.PerTenant, "full": full, "tenants": tenants, "held": held,
	})
	if err != nil {
		return nil, wrap("claim webhook deliveries", err)
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryClaim, error) {
		var c DeliveryClaim
		var err error
		c.Delivery, err = scanDelivery(r, &c.URL, &c.Secret)
		return c, err
	})
	if err != nil {
		return nil, wrap("claim webhook deliveries", err)
	}
	for i := range claims {
		if claims[i].Events, err = s.eventsByID(ctx, claims[i].EventIDs); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// eventsByID returns the events (state changes and releases) with the
// given ids, in that order.
func (s *Store) eventsByID(ctx context.Context, ids []int64) ([]domain.Event, error) {
	rows, err := query(ctx, s.pool, `SELECT `+eventColumns+eventKeyColumns+`, type
		FROM unnest(@ids::bigint[]) WITH ORDINALITY AS u(want, n) JOIN sandbox_outbox ON id = want ORDER BY n`, namedArgs{"ids": ids})
	if err != nil {
		return nil, wrap("delivery events", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Event, error) {
		var e domain.Event
		err := r.Scan(&e.ID, &e.SandboxID, &e.Tenant, &e.At, &e.From, &e.To, &e.Reason, &e.Actor, &e.Message,
			&e.Caller.KeyID, &e.Caller.KeyName, &e.Type)
		return e, err
	})
	if err != nil {
		return nil, wrap("delivery events", err)
	}
	if len(events) != len(ids) {
		return nil, errors.New("store: delivery events: an event of the delivery is missing")
	}
	return events, nil
}

// Attempt is the outcome of sending a claimed delivery.
type Attempt struct {
	Seq     int64
	Attempt int
	Worker  string
	// Delivered: the receiver answered 2xx.
	Delivered bool
	// Status is the receiver's HTTP status (0: no answer); Error says what
	// went wrong.
	Status int
	Error  string
	// Retry is when to try again; GiveUp ends the delivery failed and marks
	// the endpoint failing instead.
	Retry  time.Time
	GiveUp bool
}

// RecordWebhookAttempt records an attempt of a delivery, fenced on the
// claim (the attempt, the worker, still pending): a delivered one moves the
// endpoint's cursor to the end of its batch in the same statement; a
// failed one is due again at Retry, or with GiveUp ends failed and makes
// the endpoint failing. It reports whether the claim still held (a replay
// or a delete since makes it not, and changes nothing).
func (s *Store) RecordWebhookAttempt(ctx context.Context, a Attempt) (bool, error) {
	now := s.Now()
	status := "pending"
	var next *time.Time
	switch {
	case a.Delivered:
		status = "delivered"
	case a.GiveUp:
		status = "failed"
	default:
		next = &a.Retry
	}
	var errText *string
	if a.Error != "" {
		errText = &a.Error
	}
	var respStatus *int
	if a.Status != 0 {
		respStatus = &a.Status
	}
	var n int
	err := queryRow(ctx, s.work, `
		WITH d AS (
			UPDATE webhook_deliveries SET status = @status, next_attempt_at = @next, lease_owner = NULL, lease_expires_at = NULL,
				response_status = @response_status, error = @error, delivered_at = CASE WHEN @status = 'delivered' THEN @now::timestamptz END
			WHERE seq = @seq AND attempts = @attempt AND lease_owner = @worker AND status = 'pending'
			RETURNING webhook_id, last_tx, last_id
		), w AS (
			UPDATE webhooks w SET
				cursor_tx = CASE WHEN @status = 'delivered' THEN d.last_tx ELSE w.cursor_tx END,
				cursor_id = CASE WHEN @status = 'delivered' THEN d.last_id ELSE w.cursor_id END,
				state = CASE WHEN @status = 'failed' THEN 'failing' ELSE w.state END,
				failing_since = CASE WHEN @status = 'failed' THEN @now::timestamptz ELSE w.failing_since END
			FROM d WHERE w.id = d.webhook_id AND @status <> 'pending'
		)
		SELECT count(*) FROM d`, namedArgs{
		"seq": a.Seq, "attempt": a.Attempt, "worker": a.Worker, "status": status, "next": next,
		"response_status": respStatus, "error": errText, "now": now,
	}).Scan(&n)
	if err != nil {
		return false, wrap("record webhook attempt", err)
	}
	return n == 1, nil
}
