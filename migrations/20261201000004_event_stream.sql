-- +goose Up
-- The transaction that wrote each event. Ids are handed out when a row is
-- inserted, but rows become visible when their transaction commits, so a
-- reader that follows ids can miss an event that commits late. Ordered by
-- (txid, id) and cut at the oldest transaction still running, the stream
-- only ever adds events past what it has shown (GET /v1/events/stream).
ALTER TABLE sandbox_events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX sandbox_events_tenant_txid ON sandbox_events (tenant, txid, id);

-- +goose Down
DROP INDEX sandbox_events_tenant_txid;
ALTER TABLE sandbox_events DROP COLUMN txid;
