package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryLead takes or keeps the leadership of role for holder until now+ttl. It
// returns true while holder leads: when the role is free, its lease lapsed,
// or holder already holds it.
func (s *Store) TryLead(ctx context.Context, role, holder string, ttl time.Duration) (bool, error) {
	now := s.Now()
	var got string
	err := queryRow(ctx, s.work, `
		INSERT INTO leaders (role, holder, expires_at) VALUES (@role, @holder, @expires_at)
		ON CONFLICT (role) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE leaders.holder = EXCLUDED.holder OR leaders.expires_at < @now
		RETURNING holder`, namedArgs{"role": role, "holder": holder, "expires_at": now.Add(ttl), "now": now}).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("try lead", err)
	}
	return got == holder, nil
}

// Resign gives up holder's leadership of role, so another replica can take
// over at once instead of after the lease.
func (s *Store) Resign(ctx context.Context, role, holder string) error {
	if _, err := exec(ctx, s.work, `DELETE FROM leaders WHERE role = @role AND holder = @holder`,
		namedArgs{"role": role, "holder": holder}); err != nil {
		return wrap("resign", err)
	}
	return nil
}
