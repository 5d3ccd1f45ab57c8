-- +goose Up
-- The release queue serves sandboxes tried fewest times first, then the
-- longest ended: a release whose destroy keeps failing waits behind those
-- that just ended instead of holding the release slots (issue 45).
CREATE INDEX sandboxes_release_queue ON sandboxes (provider, release_attempts, ended_at)
    WHERE NOT released AND state IN ('cancelled', 'terminated', 'failed');
DROP INDEX sandboxes_unreleased;

-- +goose Down
CREATE INDEX sandboxes_unreleased ON sandboxes (provider, ended_at)
    WHERE NOT released AND state IN ('cancelled', 'terminated', 'failed');
DROP INDEX sandboxes_release_queue;
