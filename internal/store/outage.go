package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// outage remembers, for this process, when the store last reached Postgres
// and since when it has failed to, so that the time Postgres was
// unreachable is credited to leases (CreditOutage) before any lease is
// judged again: a heartbeat that failed only because Tether could not
// reach Postgres must never expire its owner. Lease renewals and the
// janitor's sweeps, which every replica runs each interval, feed it.
type outage struct {
	mu          sync.Mutex
	lastReached time.Time
	since       time.Time // zero: no outage pending credit
}

// reached records that Postgres answered.
func (s *Store) reached() {
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	if s.outage.since.IsZero() {
		s.outage.lastReached = s.Now()
	}
}

// unreachable records that err, if it says Postgres cannot be reached,
// began or continues an outage, which began when Postgres last answered.
func (s *Store) unreachable(err error) {
	if !errors.Is(err, sandbox.ErrUnavailable) {
		return
	}
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	if s.outage.since.IsZero() {
		s.outage.since = s.outage.lastReached
	}
}

// creditPendingOutage credits the outage this process saw, if any, before
// a lease is judged.
func (s *Store) creditPendingOutage(ctx context.Context) error {
	s.outage.mu.Lock()
	since := s.outage.since
	s.outage.mu.Unlock()
	if since.IsZero() {
		return nil
	}
	if _, err := s.CreditOutage(ctx, since, s.Now()); err != nil {
		return err
	}
	s.outage.mu.Lock()
	defer s.outage.mu.Unlock()
	if s.outage.since.Equal(since) {
		s.outage.since = time.Time{}
		s.outage.lastReached = s.Now()
	}
	return nil
}

// CreditOutage extends owner leases and live sandboxes' deadlines by the
// part of the outage [from, to] not credited before, for those still
// running at its start: a heartbeat or renewal that failed only because
// Tether could not reach Postgres must not end them. Replicas that saw the
// same outage credit it once between them. It returns the time credited.
func (s *Store) CreditOutage(ctx context.Context, from, to time.Time) (time.Duration, error) {
	var gap time.Duration
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var credited time.Time
		err := tx.QueryRow(ctx, `
			INSERT INTO outage_credit (id, credited_until) VALUES (true, $1)
			ON CONFLICT (id) DO UPDATE SET credited_until = outage_credit.credited_until
			RETURNING credited_until`, from).Scan(&credited)
		if err != nil {
			return err
		}
		start := from
		if credited.After(start) {
			start = credited
		}
		if !to.After(start) {
			return nil
		}
		gap = to.Sub(start)
		if _, err := tx.Exec(ctx, `UPDATE owners SET expires_at = expires_at + $2::interval WHERE expires_at >= $1`, start, gap); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE sandboxes SET expires_at = expires_at + $2::interval
			WHERE state IN `+liveStates+` AND expires_at >= $1`, start, gap); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE outage_credit SET credited_until = $1`, to)
		return err
	})
	if err != nil {
		return 0, wrap("credit outage", err)
	}
	return gap, nil
}
