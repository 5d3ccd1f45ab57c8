-- +goose Up
-- Credit only what blocked heartbeats. Every replica records, each janitor
-- interval, that it reached Postgres (reached_at, by that replica's clock).
-- A span longer than the tolerance in which no replica recorded reaching
-- Postgres is an outage no heartbeat could get through, and only such a
-- span is credited to leases: one replica's own trouble leaves no gap,
-- since the others keep recording. NULL: nothing recorded yet (a schema
-- from before this migration), so nothing to credit.
ALTER TABLE outage_credit ADD COLUMN reached_at timestamptz;

-- Every credit, for operators: which replica credited it, the span no
-- replica reached Postgres, the ceiling in force, and how many owner
-- leases and sandbox deadlines it extended. Each extended sandbox also has
-- an event (reason outage_credited) in its own history. Append-only.
CREATE TABLE outage_credits (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    credited_at    timestamptz NOT NULL,
    replica        text NOT NULL,
    unreached_from timestamptz NOT NULL,
    unreached_to   timestamptz NOT NULL,
    ceiling        interval NOT NULL,
    owners         bigint NOT NULL,
    sandboxes      bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION outage_credits_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outage_credits is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outage_credits_append_only BEFORE UPDATE OR DELETE ON outage_credits
    FOR EACH STATEMENT EXECUTE FUNCTION outage_credits_append_only();

-- +goose Down
DROP TABLE outage_credits;
DROP FUNCTION outage_credits_append_only();
ALTER TABLE outage_credit DROP COLUMN reached_at;
