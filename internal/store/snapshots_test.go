package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

func (b bundle) requestSnapshot(t *testing.T, source string, mutate ...func(*domain.SnapshotRequest)) domain.Snapshot {
	t.Helper()
	r := domain.SnapshotRequest{Tenant: "acme", SourceID: source, Timeout: time.Minute}
	for _, m := range mutate {
		m(&r)
	}
	sn, err := b.st.RequestSnapshot(b.ctx, r)
	if err != nil {
		t.Fatalf("RequestSnapshot: %v", err)
	}
	return sn
}

func (b bundle) claimSnapshots(t *testing.T, worker string) []store.Claim {
	t.Helper()
	claims, err := b.st.ClaimSnapshots(b.ctx, "sim", "", worker, 10, 10*time.Second)
	if err != nil {
		t.Fatalf("ClaimSnapshots: %v", err)
	}
	return claims
}

// snapshotEvents counts the source sandbox's events with each snapshot
// reason.
func (b bundle) snapshotEvents(t *testing.T, id string) map[domain.Reason]int {
	t.Helper()
	evs, err := b.st.SandboxEvents(b.ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[domain.Reason]int{}
	for _, ev := range evs {
		if ev.From == ev.To && ev.From != "" {
			out[ev.Reason]++
		}
	}
	return out
}

// TestSnapshotEdgesAreFenced: every write about a snapshot is fenced on
// its claim's epoch and idempotent: a stale or repeated write changes
// nothing and writes no event; the claim leases the source sandbox, so a
// second claim, or a release of the ended sandbox, waits for it.
func TestSnapshotEdgesAreFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	sn := b.requestSnapshot(t, sb.ID)
	if sn.State != domain.SnapshotCreating || sn.Kind != domain.SnapshotManual || sn.SourceID != sb.ID {
		t.Fatalf("requested snapshot = %+v", sn)
	}
	first := b.claimSnapshots(t, "w1")
	if len(first) != 1 || first[0].Snapshot.ID != sn.ID || !b.leased(t, sb.ID) {
		t.Fatalf("claim = %+v, leased %v", first, b.leased(t, sb.ID))
	}
	if again := b.claimSnapshots(t, "w2"); len(again) != 0 {
		t.Fatalf("a second claim took %d snapshots while the first holds the lease", len(again))
	}
	// The lease lapses: another executor claims it at a new epoch, and the
	// first one's writes are fenced.
	b.clock.Advance(11 * time.Second)
	second := b.claimSnapshots(t, "w2")
	if len(second) != 1 || second[0].Snapshot.Epoch <= first[0].Snapshot.Epoch {
		t.Fatalf("reclaim = %+v", second)
	}
	stale := first[0].Snapshot.Epoch
	if _, err := b.st.FinishSnapshot(b.ctx, sn.ID, stale, 10, true); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("stale finish: %v", err)
	}
	if _, err := b.st.FailSnapshot(b.ctx, sn.ID, stale, domain.ActorExecutor, "x", true); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("stale fail: %v", err)
	}
	if err := b.st.HandBackSnapshot(b.ctx, sn.ID, stale, "x"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("stale hand back: %v", err)
	}
	if !b.leased(t, sb.ID) {
		t.Fatal("a stale write ended the current claim's lease")
	}
	epoch := second[0].Snapshot.Epoch
	got, err := b.st.FinishSnapshot(b.ctx, sn.ID, epoch, 4096, true)
	if err != nil || got.State != domain.SnapshotReady || got.Size != 4096 || got.ReadyAt == nil {
		t.Fatalf("finish = %+v, %v", got, err)
	}
	if b.leased(t, sb.ID) {
		t.Error("the sandbox is still leased after its snapshot settled")
	}
	// Idempotent: again, or failing it now, changes nothing.
	if _, err := b.st.FinishSnapshot(b.ctx, sn.ID, epoch, 1, true); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("second finish: %v", err)
	}
	if _, err := b.st.FailSnapshot(b.ctx, sn.ID, epoch, domain.ActorExecutor, "late", true); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("fail after ready: %v", err)
	}
	if ev := b.snapshotEvents(t, sb.ID); ev[domain.ReasonSnapshotRequested] != 1 || ev[domain.ReasonSnapshotReady] != 1 || ev[domain.ReasonSnapshotFailed] != 0 {
		t.Errorf("events = %v", ev)
	}
	// Lost, once; deleted, once.
	if _, err := b.st.MarkSnapshotLost(b.ctx, sn.ID, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.MarkSnapshotLost(b.ctx, sn.ID, "gone"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("second lost: %v", err)
	}
	if _, deleted, err := b.st.DeleteSnapshot(b.ctx, "acme", sn.ID); err != nil || !deleted {
		t.Errorf("delete: %v %v", deleted, err)
	}
	if cur, deleted, err := b.st.DeleteSnapshot(b.ctx, "acme", sn.ID); err != nil || deleted || cur.State != domain.SnapshotDeleted {
		t.Errorf("second delete: %+v %v %v", cur, deleted, err)
	}
	if _, _, err := b.st.DeleteSnapshot(b.ctx, "other", sn.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's delete: %v", err)
	}
	if ev := b.snapshotEvents(t, sb.ID); ev[domain.ReasonSnapshotLost] != 1 || ev[domain.ReasonSnapshotDeleted] != 1 {
		t.Errorf("events = %v", ev)
	}
}

