-- +goose Up
-- The nonces of the forwarded calls replicas took, so that a call is taken
-- once by all the replicas of a node (which share its node id) rather than
-- once by each. A nonce is kept until its call would be stale anyway;
-- expired ones are deleted a few at a time as new ones arrive.
CREATE TABLE forward_nonces (
    nonce      text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX forward_nonces_expires ON forward_nonces (expires_at);

-- +goose Down
DROP TABLE forward_nonces;
