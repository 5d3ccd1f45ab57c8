-- +goose Up
-- Key management becomes a scope: only a key with manage_keys may create
-- keys (and revoke other keys). Keys that exist already keep it (they were
-- made by an operator, or by a key that then could); keys the API makes
-- get it only when asked by a key that has it. created_by_key_id records
-- which key made a key over the API (NULL: an operator's, from the
-- command line or BOOTSTRAP_API_KEY).
ALTER TABLE api_keys
    ADD COLUMN manage_keys       boolean NOT NULL DEFAULT true,
    ADD COLUMN created_by_key_id text;
ALTER TABLE api_keys ALTER COLUMN manage_keys SET DEFAULT false;
-- The per-tenant key cap counts the tenant's keys that are not revoked.
CREATE INDEX api_keys_tenant_live ON api_keys (tenant) WHERE revoked_at IS NULL;

-- +goose Down
DROP INDEX api_keys_tenant_live;
ALTER TABLE api_keys DROP COLUMN created_by_key_id, DROP COLUMN manage_keys;
