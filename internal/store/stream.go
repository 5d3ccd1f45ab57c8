package store

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// StreamStart returns the position of the stream's end now: what comes
// after it is every event of a transaction that has not finished yet, or
// starts later.
func (s *Store) StreamStart(ctx context.Context) (domain.StreamPosition, error) {
	var xmin string
	if err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		return domain.StreamPosition{}, wrap("stream start", err)
	}
	tx, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return domain.StreamPosition{}, wrap("stream start", err)
	}
	// Everything of transaction xmin and later: (xmin-1, max) precedes it.
	return domain.StreamPosition{Tx: tx - 1, ID: 1<<63 - 1}, nil
}

// StreamEvents returns up to limit of the tenant's events after pos, in
// stream order, from transactions that have all finished: every
// transaction older than the oldest one still running. No event can
// appear later before what it returns, so a reader that resumes from the
// last position it saw never misses one and never sees one twice.
func (s *Store) StreamEvents(ctx context.Context, tenant string, after domain.StreamPosition, limit int) ([]domain.StreamedEvent, error) {
	rows, err := query(ctx, s.pool, `SELECT `+eventColumns+eventKeyColumns+`, txid::text FROM sandbox_events
		WHERE tenant = @tenant AND (tenant, txid, id) > (@tenant, @after_tx::text::xid8, @after_id)
		  AND txid < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY tenant, txid, id LIMIT @limit`,
		namedArgs{"tenant": tenant, "after_tx": strconv.FormatUint(after.Tx, 10), "after_id": after.ID, "limit": limit})
	if err != nil {
		return nil, wrap("stream events", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.StreamedEvent, error) {
		var e domain.StreamedEvent
		var tx string
		if err := r.Scan(&e.ID, &e.SandboxID, &e.Tenant, &e.At, &e.From, &e.To, &e.Reason, &e.Actor, &e.Message,
			&e.Caller.KeyID, &e.Caller.KeyName, &tx); err != nil {
			return e, err
		}
		n, err := strconv.ParseUint(tx, 10, 64)
		e.Position = domain.StreamPosition{Tx: n, ID: e.ID}
		return e, err
	})
	if err != nil {
		return nil, wrap("stream events", err)
	}
	return out, nil
}
