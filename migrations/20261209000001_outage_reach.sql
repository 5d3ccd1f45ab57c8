-- +goose Up
-- Each replica records reaching Postgres in a row of its own, so that a
-- replica cut off in the middle of a transaction on outage_credit (its
-- session idle in the transaction, holding the row's lock, until Postgres
-- notices) does not stop the others from recording: the last record is the
-- latest of these and outage_credit.reached_at. Rows of replicas that have
-- not recorded for a day are deleted when an outage is judged.
CREATE TABLE outage_reach (
    replica text PRIMARY KEY,
    reached_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE outage_reach;
