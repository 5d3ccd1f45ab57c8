-- +goose Up
-- Preview URLs: a token that reaches one port of one sandbox without an
-- API key, until it expires, is revoked or the sandbox ends. Only the
-- token's SHA-256 is kept.
CREATE TABLE sandbox_previews (
    id          text PRIMARY KEY,
    sandbox_id  text NOT NULL REFERENCES sandboxes (id),
    tenant      text NOT NULL,
    port        integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    token_hash  bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    -- The API key that made it.
    key_id      text,
    key_name    text
);
CREATE INDEX sandbox_previews_sandbox ON sandbox_previews (sandbox_id, created_at, id);

-- Traffic through a sandbox's ports (the API's proxy, kind port, and
-- preview URLs, kind preview) is recorded in the sandbox's activity: one
-- row per HTTP request or WebSocket connection, with its port, HTTP
-- status and, for a preview, which one.
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview'));
ALTER TABLE sandbox_activity
    ADD COLUMN port        integer,
    ADD COLUMN http_status integer,
    ADD COLUMN preview_id  text;

-- +goose Down
ALTER TABLE sandbox_activity DROP COLUMN preview_id, DROP COLUMN http_status, DROP COLUMN port;
-- The Down of an append-only table: the port traffic records go with
-- the kinds they use.
ALTER TABLE sandbox_activity DISABLE TRIGGER sandbox_activity_append_only;
DELETE FROM sandbox_activity WHERE kind IN ('port', 'preview');
ALTER TABLE sandbox_activity ENABLE TRIGGER sandbox_activity_append_only;
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write'));
DROP TABLE sandbox_previews;
