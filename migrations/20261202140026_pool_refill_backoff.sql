-- +goose Up
-- A warm pool's refill backoff (issue 26). refill_pending holds the ids of
-- the members refills requested whose outcome no refill has seen yet; a
-- refill (under the pool row's lock) looks them up: one that became ready
-- resets the backoff, failed ones without a ready one count one more
-- failed round (refill_failures) and put the next request off to
-- next_refill_at (bounded exponential). While refill_failures > 0 a refill
-- requests one member at a time. refill_error and refill_error_at are the
-- last error a refill saw: a failed member's, or the tenant's quota.
ALTER TABLE pools
    ADD COLUMN refill_failures integer NOT NULL DEFAULT 0 CHECK (refill_failures >= 0),
    ADD COLUMN refill_error    text,
    ADD COLUMN refill_error_at timestamptz,
    ADD COLUMN next_refill_at  timestamptz,
    ADD COLUMN refill_pending  text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE pools
    DROP COLUMN refill_pending,
    DROP COLUMN next_refill_at,
    DROP COLUMN refill_error_at,
    DROP COLUMN refill_error,
    DROP COLUMN refill_failures;
