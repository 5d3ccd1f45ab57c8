package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// An outage credit gives back to leases the time no heartbeat could have
// been recorded: a span in which no replica reached Postgres. Every
// replica's janitor runs CreditOutage once an interval, which records
// that this replica reached Postgres now: in its own row of outage_reach
// while the last record is recent (a statement that waits for no other
// replica's lock), else in the row outage_credit (reached_at). When the
// last record, the latest of both, is older than the tolerance, no replica
// reached Postgres in between (or none ran), so the span since is
// credited, once: the row outage_credit is locked, and the first replica
// back moves reached_at up to now. One replica's own loss of Postgres leaves no such
// span, since the others keep recording, and credits nothing. A span that
// began before the crediting replica started (OutageCredit.AtStart) is
// credited all the same, since no client could heartbeat while no replica
// ran: that is what a restart of the only replica leaves.
//
// Leases are judged (EndLapsedOwners, RenewOwnerLease, a create naming an
// owner, TransferOwner) only after the credit: the janitor runs
// CreditOutage before its sweeps, and the API calls SettleOutage before a
// call that judges a lease, which runs CreditOutage only when this replica
// has not run it within the tolerance (after its own outage, or at start).

// Outage credit defaults, for zero OutagePolicy fields.
const (
	// DefaultOutageTolerance is how long no replica may record reaching
	// Postgres before the span counts as an outage: two default janitor
	// intervals.
	DefaultOutageTolerance = 10 * time.Second
	// DefaultOutageCeiling is OUTAGE_CREDIT_MAX's default.
	DefaultOutageCeiling = 2 * time.Minute
)

// OutagePolicy says when and how far outages are credited to leases.
type OutagePolicy struct {
	// Replica names this replica in the credits it records.
	Replica string
	// Tolerance is the longest span without a replica recording that it
	// reached Postgres that is not an outage. Replicas record it every
	// janitor interval, so this is a little over one interval: two.
	// Default DefaultOutageTolerance.
	Tolerance time.Duration
	// Ceiling bounds a credit (OUTAGE_CREDIT_MAX): no lease or deadline is
	// stretched to end more than this long after the outage ended, so after
	// a long outage owners must heartbeat again within the rest of their
	// lease, and at most this long, or lose their sandboxes. Default
	// DefaultOutageCeiling.
	Ceiling time.Duration
}

// WithOutagePolicy sets how outages are credited (see OutagePolicy).
func WithOutagePolicy(p OutagePolicy) Option {
	return func(s *Store) {
		if p.Replica != "" {
			s.outage.policy.Replica = p.Replica
		}
		if p.Tolerance > 0 {
			s.outage.policy.Tolerance = p.Tolerance
		}
		if p.Ceiling > 0 {
			s.outage.policy.Ceiling = p.Ceiling
		}
	}
}

// outage is this process's part in crediting outages: its policy, and when
// it last ran CreditOutage to the end.
type outage struct {
	policy OutagePolicy

	mu sync.Mutex
	// checked is the latest record of a replica reaching Postgres that
	// this replica knows of, with every outage before it credited; zero:
	// none since start.
	checked time.Time
}

func defaultOutagePolicy() OutagePolicy {
	return OutagePolicy{Replica: "tether", Tolerance: DefaultOutageTolerance, Ceiling: DefaultOutageCeiling}
}

// OutageCredit is one credited outage.
type OutageCredit struct {
	// Replica is the replica that credited it.
	Replica string
	// From and To bound the span no replica recorded reaching Postgres:
	// from the last record before the outage to the first one after.
	From, To time.Time
	// Ceiling is the ceiling in force: no lease was stretched past To+Ceiling.
	Ceiling time.Duration
	// Owners counts the owner leases extended; Sandboxes the live
	// sandboxes whose deadline or owner's lease was extended (each has an
	// outage_credited event).
	Owners, Sandboxes int64
	// AtStart reports that the crediting replica had not reached Postgres
	// before, since it started: the span began before it ran, so it may
	// be a span in which no replica ran at all, as when the only replica
	// restarts, rather than one in which replicas ran and could not reach
	// Postgres. Either way clients could not heartbeat through Tether.
	AtStart bool
}

// Length is the outage's length: how long no replica reached Postgres.
func (c OutageCredit) Length() time.Duration { return c.To.Sub(c.From) }

