-- +goose Up
-- Tether's schema. Changes to sandboxes are announced by Tether itself after
-- each commit (LISTEN/NOTIFY, channel tether_sandbox), not by triggers: a
-- transaction that NOTIFYs holds a database-wide lock through its commit,
-- which would queue every durable commit behind the one before it.
CREATE TABLE tenants (
    name       text PRIMARY KEY CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- API keys are stored as SHA-256 hashes; the key itself is shown once.
CREATE TABLE api_keys (
    key_hash   bytea PRIMARY KEY,
    tenant     text NOT NULL REFERENCES tenants (name),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sandboxes (
    id               text PRIMARY KEY,
    tenant           text NOT NULL REFERENCES tenants (name),
    state            text NOT NULL CHECK (state IN ('requested', 'creating', 'ready', 'cancelled', 'terminated', 'failed')),
    provider         text NOT NULL,
    owner            text,
    labels           jsonb NOT NULL DEFAULT '{}',
    env              jsonb NOT NULL DEFAULT '{}',
    setup            text NOT NULL DEFAULT '',
    params           jsonb NOT NULL DEFAULT '{}',
    reason           text,
    error            text,
    released         boolean NOT NULL DEFAULT false,
    provider_id      text,
    work_dir         text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    ready_at         timestamptz,
    ended_at         timestamptz,
    released_at      timestamptz,
    expires_at       timestamptz NOT NULL,
    create_deadline  timestamptz NOT NULL,
    -- Claims bump epoch; every write by a worker is fenced on it.
    epoch            bigint NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    -- The worker holding the sandbox (creating, or releasing) and until when.
    -- For a sandbox waiting to retry, lease_owner is NULL and lease_expires_at
    -- is when it may be claimed again.
    lease_owner      text,
    lease_expires_at timestamptz,
    release_attempts integer NOT NULL DEFAULT 0,
    release_error    text,
    CHECK ((state IN ('cancelled', 'terminated', 'failed')) = (ended_at IS NOT NULL)),
    CHECK (NOT released OR state IN ('cancelled', 'terminated', 'failed'))
);

-- The lifecycle's transition table, enforced by the database itself so that
-- no code path can write an illegal transition (internal/sandbox holds the
-- same table; a test checks that the two agree).
-- +goose StatementBegin
CREATE FUNCTION sandboxes_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state = 'requested' AND NEW.state IN ('creating', 'cancelled'))
         OR (OLD.state = 'creating' AND NEW.state IN ('ready', 'cancelled', 'failed'))
         OR (OLD.state = 'ready' AND NEW.state = 'terminated')) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'sandbox_transition',
            MESSAGE = format('illegal sandbox transition %s -> %s', OLD.state, NEW.state);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER sandboxes_check_transition BEFORE UPDATE OF state ON sandboxes
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION sandboxes_check_transition();

-- Listing: newest first, keyset on (created_at, id), per tenant.
CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at DESC, id DESC);
CREATE INDEX sandboxes_tenant_state_created ON sandboxes (tenant, state, created_at DESC, id DESC);
CREATE INDEX sandboxes_tenant_owner_created ON sandboxes (tenant, owner, created_at DESC, id DESC) WHERE owner IS NOT NULL;
-- A provider filter walks the tenant's listing index: every state change
-- rewrites the row into every index, so only the indexes a query needs.
-- Most sandboxes carry no labels: keep them out of the (costly to update)
-- GIN index. Label filters add the predicate so the planner can use it.
CREATE INDEX sandboxes_labels ON sandboxes USING gin (labels jsonb_path_ops) WHERE labels <> '{}'::jsonb;
-- The executor's claim: the small set of sandboxes still being created.
CREATE INDEX sandboxes_pending ON sandboxes (provider, created_at) WHERE state IN ('requested', 'creating');
-- Live sandboxes, for metrics and the janitor's reconciliation.
CREATE INDEX sandboxes_live ON sandboxes (provider, state) WHERE state IN ('requested', 'creating', 'ready');
-- The release queue: terminal sandboxes whose resources are not yet confirmed gone.
CREATE INDEX sandboxes_unreleased ON sandboxes (provider, ended_at)
    WHERE NOT released AND state IN ('cancelled', 'terminated', 'failed');

-- The append-only history: one row per transition, written in the same
-- transaction as the state change.
CREATE TABLE sandbox_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sandbox_id text NOT NULL REFERENCES sandboxes (id),
    tenant     text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    from_state text,
    to_state   text NOT NULL,
    reason     text,
    actor      text NOT NULL,
    message    text NOT NULL DEFAULT ''
);
CREATE INDEX sandbox_events_sandbox ON sandbox_events (sandbox_id, id);
CREATE INDEX sandbox_events_tenant ON sandbox_events (tenant, id);

-- +goose StatementBegin
CREATE FUNCTION sandbox_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sandbox_events is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER sandbox_events_append_only BEFORE UPDATE OR DELETE ON sandbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION sandbox_events_append_only();

-- Idempotency keys remember which sandbox a keyed create made, and a hash of
-- its request to tell a retry from a reuse.
CREATE TABLE idempotency_keys (
    tenant       text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    sandbox_id   text NOT NULL REFERENCES sandboxes (id) DEFERRABLE INITIALLY DEFERRED,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
);
-- The janitor forgets idempotency keys after IDEMPOTENCY_KEY_TTL.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

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
-- (Overdue creations are found among the few pending rows, through
-- sandboxes_pending.)
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
DROP TABLE owners;
DROP TABLE idempotency_keys;
DROP TABLE sandbox_events;
DROP FUNCTION sandbox_events_append_only();
DROP TABLE sandboxes;
DROP FUNCTION sandboxes_check_transition();
DROP TABLE api_keys;
DROP TABLE tenants;
