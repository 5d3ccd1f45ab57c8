-- +goose Up
-- Pause and resume (issue 25): paused joins the live states, with pausing
-- and resuming as the in-flight states the executor drives like creating
-- (claimed, leased, every write fenced on epoch):
--   ready → pausing → paused → resuming → ready
-- A pause or resume the provider refuses goes back (pausing → ready,
-- resuming → paused); one not done by its pause_deadline fails the sandbox
-- (pausing/resuming → failed, reason pause_failed or resume_failed). Every
-- one of them ends terminated, like ready: each holds a resource.
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_state_check;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_state_check CHECK (state IN
    ('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming', 'cancelled', 'terminated', 'failed'));

-- When the pause or resume in flight gives up (PAUSE_TIMEOUT after it was
-- asked for); kept afterwards, NULL before the first.
ALTER TABLE sandboxes ADD COLUMN pause_deadline timestamptz;

-- The lifecycle's transition table (internal/sandbox holds the same; a
-- test checks that the two agree).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sandboxes_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state = 'requested' AND NEW.state IN ('creating', 'cancelled'))
         OR (OLD.state = 'creating' AND NEW.state IN ('ready', 'cancelled', 'failed'))
         OR (OLD.state = 'ready' AND NEW.state IN ('pausing', 'terminated'))
         OR (OLD.state = 'pausing' AND NEW.state IN ('paused', 'ready', 'terminated', 'failed'))
         OR (OLD.state = 'paused' AND NEW.state IN ('resuming', 'terminated'))
         OR (OLD.state = 'resuming' AND NEW.state IN ('ready', 'paused', 'terminated', 'failed'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'sandbox_transition',
            MESSAGE = format('illegal sandbox transition %s -> %s', OLD.state, NEW.state);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- The partial indexes over the live states take the new ones: queries
-- splice the same list (internal/store/states.go), and a partial index
-- serves a query only when the query's predicate implies the index's.
DROP INDEX sandboxes_live;
CREATE INDEX sandboxes_live ON sandboxes (provider, state)
    WHERE state IN ('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming');
DROP INDEX sandboxes_live_expiry;
CREATE INDEX sandboxes_live_expiry ON sandboxes (expires_at)
    WHERE state IN ('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming');
DROP INDEX sandboxes_live_owner;
CREATE INDEX sandboxes_live_owner ON sandboxes (tenant, owner)
    WHERE owner IS NOT NULL AND state IN ('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming');
DROP INDEX sandboxes_node_live;
CREATE INDEX sandboxes_node_live ON sandboxes (node, provider)
    WHERE node IS NOT NULL AND state IN ('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming');

-- The executor's pause/resume claim and the janitor's sweep of overdue
-- ones: the few sandboxes in flight, apart from the create claim's
-- sandboxes_pending (whose predicate, and so its claims, stay as they were).
CREATE INDEX sandboxes_transitioning ON sandboxes (provider, pause_deadline)
    WHERE state IN ('pausing', 'resuming');

-- +goose Down
-- Down refuses while any sandbox is pausing, paused or resuming (the
-- state check): end them first.
DROP INDEX sandboxes_transitioning;
DROP INDEX sandboxes_node_live;
CREATE INDEX sandboxes_node_live ON sandboxes (node, provider)
    WHERE node IS NOT NULL AND state IN ('requested', 'creating', 'ready');
DROP INDEX sandboxes_live_owner;
CREATE INDEX sandboxes_live_owner ON sandboxes (tenant, owner) WHERE owner IS NOT NULL AND state IN ('requested', 'creating', 'ready');
DROP INDEX sandboxes_live_expiry;
CREATE INDEX sandboxes_live_expiry ON sandboxes (expires_at) WHERE state IN ('requested', 'creating', 'ready');
DROP INDEX sandboxes_live;
CREATE INDEX sandboxes_live ON sandboxes (provider, state) WHERE state IN ('requested', 'creating', 'ready');
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION sandboxes_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
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
ALTER TABLE sandboxes DROP COLUMN pause_deadline;
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_state_check;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_state_check CHECK (state IN
    ('requested', 'creating', 'ready', 'cancelled', 'terminated', 'failed'));
