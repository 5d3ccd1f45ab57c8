-- +goose Up
-- Changes are announced by Tether after each commit (see store.Notifier),
-- not by triggers: a transaction that NOTIFYs holds a database-wide lock
-- through its commit, which queued every durable commit behind the one
-- before it.
DROP TRIGGER sandboxes_notify_update ON sandboxes;
DROP TRIGGER sandboxes_notify_insert ON sandboxes;
DROP FUNCTION sandboxes_notify();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION sandboxes_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tether_sandbox', NEW.id || ' ' || NEW.state || ' ' || NEW.released::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER sandboxes_notify_insert AFTER INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_notify();
CREATE TRIGGER sandboxes_notify_update AFTER UPDATE OF state, released, lease_expires_at ON sandboxes
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.released IS DISTINCT FROM NEW.released
                       OR (NEW.lease_owner IS NULL AND OLD.lease_owner IS NOT NULL))
    EXECUTE FUNCTION sandboxes_notify();
