package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// snapshotStore is what the janitor needs of the registry for snapshots.
type snapshotStore interface {
	FailOverdueSnapshots(ctx context.Context) ([]domain.Snapshot, error)
	ExpireSnapshots(ctx context.Context) ([]domain.Snapshot, error)
	SnapshotsByID(ctx context.Context, ids []string) (map[string]domain.Snapshot, error)
	ReadySnapshots(ctx context.Context, provider, node string, before time.Time) ([]domain.Snapshot, error)
	MarkSnapshotLost(ctx context.Context, id, cause string) (domain.Snapshot, error)
}

// sweepSnapshots fails the creating snapshots that can no longer be taken
// and deletes those past their retention (their data goes at the next
// reconciliation). Each is one statement, rows skipped if another replica
// holds them.
func (j *Janitor) sweepSnapshots(ctx context.Context, rep *Report) error {
	failed, err := j.store.FailOverdueSnapshots(ctx)
	if err != nil {
		return err
	}
	for _, sn := range failed {
		j.log.Info("janitor: snapshot failed", "snapshot", sn.ID, "sandbox", sn.SourceID, "error", sn.Error)
	}
	rep.SnapshotsFailed += len(failed)
	j.actions.WithLabelValues("snapshot_failed").Add(float64(len(failed)))
	expired, err := j.store.ExpireSnapshots(ctx)
	if err != nil {
		return err
	}
	for _, sn := range expired {
		j.log.Info("janitor: snapshot expired", "snapshot", sn.ID, "sandbox", sn.SourceID)
	}
	rep.SnapshotsExpired += len(expired)
	j.actions.WithLabelValues("snapshot_expired").Add(float64(len(expired)))
	return nil
}

// snapshotOrphan is a snapshot a provider holds that the registry does not
// want, and why.
type snapshotOrphan struct {
	id, tenant, why string
}

// planSnapshotOrphans decides which of a provider's snapshots, listed at
// listedAt, to remove: those the registry has no record of, and those it
// records deleted, failed or lost, once grace has passed since the
// snapshot was made or its record last changed (a snapshot being taken
// is recorded after its data appears). A creating or ready one is kept.
// It does no I/O.
func planSnapshotOrphans(held []domain.SnapshotInfo, records map[string]domain.Snapshot, listedAt time.Time, grace time.Duration) []snapshotOrphan {
	var out []snapshotOrphan
	for _, info := range held {
		rec, known := records[info.ID]
		switch {
		case !known:
			if !info.CreatedAt.IsZero() && listedAt.Sub(info.CreatedAt) < grace {
				continue
			}
			out = append(out, snapshotOrphan{id: info.ID, why: "no snapshot of this id is recorded"})
		case rec.State == domain.SnapshotCreating || rec.State == domain.SnapshotReady:
		case listedAt.Sub(rec.UpdatedAt) >= grace:
			out = append(out, snapshotOrphan{id: info.ID, tenant: rec.Tenant, why: "the snapshot is " + string(rec.State)})
		}
	}
	return out
}

// snapshotGone reports whether a provider's listing lacks the complete
// snapshot id.
func snapshotGone(held []domain.SnapshotInfo, id string) bool {
	for _, info := range held {
		if info.ID == id && !info.Partial {
			return false
		}
	}
	return true
}

// reconcileSnapshots compares the provider's snapshots with the catalog,
// both ways: orphans are removed, and ready snapshots (ready since before
// the listing minus the grace) whose data the listing lacks are marked
// lost. Each is recorded in reconcile_events, sandbox_id holding the
// snapshot's id.
func (j *Janitor) reconcileSnapshots(ctx context.Context, p domain.Provider, snap domain.Snapshotter, node string, rep *Report) error {
	listedAt := j.store.Now()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	held, err := callProvider(j.log, p.Name(), "list_snapshots", j.panicked, func() ([]domain.SnapshotInfo, error) {
		return snap.ListSnapshots(lctx)
	})
	cancel()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	ids := make([]string, len(held))
	for i, info := range held {
		ids[i] = info.ID
	}
	records, err := j.store.SnapshotsByID(ctx, ids)
	if err != nil {
		return err
	}
	for _, o := range planSnapshotOrphans(held, records, listedAt, j.cfg.OrphanGrace) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := callProvider(j.log, p.Name(), "delete_snapshot", j.panicked, func() (struct{}, error) {
			return struct{}{}, snap.DeleteSnapshot(dctx, o.id)
		})
		cancel()
		action, msg := "snapshot_orphan_deleted", o.why
		if err != nil {
			action, msg = "snapshot_orphan_delete_failed", o.why+": "+err.Error()
			j.log.Warn("janitor: orphaned snapshot not removed; retrying next round", "provider", p.Name(), "snapshot", o.id, "err", err)
		} else {
			rep.SnapshotOrphans++
			j.log.Info("janitor: orphaned snapshot removed", "provider", p.Name(), "snapshot", o.id, "why", o.why)
		}
		j.actions.WithLabelValues(action).Inc()
		if err := j.store.RecordReconcile(ctx, p.Name(), o.id, o.tenant, action, msg); err != nil {
			return err
		}
	}
	ready, err := j.store.ReadySnapshots(ctx, p.Name(), node, listedAt.Add(-j.cfg.OrphanGrace))
	if err != nil {
		return err
	}
	for _, sn := range ready {
		if !snapshotGone(held, sn.ID) {
			continue
		}
		const msg = "the provider no longer has this snapshot's data"
		if _, err := j.store.MarkSnapshotLost(ctx, sn.ID, msg); err != nil {
			continue // deleted meanwhile (fenced), or retried next round
		}
		rep.SnapshotsLost++
		j.actions.WithLabelValues("snapshot_lost").Inc()
		j.log.Warn("janitor: snapshot lost", "provider", p.Name(), "snapshot", sn.ID, "tenant", sn.Tenant)
		if err := j.store.RecordReconcile(ctx, p.Name(), sn.ID, sn.Tenant, "snapshot_lost", msg); err != nil {
			return err
		}
	}
	return nil
}
