package store

import (
	"context"
	"time"
)

// ForgetIdempotencyKeys deletes up to limit idempotency keys used before
// cutoff and returns how many: after that, the same key makes a new
// sandbox.
func (s *Store) ForgetIdempotencyKeys(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := exec(ctx, s.work, `
		DELETE FROM idempotency_keys WHERE (tenant, key) IN (
			SELECT tenant, key FROM idempotency_keys WHERE created_at < @cutoff LIMIT @limit)`,
		namedArgs{"cutoff": cutoff, "limit": limit})
	if err != nil {
		return 0, wrap("forget idempotency keys", err)
	}
	return tag.RowsAffected(), nil
}