// CreditOutage records that this replica reached Postgres now and, if no
// replica had recorded reaching it for longer than the tolerance, credits
// that span to leases: every owner lease and live sandbox deadline that
// had not lapsed when the span began is extended by the span's length,
// though never to end more than the ceiling after now (and never
// shortened). Each extended sandbox gets an event (reason outage_credited)
// and the credit a row in outage_credits. It returns the credit, and
// whether there was one. A span is credited once, whichever replicas see it.
//
// Callers run it before they judge leases: the janitor before each sweep,
// the API through SettleOutage.
func (s *Store) CreditOutage(ctx context.Context) (OutageCredit, bool, error) {
	p := s.outage.policy
	s.outage.mu.Lock()
	atStart := s.outage.checked.IsZero()
	s.outage.mu.Unlock()
	if !atStart {
		if now, ok, err := s.recordReached(ctx); err != nil || ok {
			return OutageCredit{Replica: p.Replica, To: now, Ceiling: p.Ceiling}, false, err
		}
	}
	var (
		now      time.Time
		credit   OutageCredit
		credited bool
	)
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		// A replica cut off from Postgres between two statements of this
		// transaction would hold the row's lock, and stall every other
		// replica's record, until Postgres noticed: it notices within
		// the tolerance.
		if _, err := exec(ctx, tx, `SELECT set_config('idle_in_transaction_session_timeout', @ms, true)`,
			namedArgs{"ms": strconv.FormatInt(max(p.Tolerance.Milliseconds()/2, 100), 10)}); err != nil {
			return err
		}
		// The row lock makes replicas that come back together credit in
		// turn: the second sees the first's record of now.
		var reached *time.Time
		err := queryRow(ctx, tx, `
			INSERT INTO outage_credit (id, credited_until, reached_at) VALUES (true, @now, @now)
			ON CONFLICT (id) DO UPDATE SET id = true
			RETURNING greatest(reached_at, (SELECT max(reached_at) FROM outage_reach))`, namedArgs{"now": s.Now()}).Scan(&reached)
		if err != nil {
			return err
		}
		// Now is when Postgres answered, not when the call began: a call
		// that hung through an outage must not record a time inside it.
		now = s.Now()
		credit, credited = OutageCredit{Replica: p.Replica, To: now, Ceiling: p.Ceiling, AtStart: atStart}, false
		if reached != nil && now.Sub(*reached) > p.Tolerance {
			credit.From, credited = *reached, true
			if credit.Owners, credit.Sandboxes, err = applyCredit(ctx, tx, credit); err != nil {
				return err
			}
		}
		_, err = exec(ctx, tx, `UPDATE outage_credit SET reached_at = greatest(reached_at, @now),
			credited_until = CASE WHEN @credited THEN @now ELSE credited_until END`, namedArgs{"now": now, "credited": credited})
		if err != nil {
			return err
		}
		_, err = exec(ctx, tx, `DELETE FROM outage_reach WHERE reached_at < @old`, namedArgs{"old": now.Add(-24 * time.Hour)})
		return err
	})
	if err != nil {
		return OutageCredit{}, false, wrap("credit outage", err)
	}
	s.outage.mu.Lock()
	s.outage.checked = now
	s.outage.mu.Unlock()
	return credit, credited, nil
}

// recordReached records that this replica reached Postgres now, in its
// own row of outage_reach, when the last record of any replica was within
// the tolerance, so that there is no outage to credit. It takes no lock
// another replica may hold: a replica cut off from Postgres in the middle
// of CreditOutage's transaction stalls nobody's record. ok is false when
// the last record is older (or absent), or the call took so long that now
// may lie inside an outage: the caller then takes the path that credits.
func (s *Store) recordReached(ctx context.Context) (now time.Time, ok bool, err error) {
	p := s.outage.policy
	now = s.Now()
	tag, err := exec(ctx, s.pool, `
		INSERT INTO outage_reach (replica, reached_at)
		SELECT @replica, @now
		WHERE greatest((SELECT max(reached_at) FROM outage_reach),
		               (SELECT reached_at FROM outage_credit WHERE id)) >= @since
		ON CONFLICT (replica) DO UPDATE SET reached_at = greatest(outage_reach.reached_at, EXCLUDED.reached_at)`,
		namedArgs{"replica": p.Replica, "now": now, "since": now.Add(-p.Tolerance)})
	if err != nil {
		return now, false, wrap("credit outage", err)
	}
	if tag.RowsAffected() == 0 || s.Now().Sub(now) > p.Tolerance/2 {
		return now, false, nil
	}
	s.outage.mu.Lock()
	if now.After(s.outage.checked) {
		s.outage.checked = now
	}
	s.outage.mu.Unlock()
	return now, true, nil
}

