-- +goose Up
-- Tenants' secrets (POST /v1/secrets), sealed under the operator's key
-- (SECRETS_KEY, package secretbox): the value is never stored in the
-- clear, and the API never returns it. The egress proxy opens a secret
-- only to add it to a request of a sandbox whose credentials name it.
CREATE TABLE secrets (
    tenant     text NOT NULL REFERENCES tenants (name),
    name       text NOT NULL,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    key_id     text,
    PRIMARY KEY (tenant, name)
);

-- An allow-list sandbox's network rules as edited while it runs (PATCH
-- /v1/sandboxes/{id}/network); without a row, they are its create's
-- params.allow and params.credentials. Every replica's egress proxy
-- reads them from here, so they hold across pause and resume, a restart
-- and a move between nodes.
CREATE TABLE sandbox_networks (
    sandbox_id  text PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
    allow       jsonb NOT NULL,
    credentials jsonb NOT NULL,
    updated_at  timestamptz NOT NULL,
    key_id      text
);

-- An edit of the rules, and each connection the egress proxy decided,
-- are in the sandbox's activity.
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview',
                    'process_start', 'process_input', 'process_signal', 'terminal', 'network_update', 'egress'));
ALTER TABLE sandbox_activity ADD COLUMN allowed boolean;
ALTER TABLE sandbox_activity ADD COLUMN rule text;
ALTER TABLE sandbox_activity ADD COLUMN bytes_in bigint;

-- +goose Down
ALTER TABLE sandbox_activity DROP COLUMN bytes_in;
ALTER TABLE sandbox_activity DROP COLUMN rule;
ALTER TABLE sandbox_activity DROP COLUMN allowed;
ALTER TABLE sandbox_activity DISABLE TRIGGER sandbox_activity_append_only;
DELETE FROM sandbox_activity WHERE kind IN ('network_update', 'egress');
ALTER TABLE sandbox_activity ENABLE TRIGGER sandbox_activity_append_only;
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview',
                    'process_start', 'process_input', 'process_signal', 'terminal'));
DROP TABLE sandbox_networks;
DROP TABLE secrets;
