-- +goose Up
-- The janitor forgets idempotency keys after IDEMPOTENCY_KEY_TTL.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP INDEX idempotency_keys_created;
