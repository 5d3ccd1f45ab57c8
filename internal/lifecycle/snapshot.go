package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// Snapshots. A manual snapshot is claimed (ClaimSnapshots) by leasing its
// source sandbox, as a create claim leases the sandbox it creates: no
// release can destroy the sandbox while the copy runs, since a release
// claim needs it unleased. The provider's Snapshot is called under that
// lease, renewed meanwhile, and cancelled if the sandbox ends, the lease
// is lost or the snapshot's deadline passes; the outcome is recorded
// fenced on the claim's epoch. An exit snapshot is taken by the release
// worker itself (exitSnapshot), before its Destroy.

// snapshotOutcome is what recording a snapshot call does.
type snapshotOutcome int

const (
	snapshotDone      snapshotOutcome = iota // ready
	snapshotFailed                           // failed, with the message
	snapshotLeaseLost                        // another executor holds the sandbox: touch nothing
	snapshotHandBack                         // stopping, or a retryable error: claimable again
)

// snapshotOutcomes is each verdict's snapshot outcome. A snapshot whose
// sandbox ended meanwhile fails: its sandbox is on its way to a release.
var snapshotOutcomes = [...]snapshotOutcome{
	verdictDone: snapshotDone, verdictEnded: snapshotFailed, verdictLeaseLost: snapshotLeaseLost,
	verdictHandBack: snapshotHandBack, verdictRetry: snapshotHandBack, verdictRefused: snapshotFailed, verdictDeadline: snapshotFailed,
}

// classifySnapshot decides what became of a snapshot call. It does no I/O.
func classifySnapshot(c createCall) (snapshotOutcome, string) {
	j := judgeCall("snapshot", c)
	msg := j.message
	if j.verdict == verdictEnded {
		msg = "its sandbox ended while the snapshot was being taken"
	}
	return snapshotOutcomes[j.verdict], msg
}

// snapshot runs one claimed manual snapshot to its end.
func (e *Executor) snapshot(ctx context.Context, p domain.Provider, c store.Claim) {
	sn, sb := c.Snapshot, c.Sandbox
	log := e.log.With("snapshot", sn.ID, "sandbox", sb.ID, "provider", p.Name(), "epoch", sb.Epoch)
	snap, ok := p.(domain.Snapshotter)
	if !ok { // a provider without the capability is never claimed for; be safe
		e.recordSnapshot(ctx, snap, sn, log, snapshotFailed, 0, nil, "provider "+p.Name()+" cannot snapshot sandboxes")
		return
	}
	take := snap.Snapshot
	if sn.Memory {
		ms, ok := p.(domain.MemorySnapshotter)
		if !ok { // refused at the request; be safe
			e.recordSnapshot(ctx, snap, sn, log, snapshotFailed, 0, nil, "provider "+p.Name()+" cannot take memory snapshots")
			return
		}
		take = ms.SnapshotMemory
	}
	size, call := leasedCall(ctx, e, p, sb, log, "snapshot", sn.Deadline, func(ctx context.Context) (int64, error) {
		return take(ctx, sb.ID, sn.ID)
	})
	call.retryAt, call.deadline = e.store.Now().Add(e.cfg.RetryBackoff), sn.Deadline
	outcome, msg := classifySnapshot(call)
	e.recordSnapshot(ctx, snap, sn, log, outcome, size, call.err, msg)
	// The sandbox's lease ended: a release (it ended meanwhile) may be
	// claimable now. Other replicas' polls find it.
	select {
	case e.wakeReleases <- struct{}{}:
	default:
	}
}

// recordSnapshot writes a manual snapshot call's outcome, fenced on its
// epoch, and removes at the provider what a snapshot that will not be
// ready left.
func (e *Executor) recordSnapshot(ctx context.Context, snap domain.Snapshotter, sn domain.Snapshot, log *slog.Logger,
	outcome snapshotOutcome, size int64, callErr error, msg string) {
	wctx, cancel := detached(ctx)
	defer cancel()
	var err error
	switch outcome {
	case snapshotDone:
		if _, err = e.store.FinishSnapshot(wctx, sn.ID, sn.Epoch, size, true); err == nil {
			log.Info("executor: snapshot ready", "bytes", size)
			return
		}
		if errors.Is(err, domain.ErrFenced) {
			// Deleted while it was being taken: its data goes too.
			log.Info("executor: snapshot taken after it was deleted; removing it")
			e.deleteSnapshotData(wctx, snap, sn.ID, log)
			return
		}
	case snapshotFailed:
		if _, err = e.store.FailSnapshot(wctx, sn.ID, sn.Epoch, domain.ActorExecutor, msg, true); err == nil || errors.Is(err, domain.ErrFenced) {
			log.Warn("executor: snapshot failed", "error", msg)
			if snap != nil {
				e.deleteSnapshotData(wctx, snap, sn.ID, log)
			}
			return
		}
	case snapshotLeaseLost:
		log.Warn("executor: snapshot abandoned: lease lost", "err", callErr)
		return
	case snapshotHandBack:
		last := ""
		if callErr != nil && ctx.Err() == nil {
			last = callErr.Error()
			log.Warn("executor: snapshot failed; retrying", "err", callErr)
		}
		if err = e.store.HandBackSnapshot(wctx, sn.ID, sn.Epoch, last); errors.Is(err, domain.ErrFenced) {
			return
		}
	}
	if err != nil {
		log.Error("executor: recording the snapshot failed; the lease will lapse and it is retried", "err", err)
	}
}

