-- +goose Up
-- Sandboxes made through E2B's API (docs/e2b.md) are served on E2B's
-- per-sandbox hosts, {port}-{sandbox id}.E2B_DOMAIN, as E2B's SDK builds
-- them (getHost): without a token when the create allowed public traffic
-- (network.allowPublicTraffic, E2B's default), else with the sandbox's
-- traffic access token, which is derived, not kept. Only E2B's create
-- writes a row: a sandbox without one (every /v1 sandbox) is not served
-- there.
CREATE TABLE e2b_sandboxes (
    sandbox_id     text PRIMARY KEY REFERENCES sandboxes (id),
    tenant         text NOT NULL,
    public_traffic boolean NOT NULL
);

-- Each request through such a host is recorded in the sandbox's activity,
-- kind e2b_host, as a preview's is.
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview',
                    'process_start', 'process_input', 'process_signal', 'terminal', 'network_update', 'egress', 'e2b_host'));

-- +goose Down
-- The Down of an append-only table: the E2B host records go with their
-- kind.
ALTER TABLE sandbox_activity DISABLE TRIGGER sandbox_activity_append_only;
DELETE FROM sandbox_activity WHERE kind = 'e2b_host';
ALTER TABLE sandbox_activity ENABLE TRIGGER sandbox_activity_append_only;
ALTER TABLE sandbox_activity DROP CONSTRAINT sandbox_activity_kind_check;
ALTER TABLE sandbox_activity ADD CONSTRAINT sandbox_activity_kind_check
    CHECK (kind IN ('exec', 'file_read', 'file_write', 'archive_read', 'archive_write', 'port', 'preview',
                    'process_start', 'process_input', 'process_signal', 'terminal', 'network_update', 'egress'));
DROP TABLE e2b_sandboxes;
