-- +goose Up
-- Per-tenant overrides of the server's quotas (TENANT_MAX_LIVE,
-- TENANT_CREATES_PER_MINUTE); NULL means the server's default.
ALTER TABLE tenants
    ADD COLUMN max_live_sandboxes integer CHECK (max_live_sandboxes >= 0),
    ADD COLUMN creates_per_minute integer CHECK (creates_per_minute >= 0);

-- +goose Down
ALTER TABLE tenants DROP COLUMN creates_per_minute, DROP COLUMN max_live_sandboxes;
