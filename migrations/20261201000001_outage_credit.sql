-- +goose Up
-- How much of Postgres outages has been credited to leases: after an outage,
-- owner leases and sandbox deadlines are extended by its length (once,
-- whichever replica gets there first), so that a heartbeat that failed only
-- because Tether could not reach Postgres never expires an owner.
CREATE TABLE outage_credit (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    credited_until timestamptz NOT NULL
);

-- +goose Down
DROP TABLE outage_credit;