// TestSnapshotLeaseHoldsTheRelease: a sandbox ended while its snapshot is
// being taken keeps the snapshot's lease, so no release claims it until
// the snapshot settles; a snapshot of an ended sandbox is failed by the
// release (FailSnapshotsOf), fenced on the release's epoch.
func TestSnapshotLeaseHoldsTheRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	sn := b.requestSnapshot(t, sb.ID)
	pending := b.requestSnapshot(t, sb.ID)
	claims := b.claimSnapshots(t, "w1")
	if len(claims) != 1 || claims[0].Snapshot.ID != sn.ID {
		t.Fatalf("one snapshot per sandbox at a time: %+v", claims)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	rel, err := b.st.ClaimReleases(b.ctx, "sim", "", "r", 10, 10*time.Second, store.Share{})
	if err != nil || len(rel) != 0 {
		t.Fatalf("a release claimed the sandbox while its snapshot runs: %v %v", rel, err)
	}
	if _, err := b.st.RenewLease(b.ctx, sb.ID, claims[0].Snapshot.Epoch, "w1", 10*time.Second); err != nil {
		t.Fatalf("the snapshot's lease did not survive the end: %v", err)
	}
	if _, err := b.st.FailSnapshot(b.ctx, sn.ID, claims[0].Snapshot.Epoch, domain.ActorExecutor, "ended", true); err != nil {
		t.Fatal(err)
	}
	rel, err = b.st.ClaimReleases(b.ctx, "sim", "", "r", 10, 10*time.Second, store.Share{})
	if err != nil || len(rel) != 1 {
		t.Fatalf("release after the snapshot settled: %v %v", rel, err)
	}
	if n, err := b.st.FailSnapshotsOf(b.ctx, sb.ID, rel[0].Sandbox.Epoch-1); err != nil || n != 0 {
		t.Errorf("FailSnapshotsOf at a stale epoch: %d %v", n, err)
	}
	if n, err := b.st.FailSnapshotsOf(b.ctx, sb.ID, rel[0].Sandbox.Epoch); err != nil || n != 1 {
		t.Errorf("FailSnapshotsOf: %d %v", n, err)
	}
	if got, _ := b.st.GetSnapshot(b.ctx, "acme", pending.ID); got.State != domain.SnapshotFailed {
		t.Errorf("pending snapshot of a released sandbox: %s", got.State)
	}
	// Nothing more of an ended sandbox may be snapshotted.
	_, err = b.st.RequestSnapshot(b.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: sb.ID, Timeout: time.Minute})
	if domain.ConflictState(err) != domain.StateTerminated {
		t.Errorf("snapshot of a terminated sandbox: %v", err)
	}
}

// TestSnapshotQuota: the tenant's count and bytes caps, the tenant's own
// override, and the exit snapshot that the quota records failed.
func TestSnapshotQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	capped := func(n int, bytes int64) func(*domain.SnapshotRequest) {
		return func(r *domain.SnapshotRequest) { r.MaxCount, r.MaxBytes = n, bytes }
	}
	b.requestSnapshot(t, sb.ID, capped(2, 0))
	b.requestSnapshot(t, sb.ID, capped(2, 0))
	_, err := b.st.RequestSnapshot(b.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: sb.ID, Timeout: time.Minute, MaxCount: 2})
	if domain.ErrorCode(err) != domain.CodeQuotaExceeded {
		t.Fatalf("third snapshot under a cap of 2: %v", err)
	}
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE tenants SET max_snapshots = 5 WHERE name = 'acme'`); err != nil {
		t.Fatal(err)
	}
	b.requestSnapshot(t, sb.ID, capped(2, 0))
	// An exit snapshot over the cap is recorded failed, with why.
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE tenants SET max_snapshots = 3 WHERE name = 'acme'`); err != nil {
		t.Fatal(err)
	}
	ended := b.ready(t, func(p *domain.CreateParams) { p.OnEnd = domain.OnEndSnapshot })
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", ended.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	exit, err := b.st.EnsureExitSnapshot(b.ctx, ended, ended.Epoch, time.Minute, 0, 0, 0)
	if err != nil || exit.State != domain.SnapshotFailed || exit.Kind != domain.SnapshotExit {
		t.Fatalf("exit snapshot over the quota = %+v, %v", exit, err)
	}
	// One per sandbox: asked again, it is the same one.
	again, err := b.st.EnsureExitSnapshot(b.ctx, ended, ended.Epoch+1, time.Minute, 0, 0, 0)
	if err != nil || again.ID != exit.ID {
		t.Errorf("second EnsureExitSnapshot = %+v, %v", again, err)
	}
}

