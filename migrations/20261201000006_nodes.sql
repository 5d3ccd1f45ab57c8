-- +goose Up
-- Nodes: every replica registers the node (host) it runs on and heartbeats
-- it. Replicas on one host with one state folder share a node. A node whose
-- heartbeat is older than the grace period (NODE_GRACE) is dead. Times are
-- the database's clock, so hosts' clocks need not agree.
CREATE TABLE nodes (
    id           text PRIMARY KEY,
    url          text NOT NULL,
    providers    text[] NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

-- The node a sandbox of a host-bound provider (local) was placed on: set
-- when a node's executor claims its create, NULL for providers that are not
-- host-bound and for requests not yet claimed.
ALTER TABLE sandboxes ADD COLUMN node text;
CREATE INDEX sandboxes_node_live ON sandboxes (node, provider)
    WHERE node IS NOT NULL AND state IN ('requested', 'creating', 'ready');

-- The secret replicas sign forwarded requests with: made once, by the first
-- replica that starts, and read by the others. Only the database's owner
-- (Tether's role) can read it.
CREATE TABLE cluster_secret (
    id     boolean PRIMARY KEY DEFAULT true CHECK (id),
    secret bytea NOT NULL CHECK (length(secret) >= 32)
);

-- +goose Down
DROP TABLE cluster_secret;
DROP INDEX sandboxes_node_live;
ALTER TABLE sandboxes DROP COLUMN node;
DROP TABLE nodes;
