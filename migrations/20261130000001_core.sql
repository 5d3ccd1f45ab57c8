-- +goose Up
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
CREATE INDEX sandboxes_tenant_provider_created ON sandboxes (tenant, provider, created_at DESC, id DESC);
CREATE INDEX sandboxes_labels ON sandboxes USING gin (labels jsonb_path_ops);
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

-- Every change that gives a worker something to do, or a waiting client
-- something to see, is announced on channel tether_sandbox as
-- "<id> <state> <released>".
-- +goose StatementBegin
CREATE FUNCTION sandboxes_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tether_sandbox', NEW.id || ' ' || NEW.state || ' ' || NEW.released::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER sandboxes_notify_insert AFTER INSERT ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_notify();
CREATE TRIGGER sandboxes_notify_update AFTER UPDATE OF state, released, lease_expires_at ON sandboxes
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.released IS DISTINCT FROM NEW.released
                       OR (NEW.lease_owner IS NULL AND OLD.lease_owner IS NOT NULL))
    EXECUTE FUNCTION sandboxes_notify();

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE sandbox_events;
DROP FUNCTION sandbox_events_append_only();
DROP TABLE sandboxes;
DROP FUNCTION sandboxes_check_transition();
DROP FUNCTION sandboxes_notify();
DROP TABLE api_keys;
DROP TABLE tenants;