// deleteSnapshotData removes a snapshot's data at the provider; a failure
// leaves it to the janitor's reconciliation.
func (e *Executor) deleteSnapshotData(ctx context.Context, snap domain.Snapshotter, id string, log *slog.Logger) {
	if err := snap.DeleteSnapshot(ctx, id); err != nil {
		log.Warn("executor: removing snapshot data failed; reconciliation will", "err", err)
	}
}

// takesExitSnapshot reports whether the release of sb takes an exit
// snapshot first: it was created with on_end "snapshot", held a resource
// (terminated) and ended by its owner's lease, its TTL or a delete.
func takesExitSnapshot(p domain.Provider, sb domain.Sandbox) bool {
	return sb.OnEnd == domain.OnEndSnapshot && sb.State == domain.StateTerminated &&
		slices.Contains(domain.ExitSnapshotReasons, sb.Reason) && domain.CanSnapshot(p)
}

// exitSnapshot takes the exit snapshot of the sandbox whose release sb is
// claimed (at sb.Epoch), bounded by ExitSnapshotTimeout from when it was
// first asked for; one that cannot be taken is recorded failed and the
// release goes on. It returns false when the release must not go on now:
// the executor is stopping, or the registry could not record the
// snapshot (the release is then tried again).
func (e *Executor) exitSnapshot(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger) bool {
	snap := p.(domain.Snapshotter)
	wctx, cancel := detached(ctx)
	sn, err := e.store.EnsureExitSnapshot(wctx, sb, sb.Epoch, e.cfg.ExitSnapshotTimeout, e.cfg.SnapshotRetention,
		e.cfg.SnapshotMaxCount, e.cfg.SnapshotMaxBytes)
	cancel()
	if err != nil {
		log.Error("executor: recording the exit snapshot failed; the release is retried", "err", err)
		return false
	}
	if sn.State != domain.SnapshotCreating {
		return true // settled by an earlier release worker (or refused by the quota)
	}
	log = log.With("snapshot", sn.ID)
	fail := func(msg string) bool {
		wctx, cancel := detached(ctx)
		defer cancel()
		if _, err := e.store.FailSnapshot(wctx, sn.ID, sb.Epoch, domain.ActorExecutor, msg, false); err != nil && !errors.Is(err, domain.ErrFenced) {
			log.Error("executor: recording the exit snapshot's failure failed; the release is retried", "err", err)
			return false
		}
		log.Warn("executor: exit snapshot failed; releasing", "error", msg)
		e.deleteSnapshotData(wctx, snap, sn.ID, log)
		return true
	}
	if !e.store.Now().Before(sn.Deadline) {
		return fail("exit snapshot not taken by its deadline (EXIT_SNAPSHOT_TIMEOUT)")
	}
	sctx, scancel := context.WithDeadline(ctx, sn.Deadline)
	start := time.Now()
	size, err := callProvider(log, p.Name(), "snapshot", e.panicked(p.Name(), "snapshot"), func() (int64, error) {
		return snap.Snapshot(sctx, sb.ID, sn.ID)
	})
	deadlinePassed := errors.Is(sctx.Err(), context.DeadlineExceeded)
	scancel()
	e.observe(p.Name(), "snapshot", start, err)
	switch {
	case err == nil:
		wctx, cancel := detached(ctx)
		defer cancel()
		if _, err := e.store.FinishSnapshot(wctx, sn.ID, sb.Epoch, size, false); err != nil {
			if errors.Is(err, domain.ErrFenced) {
				e.deleteSnapshotData(wctx, snap, sn.ID, log) // deleted meanwhile
				return true
			}
			log.Error("executor: recording the exit snapshot failed; the release is retried", "err", err)
			return false
		}
		log.Info("executor: exit snapshot ready", "bytes", size)
		return true
	case ctx.Err() != nil && !deadlinePassed:
		return false // stopping: the next release worker takes it again
	case deadlinePassed:
		return fail("exit snapshot deadline passed (EXIT_SNAPSHOT_TIMEOUT): " + err.Error())
	}
	return fail(err.Error())
}

// failPendingSnapshots fails the manual snapshots of the sandbox whose
// release sb is claimed that are still to be taken: its release destroys
// what they would copy. (No snapshot claim can take them meanwhile: the
// release holds the sandbox's lease.)
func (e *Executor) failPendingSnapshots(ctx context.Context, sb domain.Sandbox, log *slog.Logger) {
	wctx, cancel := detached(ctx)
	defer cancel()
	if n, err := e.store.FailSnapshotsOf(wctx, sb.ID, sb.Epoch); err != nil {
		log.Warn("executor: failing the sandbox's pending snapshots failed; the janitor will", "err", err)
	} else if n > 0 {
		log.Info("executor: pending snapshots failed: the sandbox ended", "count", n)
	}
}
