-- +goose Up
-- API keys become a resource: an id and a name to show and audit them by,
-- when each was last used (written at most about once a minute per key),
-- and revocation. A revoked key stays listed, and stays refused.
ALTER TABLE api_keys
    ADD COLUMN id           text,
    ADD COLUMN name         text NOT NULL DEFAULT '',
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN revoked_at   timestamptz;
-- Keys made before this migration get an id derived from their hash.
UPDATE api_keys SET id = 'key_' || encode(substr(key_hash, 1, 10), 'hex') WHERE id IS NULL;
ALTER TABLE api_keys ALTER COLUMN id SET NOT NULL, ADD CONSTRAINT api_keys_id_key UNIQUE (id);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at, id);

-- Who did it: the API key behind a client's transition. NULL for the
-- executor's and the janitor's events, and for events older than this.
ALTER TABLE sandbox_events
    ADD COLUMN actor_key_id   text,
    ADD COLUMN actor_key_name text;

-- What clients did inside sandboxes: one row per exec and per file or
-- archive transfer, written after the operation. Append-only.
CREATE TABLE sandbox_activity (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sandbox_id  text NOT NULL REFERENCES sandboxes (id),
    tenant      text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    key_id      text,
    key_name    text,
    kind        text NOT NULL CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write')),
    -- The command (truncated) for exec; the path for the others.
    target      text NOT NULL DEFAULT '',
    exit_code   integer,
    bytes       bigint,
    duration_ms bigint NOT NULL DEFAULT 0,
    timed_out   boolean NOT NULL DEFAULT false,
    error       text
);
CREATE INDEX sandbox_activity_sandbox ON sandbox_activity (sandbox_id, id);

-- +goose StatementBegin
CREATE FUNCTION sandbox_activity_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sandbox_activity is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER sandbox_activity_append_only BEFORE UPDATE OR DELETE ON sandbox_activity
    FOR EACH STATEMENT EXECUTE FUNCTION sandbox_activity_append_only();

-- +goose Down
DROP TABLE sandbox_activity;
DROP FUNCTION sandbox_activity_append_only();
ALTER TABLE sandbox_events DROP COLUMN actor_key_name, DROP COLUMN actor_key_id;
DROP INDEX api_keys_tenant;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_id_key,
    DROP COLUMN revoked_at, DROP COLUMN last_used_at, DROP COLUMN name, DROP COLUMN id;
