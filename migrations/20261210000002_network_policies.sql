-- +goose Up
-- Named network policies: allow lists and credentials a tenant defines
-- once (PUT /v1/network-policies/{name}) and attaches to allow-list
-- sandboxes by name (params.policies, or PATCH on the sandbox's
-- network). A sandbox reaches what its own rules and its policies' allow;
-- an edit of a policy reaches every sandbox it is attached to.
CREATE TABLE network_policies (
    tenant      text NOT NULL REFERENCES tenants (name),
    name        text NOT NULL,
    allow       jsonb NOT NULL,
    credentials jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    key_id      text,
    PRIMARY KEY (tenant, name)
);

-- The policies an edit attached; NULL: the create's params.policies.
ALTER TABLE sandbox_networks ADD COLUMN policies jsonb;

-- +goose Down
ALTER TABLE sandbox_networks DROP COLUMN policies;
DROP TABLE network_policies;
