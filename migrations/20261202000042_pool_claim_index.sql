-- +goose Up
-- A claim takes the oldest ready member of a pool (LIMIT 1, FOR UPDATE SKIP
-- LOCKED). Through sandboxes_live_owner the planner may choose a sequential
-- scan instead once the pool's members are a large share of the table (the
-- LIMIT 1 looks cheap), and such a scan walks past every member claimed
-- before: claims got slower as they went. This index holds the ready
-- members only, in the order a claim takes them.
CREATE INDEX sandboxes_pool_ready ON sandboxes (tenant, owner, created_at)
    WHERE state = 'ready' AND owner LIKE 'pool:%';

-- +goose Down
DROP INDEX sandboxes_pool_ready;