// TestSnapshotTransitionTableMatchesDatabase: the trigger on snapshots
// allows exactly the edges CanSnapshotTransition does.
func TestSnapshotTransitionTableMatchesDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	for _, from := range domain.SnapshotStates {
		for _, to := range domain.SnapshotStates {
			if from == to {
				continue
			}
			t.Run(fmt.Sprintf("%s>%s", from, to), func(t *testing.T) {
				sn := b.requestSnapshot(t, sb.ID)
				tx, err := b.st.Pool().Begin(b.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(b.ctx) }()
				if _, err := tx.Exec(b.ctx, `ALTER TABLE snapshots DISABLE TRIGGER USER`); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(b.ctx, `UPDATE snapshots SET state = $2, ready_at = now(),
					deleted_at = CASE WHEN $2 = 'deleted' THEN now() END WHERE id = $1`, sn.ID, string(from)); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(b.ctx, `ALTER TABLE snapshots ENABLE TRIGGER USER`); err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(b.ctx, `UPDATE snapshots SET state = $2,
					deleted_at = CASE WHEN $2 = 'deleted' THEN now() END WHERE id = $1`, sn.ID, string(to))
				if allowed := domain.CanSnapshotTransition(from, to); allowed != (err == nil) {
					t.Errorf("%s -> %s: allowed %v, database: %v", from, to, allowed, err)
				}
			})
		}
	}
}

// recorder is an Announcer that keeps what it was told.
type recorder struct {
	mu      sync.Mutex
	changes []domain.Change
}

func (r *recorder) Announce(changes ...domain.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, changes...)
}

// snapshotNotes counts the SnapshotChanged announcements of id.
func (r *recorder) snapshotNotes(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.changes {
		if c.ID == id && c.State == domain.SnapshotChanged {
			n++
		}
	}
	return n
}

// TestSnapshotSettlesAreAnnounced: a snapshot that leaves creating, by
// whichever way, is announced under its own id, so that a ?wait= on it
// answers at once; asking for one and a fenced write announce nothing.
func TestSnapshotSettlesAreAnnounced(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	b := setup(t, store.WithAnnouncer(rec))
	if domain.SnapshotChanged.Valid() {
		t.Fatal("SnapshotChanged is a valid sandbox state")
	}
	sb := b.ready(t)

	finished := b.requestSnapshot(t, sb.ID)
	if n := rec.snapshotNotes(finished.ID); n != 0 {
		t.Errorf("a requested snapshot was announced %d times", n)
	}
	c := b.claimSnapshots(t, "w1")
	if len(c) != 1 {
		t.Fatalf("claimed %d snapshots", len(c))
	}
	if _, err := b.st.FinishSnapshot(b.ctx, finished.ID, c[0].Snapshot.Epoch-1, 1, true); !errors.Is(err, domain.ErrFenced) {
		t.Fatalf("stale finish: %v", err)
	}
	if n := rec.snapshotNotes(finished.ID); n != 0 {
		t.Errorf("a fenced finish was announced %d times", n)
	}
	if _, err := b.st.FinishSnapshot(b.ctx, finished.ID, c[0].Snapshot.Epoch, 1, true); err != nil {
		t.Fatal(err)
	}

	failed := b.requestSnapshot(t, sb.ID)
	c = b.claimSnapshots(t, "w1")
	if len(c) != 1 {
		t.Fatalf("claimed %d snapshots", len(c))
	}
	if _, err := b.st.FailSnapshot(b.ctx, failed.ID, c[0].Snapshot.Epoch, domain.ActorExecutor, "disk full", true); err != nil {
		t.Fatal(err)
	}

	deleted := b.requestSnapshot(t, sb.ID)
	if _, _, err := b.st.DeleteSnapshot(b.ctx, "acme", deleted.ID); err != nil {
		t.Fatal(err)
	}

	for what, id := range map[string]string{"finished": finished.ID, "failed": failed.ID, "deleted": deleted.ID} {
		if n := rec.snapshotNotes(id); n != 1 {
			t.Errorf("the %s snapshot was announced %d times, want 1", what, n)
		}
	}
}

// all is every change announced so far.
func (r *recorder) all() []domain.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}
