-- +goose Up
-- Owners are per tenant. An owner is alive while its lease lasts; when the
-- lease lapses, the janitor ends the owner's live sandboxes.
CREATE TABLE owners (
    tenant     text NOT NULL REFERENCES tenants (name),
    name       text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);
CREATE INDEX owners_expires ON owners (expires_at);

-- The janitor's sweeps over live sandboxes.
CREATE INDEX sandboxes_live_expiry ON sandboxes (expires_at) WHERE state IN ('requested', 'creating', 'ready');
CREATE INDEX sandboxes_live_owner ON sandboxes (tenant, owner) WHERE owner IS NOT NULL AND state IN ('requested', 'creating', 'ready');
CREATE INDEX sandboxes_create_deadline ON sandboxes (create_deadline) WHERE state IN ('requested', 'creating');
CREATE INDEX sandboxes_leased ON sandboxes (lease_expires_at) WHERE lease_owner IS NOT NULL;

-- Leadership leases: one row per role (the janitor), held by one replica
-- until expires_at unless renewed.
CREATE TABLE leaders (
    role       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);

-- What the janitor's reconciliation found at a provider and did about it:
-- resources no live sandbox accounts for (destroyed), and ready sandboxes the
-- provider lost. Append-only, like sandbox_events.
CREATE TABLE reconcile_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    provider   text NOT NULL,
    sandbox_id text NOT NULL,
    -- tenant is NULL for a resource whose sandbox Tether has no record of.
    tenant     text,
    action     text NOT NULL CHECK (action IN ('orphan_destroyed', 'orphan_destroy_failed', 'lost')),
    message    text NOT NULL DEFAULT ''
);
CREATE INDEX reconcile_events_tenant ON reconcile_events (tenant, id);

-- +goose Down
DROP TABLE reconcile_events;
DROP TABLE leaders;
DROP INDEX sandboxes_leased;
DROP INDEX sandboxes_create_deadline;
DROP INDEX sandboxes_live_owner;
DROP INDEX sandboxes_live_expiry;
DROP TABLE owners;
