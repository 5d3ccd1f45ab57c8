-- +goose Up
-- Warm pools: per tenant, a standing order for min_ready sandboxes of one
-- provider and params. Members are ordinary sandboxes owned by the owner
-- 'pool:' || name (a lease Tether holds while the pool exists) and
-- labelled tether.pool = name; they are found through
-- sandboxes_live_owner, so the pool row keeps no count of them. A refill
-- locks the pool's row before it counts and adds members, so that
-- replicas refilling together never over-create.
CREATE TABLE pools (
    tenant     text NOT NULL REFERENCES tenants (name),
    name       text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    provider   text NOT NULL,
    params     jsonb NOT NULL DEFAULT '{}',
    min_ready  integer NOT NULL CHECK (min_ready >= 0),
    max_size   integer NOT NULL CHECK (max_size >= 1 AND max_size >= min_ready),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- +goose Down
DROP TABLE pools;
