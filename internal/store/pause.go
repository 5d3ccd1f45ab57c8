package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// Pause and resume. A client's request moves the sandbox into pausing (from
// ready) or resuming (from paused) with a pause deadline, and the executor
// claims it like a create (ClaimTransitions: epoch bumped, leased), calls
// the provider, and settles it fenced on the claim's epoch: done
// (FinishTransition), refused (RevertTransition), or failed
// (FailTransition; the janitor's FailOverdue past the deadline).

// transitionStates is the SQL list of the in-flight states, as the partial
// index sandboxes_transitioning has it.
const transitionStates = `('pausing', 'resuming')`

// requestTransitionSQL moves the sandbox @id of @tenant from @from to @to
// with the deadline @deadline, appending the client's event.
var requestTransitionSQL = `
		WITH upd AS (
			UPDATE sandboxes s SET state = @to, pause_deadline = @deadline, updated_at = @now, error = NULL,
				lease_owner = NULL, lease_expires_at = NULL
			WHERE s.id = @id AND s.tenant = @tenant AND ` + byIDTest("s.state = @from") + `
			RETURNING s.*
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message, actor_key_id, actor_key_name)
			SELECT id, tenant, @now, @from, @to, NULL, 'client', @message, @key_id::text, @key_name::text FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`

// transitionRequest is what RequestPause and RequestResume differ in.
type transitionRequest struct {
	op                string       // "pause" or "resume", for errors
	from, to          domain.State // the request moves the sandbox from from to to
	waypoint, settled domain.State // the states in which the request is a no-op
	message           string       // the event's
	conflictOp        string       // what a conflict says could not be done
	timeout           time.Duration
	tenant, id        string
	by                domain.Caller
}

// RequestPause asks for the tenant's ready sandbox to be paused: ready →
// pausing, with a deadline timeout from now. changed is false, and the
// sandbox is returned as it is, when it is pausing or paused already. Any
// other state is a SANDBOX_STATE_CONFLICT.
func (s *Store) RequestPause(ctx context.Context, tenant, id string, timeout time.Duration, by domain.Caller) (domain.Sandbox, bool, error) {
	return s.requestTransition(ctx, transitionRequest{
		op: "pause", from: domain.StateReady, to: domain.StatePausing,
		waypoint: domain.StatePausing, settled: domain.StatePaused,
		message: "pause requested", timeout: timeout, tenant: tenant, id: id, by: by,
		conflictOp: "pause (the sandbox must be ready)",
	})
}

// RequestResume asks for the tenant's paused sandbox to be resumed: paused
// → resuming, with a deadline timeout from now. changed is false when it is
// resuming or ready already. Any other state is a SANDBOX_STATE_CONFLICT.
func (s *Store) RequestResume(ctx context.Context, tenant, id string, timeout time.Duration, by domain.Caller) (domain.Sandbox, bool, error) {
	return s.requestTransition(ctx, transitionRequest{
		op: "resume", from: domain.StatePaused, to: domain.StateResuming,
		waypoint: domain.StateResuming, settled: domain.StateReady,
		message: "resume requested", timeout: timeout, tenant: tenant, id: id, by: by,
		conflictOp: "resume (the sandbox must be paused)",
	})
}

func (s *Store) requestTransition(ctx context.Context, r transitionRequest) (domain.Sandbox, bool, error) {
	// A sandbox that leaves the no-op states between the update and the
	// read (a resume finishing) is tried again, a few times.
	for range 3 {
		now := s.Now()
		sb, err := scanSandbox(querySandbox(ctx, s.pool, requestTransitionSQL, namedArgs{
			"id": r.id, "tenant": r.tenant, "from": string(r.from), "to": string(r.to),
			"now": now, "deadline": now.Add(r.timeout), "message": r.message,
			"key_id": nullable(r.by.KeyID), "key_name": nullable(r.by.KeyName),
		}))
		if err == nil {
			s.announce(sb)
			return sb, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return sb, false, wrap("request "+r.op, err)
		}
		cur, err := s.GetSandbox(ctx, r.tenant, r.id)
		if err != nil {
			return cur, false, err
		}
		switch cur.State {
		case r.waypoint, r.settled:
			return cur, false, nil
		case r.from:
			continue
		}
		return cur, false, domain.StateConflict(r.id, cur.State, r.conflictOp)
	}
	return domain.Sandbox{}, false, domain.StateConflict(r.id, r.from, r.op+" while it keeps changing state; retry")
}

// claimTransitionsSQL claims pausing and resuming sandboxes of @provider
// that no live lease holds (never claimed, due for a retry, or their
// executor died), earliest deadline first; of a host-bound provider (@node
// not "") only those of the claiming node. Each claimed sandbox's epoch is
// bumped and it is leased to @worker until @lease_until. The state does not
// change, so no event is written.
var claimTransitionsSQL = `
		WITH ` + fairPick(`provider = @provider AND state IN `+transitionStates+`
			  AND (lease_expires_at IS NULL OR lease_expires_at < @now)
			  AND (@node::text = '' OR node = @node)`, "pause_deadline") + `, upd AS (
			UPDATE sandboxes s SET
				epoch = s.epoch + 1, lease_owner = @worker, lease_expires_at = @lease_until, updated_at = @now
			FROM picked
			WHERE s.id = picked.id
			RETURNING s.*, picked.state AS from_state
		)
		SELECT s.from_state, ` + sandboxColumns + ` FROM upd s`

