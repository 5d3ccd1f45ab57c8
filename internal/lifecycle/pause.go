package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// Pauses and resumes. A pausing or resuming sandbox is claimed like a
// create (ClaimTransitions), the provider's Pauser is called under the
// claim's lease, and the outcome is recorded fenced on its epoch.

// transitionOutcome is what became of one pause or resume call.
type transitionOutcome int

const (
	// transitionDone: the provider paused (resumed) the sandbox.
	transitionDone transitionOutcome = iota
	// transitionEnded: the sandbox ended meanwhile; release it if the
	// claim is still ours.
	transitionEnded
	// transitionLeaseLost: another executor owns the sandbox now.
	transitionLeaseLost
	// transitionHandBack: this executor is stopping; hand it back.
	transitionHandBack
	// transitionRetry: a transient failure; try again at retryAt.
	transitionRetry
	// transitionRevert: the provider refused; the sandbox is as it was.
	transitionRevert
	// transitionFail: the deadline passed and the outcome is unknown: the
	// sandbox fails and is released.
	transitionFail
)

// transitionResult is a call's outcome, with what recording it needs.
type transitionResult struct {
	outcome transitionOutcome
	err     error
	retryAt time.Time
	message string
}

// transition runs one claimed pause or resume to its end.
func (e *Executor) transition(ctx context.Context, p domain.Provider, c store.Claim) {
	sb := c.Sandbox
	log := lazyWith(e.log, slog.String("sandbox", sb.ID), slog.String("provider", p.Name()),
		slog.Int64("epoch", sb.Epoch), slog.Any("state", sb.State))
	e.recordTransition(ctx, p, sb, log, e.runTransition(ctx, p, sb, log))
}

// op names the provider call a transitioning state makes.
func op(s domain.State) string {
	if s == domain.StateResuming {
		return "resume"
	}
	return "pause"
}

// runTransition makes the provider call for a claimed pausing or resuming
// sandbox, renewing the lease meanwhile and cancelling the call if the
// sandbox ends, the lease is lost or the pause deadline passes.
func (e *Executor) runTransition(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger) transitionResult {
	name := op(sb.State)
	pauser, ok := p.(domain.Pauser)
	if !ok {
		return transitionResult{outcome: transitionRevert, message: fmt.Sprintf("provider %s cannot %s sandboxes", p.Name(), name)}
	}
	if sb.PauseDeadline == nil || !e.store.Now().Before(*sb.PauseDeadline) {
		return transitionResult{outcome: transitionFail, message: name + " deadline passed before an attempt could complete"}
	}
	deadline := *sb.PauseDeadline
	call := pauser.Pause
	if sb.State == domain.StateResuming {
		call = pauser.Resume
	}
	_, c := leasedCall(ctx, e, p, sb, log, name, deadline, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, call(ctx, sb.ID)
	})
	c.retryAt, c.deadline = e.store.Now().Add(e.cfg.RetryBackoff), deadline
	return classifyTransition(name, c)
}

// transitionOutcomes is each verdict's pause or resume outcome.
var transitionOutcomes = [...]transitionOutcome{
	verdictDone: transitionDone, verdictEnded: transitionEnded, verdictLeaseLost: transitionLeaseLost,
	verdictHandBack: transitionHandBack, verdictRetry: transitionRetry, verdictRefused: transitionRevert, verdictDeadline: transitionFail,
}

// classifyTransition decides what became of a pause or resume call (name
// says which; c has no attempt limit). It does no I/O.
func classifyTransition(name string, c createCall) transitionResult {
	j := judgeCall(name, c)
	return transitionResult{outcome: transitionOutcomes[j.verdict], err: c.err, retryAt: j.retryAt, message: j.message}
}

// recordTransition writes a pause or resume call's outcome, fenced on sb's
// epoch, even while the executor stops.
func (e *Executor) recordTransition(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger, r transitionResult) {
	wctx, cancel := detached(ctx)
	defer cancel()
	var err error
	switch r.outcome {
	case transitionDone:
		if _, err = e.store.FinishTransition(wctx, sb.ID, sb.Epoch, sb.State); err == nil {
			log.Info("executor: " + op(sb.State) + " done")
		}
	case transitionEnded:
		log.Info("executor: "+op(sb.State)+" cancelled: sandbox ended", "err", r.err)
		e.releaseIfOurs(ctx, p, sb, log)
		return
	case transitionLeaseLost:
		log.Warn("executor: "+op(sb.State)+" abandoned: lease lost", "err", r.err)
		return
	case transitionHandBack:
		err = e.store.UnclaimTransition(wctx, sb.ID, sb.Epoch, e.store.Now(), "")
	case transitionRetry:
		log.Warn("executor: "+op(sb.State)+" failed; retrying", "err", r.err, "retry_at", r.retryAt)
		err = e.store.UnclaimTransition(wctx, sb.ID, sb.Epoch, r.retryAt, r.err.Error())
	case transitionRevert:
		log.Warn("executor: "+op(sb.State)+" refused", "err", r.message)
		_, err = e.store.RevertTransition(wctx, sb.ID, sb.Epoch, sb.State, r.message)
	case transitionFail:
		if _, err = e.store.FailTransition(wctx, sb.ID, sb.Epoch, sb.State, domain.ActorExecutor, r.message); err == nil {
			log.Warn("executor: sandbox failed", "error", r.message)
			e.destroy(ctx, p, sb, log)
			return
		}
	}
	switch {
	case errors.Is(err, domain.ErrFenced) && r.outcome != transitionHandBack && r.outcome != transitionRetry:
		// It ended (or was reclaimed) meanwhile.
		e.releaseIfOurs(ctx, p, sb, log)
	case err != nil && !errors.Is(err, domain.ErrFenced):
		log.Error("executor: recording the "+op(sb.State)+" failed; the lease will lapse and it is retried", "err", err)
	}
}
