-- +goose Up
-- A stopped TTL clock while paused (PAUSED_TTL > 0, issue 25): when a
-- sandbox becomes paused, the TTL it had left is kept here and its
-- expires_at becomes the paused deadline (PAUSED_TTL from then); when it
-- resumes (resuming → ready), expires_at becomes the time left from then
-- and this is cleared. NULL when the clock runs: not paused, or PAUSED_TTL
-- 0 when it paused. Written by the same statement as the transition.
ALTER TABLE sandboxes ADD COLUMN paused_ttl_left interval
    CHECK (paused_ttl_left >= interval '0');

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN paused_ttl_left;