// SettleOutage makes sure any outage is credited before this replica
// judges a lease. Call it before RenewOwnerLease, a create naming an owner,
// and TransferOwner. Within the tolerance of the last record it knows of,
// no outage long enough to credit can have ended unseen, and it returns at
// once. Otherwise it reads the record: if a replica reached Postgres within
// the tolerance, any outage before was credited by that replica, and it
// writes nothing; if not, it runs CreditOutage. It returns the error of
// either, typically domain.ErrUnavailable: then no lease must be judged.
func (s *Store) SettleOutage(ctx context.Context) error {
	tolerance := s.outage.policy.Tolerance
	s.outage.mu.Lock()
	checked := s.outage.checked
	s.outage.mu.Unlock()
	if !checked.IsZero() && s.Now().Sub(checked) <= tolerance {
		return nil
	}
	var reached *time.Time
	err := s.pool.QueryRow(ctx, `SELECT greatest(reached_at, (SELECT max(reached_at) FROM outage_reach))
		FROM outage_credit WHERE id`).Scan(&reached)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // nothing recorded yet: nothing to credit
	case err != nil:
		return wrap("settle outage", err)
	case reached == nil:
		return nil
	case s.Now().Sub(*reached) <= tolerance:
		s.outage.mu.Lock()
		if reached.After(s.outage.checked) {
			s.outage.checked = *reached
		}
		s.outage.mu.Unlock()
		return nil
	}
	_, _, err = s.CreditOutage(ctx)
	return err
}

// applyCredit extends, in tx, the owner leases and live sandbox deadlines
// alive at c.From by the outage's length, capped at c.To+c.Ceiling (a
// lease already ending later is left alone), writes an outage_credited
// event for every live sandbox so extended (directly, or through its
// owner), and records the credit.
func applyCredit(ctx context.Context, tx pgx.Tx, c OutageCredit) (owners, sandboxes int64, err error) {
	why := "no replica reached Postgres"
	if c.AtStart {
		why = "no replica recorded reaching Postgres (Tether was stopped, or no replica reached it)"
	}
	msg := fmt.Sprintf("%s from %s to %s (%s): leases and deadlines alive then were extended by that, "+
		"to at most %s after it; credited by replica %s",
		why, c.From.UTC().Format(time.RFC3339Nano), c.To.UTC().Format(time.RFC3339Nano), c.Length().Round(time.Millisecond),
		c.Ceiling, c.Replica)
	// The live sandboxes are locked before their deadlines change and
	// their events are written, so that one ended meanwhile by another
	// transaction is left out (re-checked), not given an event after its
	// end.
	err = queryRow(ctx, tx, `
		WITH o AS (
			UPDATE owners SET expires_at = least(expires_at + @gap::interval, @cap), updated_at = @now
			WHERE expires_at >= @from AND expires_at < @cap
			RETURNING tenant, name
		), live AS (
			SELECT s.id, s.tenant, s.state FROM sandboxes s
			WHERE s.state IN `+liveStates+`
			  AND ((s.expires_at >= @from AND s.expires_at < @cap) OR (s.tenant, s.owner) IN (SELECT tenant, name FROM o))
			FOR UPDATE OF s
		), sb AS (
			UPDATE sandboxes s SET expires_at = least(s.expires_at + @gap::interval, @cap), updated_at = @now
			FROM live WHERE s.id = live.id AND s.expires_at >= @from AND s.expires_at < @cap
			RETURNING s.id
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT live.id, live.tenant, @now, live.state, live.state, @reason, @actor, @msg FROM live
			RETURNING 1
		), rec AS (
			INSERT INTO outage_credits (credited_at, replica, unreached_from, unreached_to, ceiling, owners, sandboxes)
			SELECT @now, @replica, @from, @now, @ceiling::interval, (SELECT count(*) FROM o), (SELECT count(*) FROM ev)
		)
		SELECT (SELECT count(*) FROM o), (SELECT count(*) FROM ev)`,
		namedArgs{
			"gap": c.Length(), "cap": c.To.Add(c.Ceiling), "from": c.From, "now": c.To,
			"reason": string(domain.ReasonOutageCredited), "actor": string(domain.ActorJanitor), "msg": msg,
			"replica": c.Replica, "ceiling": c.Ceiling,
		}).Scan(&owners, &sandboxes)
	return owners, sandboxes, err
}
