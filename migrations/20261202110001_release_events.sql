-- +goose Up
-- Releases (a terminal sandbox's provider resources confirmed gone: its
-- released flag turning true) as events of the stream webhooks read. They
-- are kept apart from sandbox_events, whose rows are the sandbox's state
-- history (GET /v1/sandboxes/{id}/events and GET /v1/events list those,
-- and stay as they were), and merged with it by the outbox in stream order
-- (txid, id). The id comes from sandbox_events' sequence, so an event id
-- names one event of either kind (a delivery's event_ids, a replay's
-- from_event_id).
--
-- A trigger writes the row in the transaction of the update that sets
-- released, whichever statement does it (the release worker's
-- MarkReleased, or the end of a sandbox never claimed, released at its
-- cancel). An AFTER ROW trigger fires when its statement has finished, so
-- the end's event of that same statement is written first; and the txid
-- is at least the sandbox's last event's, as sandbox_events_keep_order
-- does for events, so a release comes after its sandbox's terminal event
-- in the stream. No event follows a release: events are written only for
-- live sandboxes, and a sandbox is released only once terminal.
CREATE TABLE sandbox_releases (
    id         bigint PRIMARY KEY,
    sandbox_id text NOT NULL UNIQUE REFERENCES sandboxes (id),
    tenant     text NOT NULL,
    at         timestamptz NOT NULL,
    -- The terminal state and the end's reason the sandbox was released in
    -- (filters match them as they match an event's to-state and reason).
    state      text NOT NULL,
    reason     text,
    actor      text NOT NULL,
    txid       xid8 NOT NULL
);
CREATE INDEX sandbox_releases_tenant_txid ON sandbox_releases (tenant, txid, id);

-- +goose StatementBegin
CREATE FUNCTION sandbox_releases_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	last_tx xid8;
	last_actor text;
BEGIN
	SELECT e.txid, e.actor INTO last_tx, last_actor FROM sandbox_events e
		WHERE e.sandbox_id = NEW.id ORDER BY e.id DESC LIMIT 1;
	INSERT INTO sandbox_releases (id, sandbox_id, tenant, at, state, reason, actor, txid)
	VALUES (nextval(pg_get_serial_sequence('sandbox_events', 'id')), NEW.id, NEW.tenant,
		coalesce(NEW.released_at, now()), NEW.state, NEW.reason,
		-- Released by its end (never claimed): whoever ended it; else the
		-- release worker.
		CASE WHEN OLD.state = 'requested' THEN coalesce(last_actor, 'executor') ELSE 'executor' END,
		greatest(pg_current_xact_id(), last_tx));
	RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sandbox_releases_record AFTER UPDATE OF released ON sandboxes
	FOR EACH ROW WHEN (NEW.released AND NOT OLD.released)
	EXECUTE FUNCTION sandbox_releases_record();

-- +goose StatementBegin
CREATE FUNCTION sandbox_releases_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'sandbox_releases is append-only';
END
$$;
-- +goose StatementEnd
CREATE TRIGGER sandbox_releases_append_only BEFORE UPDATE OR DELETE ON sandbox_releases
	FOR EACH STATEMENT EXECUTE FUNCTION sandbox_releases_append_only();

-- The outbox reads both kinds in one order: the state changes and the
-- releases.
CREATE VIEW sandbox_outbox AS
	SELECT id, 'sandbox.state_changed' AS type, sandbox_id, tenant, at, from_state, to_state, reason, actor, message,
		actor_key_id, actor_key_name, txid
	FROM sandbox_events
	UNION ALL
	SELECT id, 'sandbox.released', sandbox_id, tenant, at, state, state, reason, actor, 'released',
		NULL, NULL, txid
	FROM sandbox_releases;

-- An endpoint's filter of event types (empty: every type). Endpoints made
-- before releases were events keep getting what they got: state changes.
ALTER TABLE webhooks ADD COLUMN filter_types text[] NOT NULL DEFAULT '{}';
UPDATE webhooks SET filter_types = '{sandbox.state_changed}';

-- +goose Down
ALTER TABLE webhooks DROP COLUMN filter_types;
DROP VIEW sandbox_outbox;
DROP TRIGGER sandbox_releases_record ON sandboxes;
DROP TABLE sandbox_releases;
DROP FUNCTION sandbox_releases_append_only();
DROP FUNCTION sandbox_releases_record();