// ClaimTransitions claims up to limit sandboxes of the provider that are
// pausing or resuming and that no live lease holds, within share. For a
// host-bound provider (node not "") only the node's own are claimed: the
// sandbox runs there.
func (s *Store) ClaimTransitions(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share Share) ([]Claim, error) {
	rows, err := query(ctx, s.work, claimTransitionsSQL, s.claimArgs(provider, node, worker, limit, lease, share))
	if err != nil {
		return nil, wrap("claim transitions", err)
	}
	return collectClaims(rows, "claim transitions")
}

// settleTransitionSQL moves the sandbox @id, still at @epoch and in @from,
// to @to, ending the worker's lease (@keep_lease: keeping it, for a
// failure whose resource the worker goes on to release), with @reason and
// @error; a terminal @to ends the sandbox. It appends @actor's event.
//
// With @paused_ttl positive, pausing → paused stops the TTL clock: the
// TTL left is kept in paused_ttl_left and expires_at becomes the paused
// deadline, @paused_ttl from now. resuming → ready of a sandbox so paused
// starts the clock again: expires_at becomes the kept TTL from now. Both
// are capped at created_at plus @max_lifetime (when positive). Any other
// settle (a refused resume among them) leaves both as they are. The TTL
// left is kept in seconds, never days: a timestamp difference comes in
// days, and adding days follows the session's time zone across a
// daylight-saving change, an hour off.
var settleTransitionSQL = `
		WITH upd AS (
			UPDATE sandboxes s SET state = @to, updated_at = @now,
				expires_at = CASE
					WHEN @from = 'pausing' AND @to = 'paused' AND @paused_ttl::interval > interval '0'
						THEN least(@now::timestamptz + @paused_ttl::interval, ` + lifetimeCap + `)
					WHEN @from = 'resuming' AND @to = 'ready' AND s.paused_ttl_left IS NOT NULL
						THEN least(@now::timestamptz + s.paused_ttl_left, ` + lifetimeCap + `)
					ELSE s.expires_at END,
				paused_ttl_left = CASE
					WHEN @from = 'pausing' AND @to = 'paused' AND @paused_ttl::interval > interval '0'
						THEN extract(epoch FROM greatest(s.expires_at - @now::timestamptz, interval '0')) * interval '1 second'
					WHEN @from = 'resuming' AND @to = 'ready' THEN NULL
					ELSE s.paused_ttl_left END,
				error = @error::text, reason = @reason::text,
				ended_at = CASE WHEN @to IN ` + terminalStates + ` THEN @now::timestamptz END,
				lease_owner = CASE WHEN @keep_lease THEN s.lease_owner END,
				lease_expires_at = CASE WHEN @keep_lease THEN s.lease_expires_at END
			WHERE s.id = @id AND s.epoch = @epoch AND ` + byIDTest("s.state = @from") + `
			RETURNING s.*
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, @from, @to, @reason::text, @actor, @message FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`

// lifetimeCap is the latest deadline the sandbox s may have: its creation
// plus @max_lifetime, or none when @max_lifetime is not positive.
const lifetimeCap = `CASE WHEN @max_lifetime::interval > interval '0'
	THEN s.created_at + @max_lifetime::interval ELSE 'infinity'::timestamptz END`

// settle is one settleTransitionSQL.
type settle struct {
	id               string
	epoch            int64
	from, to         domain.State
	reason           domain.Reason
	actor            domain.Actor
	message, errText string
	keepLease        bool
}

