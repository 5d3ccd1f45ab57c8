-- +goose Up
-- Every state change rewrites the sandbox row into every index: keep only
-- the indexes a query needs. A provider filter walks the tenant's listing
-- index; the janitor finds overdue creations among the few pending rows.
DROP INDEX sandboxes_tenant_provider_created;
DROP INDEX sandboxes_create_deadline;

-- +goose Down
CREATE INDEX sandboxes_tenant_provider_created ON sandboxes (tenant, provider, created_at DESC, id DESC);
CREATE INDEX sandboxes_create_deadline ON sandboxes (create_deadline) WHERE state IN ('requested', 'creating');
