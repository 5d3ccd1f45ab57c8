-- +goose Up
-- Snapshots (issue 25): a copy of a sandbox's workspace, kept by its
-- provider, catalogued here, that outlives the sandbox and that a new
-- sandbox may start from (sandboxes.from_snapshot).
--   creating → ready | failed;  ready → lost (its data is gone) | deleted
--   creating → deleted (deleted while being taken)
-- A snapshot is taken by an executor under a lease on its source sandbox
-- (the sandbox's lease_owner, lease_expires_at, epoch), like a create, so
-- that no release destroys the sandbox while the copy runs; epoch is the
-- sandbox epoch of the claim that last took it, and every write about the
-- copy is fenced on it. An exit snapshot (kind 'exit') is taken by the
-- release worker of a sandbox created with on_end 'snapshot', under the
-- release's claim.
CREATE TABLE snapshots (
    id          text PRIMARY KEY,
    tenant      text NOT NULL REFERENCES tenants (name),
    source_id   text NOT NULL REFERENCES sandboxes (id),
    provider    text NOT NULL,
    -- The node whose provider holds it (host-bound providers); NULL else.
    node        text,
    kind        text NOT NULL CHECK (kind IN ('manual', 'exit')),
    state       text NOT NULL CHECK (state IN ('creating', 'ready', 'failed', 'lost', 'deleted')),
    size_bytes  bigint NOT NULL DEFAULT 0 CHECK (size_bytes >= 0),
    error       text,
    epoch       bigint NOT NULL DEFAULT 0,
    attempts    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    -- When a creating snapshot gives up (SNAPSHOT_TIMEOUT after it was
    -- asked for) and fails.
    deadline    timestamptz NOT NULL,
    ready_at    timestamptz,
    -- When the janitor deletes it (SNAPSHOT_RETENTION after it was asked
    -- for); NULL: kept until deleted.
    expires_at  timestamptz,
    deleted_at  timestamptz,
    CHECK ((state = 'ready') <= (ready_at IS NOT NULL)),
    CHECK ((state = 'deleted') = (deleted_at IS NOT NULL))
);
CREATE INDEX snapshots_tenant_created ON snapshots (tenant, created_at DESC, id DESC) WHERE state <> 'deleted';
CREATE INDEX snapshots_source ON snapshots (source_id);
-- The executor's claim and the janitor's overdue sweep.
CREATE INDEX snapshots_creating ON snapshots (provider, created_at) WHERE state = 'creating';
-- Retention.
CREATE INDEX snapshots_expiry ON snapshots (expires_at) WHERE state = 'ready' AND expires_at IS NOT NULL;
-- One exit snapshot per sandbox.
CREATE UNIQUE INDEX snapshots_exit ON snapshots (source_id) WHERE kind = 'exit';

-- +goose StatementBegin
CREATE FUNCTION snapshots_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state = 'creating' AND NEW.state IN ('ready', 'failed', 'deleted'))
         OR (OLD.state = 'ready' AND NEW.state IN ('lost', 'deleted'))
         OR (OLD.state IN ('failed', 'lost') AND NEW.state = 'deleted')) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'snapshot_transition',
            MESSAGE = format('illegal snapshot transition %s -> %s', OLD.state, NEW.state);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER snapshots_check_transition BEFORE UPDATE OF state ON snapshots
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION snapshots_check_transition();

-- What a sandbox does with its workspace when it ends by owner_expired,
-- expired or requested: 'snapshot' takes an exit snapshot before its
-- release; NULL: nothing.
ALTER TABLE sandboxes ADD COLUMN on_end text CHECK (on_end IN ('snapshot'));
-- The snapshot the sandbox started from; NULL for a fresh one.
ALTER TABLE sandboxes ADD COLUMN from_snapshot text REFERENCES snapshots (id);

-- Per-tenant overrides of SNAPSHOT_MAX_PER_TENANT and
-- SNAPSHOT_MAX_BYTES_PER_TENANT; NULL: the server's.
ALTER TABLE tenants
    ADD COLUMN max_snapshots integer CHECK (max_snapshots >= 0),
    ADD COLUMN max_snapshot_bytes bigint CHECK (max_snapshot_bytes >= 0);

-- Reconciliation records what it does to snapshots too (sandbox_id then
-- holds the snapshot's id): an orphaned snapshot's data removed, or a
-- ready snapshot whose data is gone.
ALTER TABLE reconcile_events DROP CONSTRAINT reconcile_events_action_check;
ALTER TABLE reconcile_events ADD CONSTRAINT reconcile_events_action_check CHECK (action IN
    ('orphan_destroyed', 'orphan_destroy_failed', 'lost', 'snapshot_orphan_deleted', 'snapshot_orphan_delete_failed', 'snapshot_lost'));

-- +goose Down
-- (reconcile_events is append-only: rows about snapshots stay, so the old
-- check is not validated against them.)
ALTER TABLE reconcile_events DROP CONSTRAINT reconcile_events_action_check;
ALTER TABLE reconcile_events ADD CONSTRAINT reconcile_events_action_check CHECK (action IN
    ('orphan_destroyed', 'orphan_destroy_failed', 'lost')) NOT VALID;
ALTER TABLE tenants DROP COLUMN max_snapshot_bytes, DROP COLUMN max_snapshots;
ALTER TABLE sandboxes DROP COLUMN from_snapshot;
ALTER TABLE sandboxes DROP COLUMN on_end;
DROP TABLE snapshots;
DROP FUNCTION snapshots_check_transition();