func (s *Store) settleTransition(ctx context.Context, op string, st settle) (domain.Sandbox, error) {
	sb, err := scanSandbox(querySandbox(ctx, s.work, settleTransitionSQL, namedArgs{
		"id": st.id, "epoch": st.epoch, "from": string(st.from), "to": string(st.to), "now": s.Now(),
		"error": nullable(st.errText), "reason": nullable(string(st.reason)), "keep_lease": st.keepLease,
		"actor": string(st.actor), "message": st.message,
		"paused_ttl": s.pausedTTL, "max_lifetime": s.maxLifetime,
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		return sb, fmt.Errorf("store: %s: %w", op, domain.ErrFenced)
	}
	if err != nil {
		return sb, wrap(op, err)
	}
	s.announce(sb)
	return sb, nil
}

// FinishTransition records a pause or resume the provider completed:
// pausing → paused, resuming → ready, fenced on the epoch and on the
// sandbox still being in from. ErrFenced means it ended or was reclaimed
// meanwhile.
func (s *Store) FinishTransition(ctx context.Context, id string, epoch int64, from domain.State) (domain.Sandbox, error) {
	to, ok := map[domain.State]domain.State{domain.StatePausing: domain.StatePaused, domain.StateResuming: domain.StateReady}[from]
	if !ok {
		return domain.Sandbox{}, fmt.Errorf("store: finish transition from %s: not in flight", from)
	}
	return s.settleTransition(ctx, "finish transition", settle{
		id: id, epoch: epoch, from: from, to: to, actor: domain.ActorExecutor, message: "provider " + string(to),
	})
}

// RevertTransition records a pause or resume the provider refused (the
// sandbox is as it was): pausing → ready, resuming → paused, with the
// refusal as the sandbox's error. Fenced like FinishTransition.
func (s *Store) RevertTransition(ctx context.Context, id string, epoch int64, from domain.State, cause string) (domain.Sandbox, error) {
	back, ok := map[domain.State]domain.State{domain.StatePausing: domain.StateReady, domain.StateResuming: domain.StatePaused}[from]
	if !ok {
		return domain.Sandbox{}, fmt.Errorf("store: revert transition from %s: not in flight", from)
	}
	return s.settleTransition(ctx, "revert transition", settle{
		id: id, epoch: epoch, from: from, to: back, actor: domain.ActorExecutor, errText: cause,
		message: string(from) + " refused: " + cause,
	})
}

// FailTransition records a pause or resume that cannot complete and whose
// outcome at the provider is unknown (its deadline passed): the sandbox
// fails with reason pause_failed or resume_failed. The worker keeps its
// lease, so that it releases the resource at once.
func (s *Store) FailTransition(ctx context.Context, id string, epoch int64, from domain.State, actor domain.Actor, cause string) (domain.Sandbox, error) {
	if !from.Transitioning() {
		return domain.Sandbox{}, fmt.Errorf("store: fail transition from %s: not in flight", from)
	}
	return s.settleTransition(ctx, "fail transition", settle{
		id: id, epoch: epoch, from: from, to: domain.StateFailed, reason: transitionFailure(from), actor: actor,
		errText: cause, message: cause, keepLease: true,
	})
}

// transitionFailure is the reason of a failed pause or resume.
func transitionFailure(from domain.State) domain.Reason {
	if from == domain.StateResuming {
		return domain.ReasonResumeFailed
	}
	return domain.ReasonPauseFailed
}

// unclaimTransitionSQL hands pausing or resuming sandbox @id at @epoch
// back, claimable from @claimable_at, at @now, with the error @error.
var unclaimTransitionSQL = `
		UPDATE sandboxes SET lease_owner = NULL, lease_expires_at = @claimable_at, updated_at = @now, error = coalesce(@error, error)
		WHERE id = @id AND epoch = @epoch AND ` + byIDTest("lease_owner IS NOT NULL") + ` AND ` + byIDState("state", transitionStates)

// UnclaimTransition hands a pausing or resuming sandbox back: the lease
// ends and it may be claimed again from at (now, at shutdown; later, for a
// retry), with lastErr, if set, as its error until it settles.
func (s *Store) UnclaimTransition(ctx context.Context, id string, epoch int64, at time.Time, lastErr string) error {
	tag, err := exec(ctx, s.work, unclaimTransitionSQL, namedArgs{
		"id": id, "epoch": epoch, "claimable_at": at.UTC(), "now": s.Now(), "error": nullable(lastErr),
	})
	if err != nil {
		return wrap("unclaim transition", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: unclaim transition: %w", domain.ErrFenced)
	}
	return nil
}

// failOverdueTransitionsSQL fails up to @limit pausing and resuming
// sandboxes whose pause deadline passed before @now, keeping the lease of
// an executor whose call is still in flight (it then releases the
// resource); others go to the release queue.
var failOverdueTransitionsSQL = `
		WITH cur AS (
			SELECT id, state FROM sandboxes
			WHERE state IN ` + transitionStates + ` AND pause_deadline < @now
			LIMIT @limit
			FOR UPDATE SKIP LOCKED
		), upd AS (
			UPDATE sandboxes s SET
				state = 'failed', ended_at = @now, updated_at = @now,
				reason = CASE cur.state WHEN 'resuming' THEN 'resume_failed' ELSE 'pause_failed' END,
				error = cur.state || ' deadline passed' || coalesce(': ' || s.error, ''),
				lease_owner = CASE WHEN s.lease_expires_at >= @now THEN s.lease_owner END,
				lease_expires_at = CASE WHEN s.lease_expires_at >= @now AND s.lease_owner IS NOT NULL THEN s.lease_expires_at END
			FROM cur WHERE s.id = cur.id
			RETURNING s.*, cur.state AS from_state
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, from_state, 'failed', reason, 'janitor', from_state || ' deadline passed' FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`

// failOverdueTransitions is FailOverdue's part for pauses and resumes.
func (s *Store) failOverdueTransitions(ctx context.Context, now time.Time, limit int) ([]domain.Sandbox, error) {
	rows, err := query(ctx, s.work, failOverdueTransitionsSQL, namedArgs{"now": now, "limit": limit})
	if err != nil {
		return nil, wrap("fail overdue transitions", err)
	}
	failed, err := collectSandboxes(rows)
	if err != nil {
		return nil, wrap("fail overdue transitions", err)
	}
	return failed, nil
}
