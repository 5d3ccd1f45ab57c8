package lifecycle_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
)

// snapshot asks for a snapshot of the sandbox, as the API does.
func (e *env) snapshot(id string, timeout time.Duration) domain.Snapshot {
	e.t.Helper()
	sn, err := e.st.RequestSnapshot(e.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: id, Timeout: timeout})
	if err != nil {
		e.t.Fatalf("RequestSnapshot: %v", err)
	}
	return sn
}

// waitSnapshot polls the snapshot until cond holds.
func (e *env) waitSnapshot(id, what string, cond func(domain.Snapshot) bool) domain.Snapshot {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sn, err := e.st.GetSnapshot(e.ctx, "acme", id)
		if err != nil {
			e.t.Fatalf("read snapshot: %v", err)
		}
		if cond(sn) {
			return sn
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("snapshot %s never became %s; last: state=%s error=%q", id, what, sn.State, sn.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func snapState(s domain.SnapshotState) func(domain.Snapshot) bool {
	return func(sn domain.Snapshot) bool { return sn.State == s }
}

// reasons lists the reasons of the sandbox's events.
func (e *env) reasons(id string) []string {
	e.t.Helper()
	evs, err := e.st.SandboxEvents(e.ctx, id, 0, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Reason))
	}
	return out
}

// exitSnapshotOf returns the exit snapshot of the sandbox, found false if it
// has none.
func (e *env) exitSnapshotOf(id string) (domain.Snapshot, bool) {
	e.t.Helper()
	sns, _, err := e.st.ListSnapshots(e.ctx, domain.SnapshotFilter{Tenant: "acme", SourceID: id, Limit: 10})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, sn := range sns {
		if sn.Kind == domain.SnapshotExit {
			return sn, true
		}
	}
	return domain.Snapshot{}, false
}

// TestSnapshotTakenAndRestored: a snapshot of a ready sandbox becomes ready
// at the provider, its changes are events in the sandbox's history, and a
// sandbox created from it starts from it.
func TestSnapshotTakenAndRestored(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"snapshot_bytes":12345}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	sn := e.snapshot(sb.ID, time.Minute)
	got := e.waitSnapshot(sn.ID, "ready", snapState(domain.SnapshotReady))
	if got.Size != 12345 || !e.sim.HasSnapshot(sn.ID) || got.Attempts != 1 {
		t.Errorf("ready snapshot: size %d, held %v, attempts %d", got.Size, e.sim.HasSnapshot(sn.ID), got.Attempts)
	}
	if r := e.reasons(sb.ID); !slices.Contains(r, "snapshot_requested") || !slices.Contains(r, "snapshot_ready") {
		t.Errorf("reasons = %v", r)
	}
	// The sandbox runs on, unleased: it can be snapshotted again and ended.
	if cur := e.waitFor(sb.ID, "unleased", isState(domain.StateReady)); cur.Epoch < 2 {
		t.Errorf("epoch %d: the claim did not bump it", cur.Epoch)
	}
	from := e.create("", func(p *domain.CreateParams) { p.FromSnapshot = sn.ID })
	e.waitFor(from.ID, "ready", isState(domain.StateReady))
	if e.sim.FromSnapshot(from.ID) != sn.ID {
		t.Errorf("the new sandbox started from %q, want %s", e.sim.FromSnapshot(from.ID), sn.ID)
	}
}

// TestSnapshotOfPausedSandbox: a paused sandbox can be snapshotted and
// stays paused.
func TestSnapshotOfPausedSandbox(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create("")
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	e.pause(sb.ID, time.Minute)
	e.waitFor(sb.ID, "paused", isState(domain.StatePaused))
	sn := e.snapshot(sb.ID, time.Minute)
	e.waitSnapshot(sn.ID, "ready", snapState(domain.SnapshotReady))
	if cur := e.waitFor(sb.ID, "paused", isState(domain.StatePaused)); !e.sim.Paused(sb.ID) {
		t.Errorf("after the snapshot: %s, paused at the provider %v", cur.State, e.sim.Paused(sb.ID))
	}
}

// TestSnapshotFailuresAreRecorded: a refused snapshot fails with the
// provider's error and leaves no data; a transient one is retried.
func TestSnapshotFailuresAreRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	bad := e.create(`{"fail":"snapshot"}`)
	flaky := e.create(`{"fail":"snapshot_once"}`)
	e.waitFor(bad.ID, "ready", isState(domain.StateReady))
	e.waitFor(flaky.ID, "ready", isState(domain.StateReady))
	b, f := e.snapshot(bad.ID, time.Minute), e.snapshot(flaky.ID, time.Minute)
	got := e.waitSnapshot(b.ID, "failed", snapState(domain.SnapshotFailed))
	if !strings.Contains(got.Error, "injected failure") || e.sim.HasSnapshot(b.ID) {
		t.Errorf("failed snapshot: error %q, data held %v", got.Error, e.sim.HasSnapshot(b.ID))
	}
	if r := e.reasons(bad.ID); !slices.Contains(r, "snapshot_failed") {
		t.Errorf("reasons = %v", r)
	}
	if got := e.waitSnapshot(f.ID, "ready", snapState(domain.SnapshotReady)); got.Attempts != 2 {
		t.Errorf("retried snapshot: attempts %d, want 2", got.Attempts)
	}
	// Both sandboxes are free again: they end and are released.
	for _, id := range []string{bad.ID, flaky.ID} {
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
		e.waitFor(id, "released", isReleased)
	}
}

// TestSnapshotRacingRelease: a sandbox that ends while its snapshot is being
// taken is not released until the snapshot settles (the release waits for
// the lease), and the snapshot then fails; whatever the timing, each run is
// one legal history: no release while a snapshot is creating, and no
// snapshot data left of a failed snapshot.
func TestSnapshotRacingRelease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	for i, endAfter := range []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		sb := e.create(`{"snapshot_delay_ms":200,"ignore_cancel":true}`)
		e.waitFor(sb.ID, "ready", isState(domain.StateReady))
		sn := e.snapshot(sb.ID, time.Minute)
		time.Sleep(endAfter)
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonOwnerReleased, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			cur, err := e.st.Sandbox(e.ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.st.GetSnapshot(e.ctx, "acme", sn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Released && s.State == domain.SnapshotCreating {
				t.Fatalf("run %d: released while its snapshot was being taken", i)
			}
			if cur.Released && s.State != domain.SnapshotCreating {
				if s.State == domain.SnapshotFailed && e.sim.HasSnapshot(sn.ID) {
					t.Errorf("run %d: a failed snapshot left its data", i)
				}
				if s.State == domain.SnapshotReady && !e.sim.HasSnapshot(sn.ID) {
					t.Errorf("run %d: a ready snapshot has no data", i)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: never settled: sandbox %s released %v, snapshot %s", i, cur.State, cur.Released, s.State)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if e.holds(sb.ID) {
			t.Errorf("run %d: the sandbox's resource outlived its release", i)
		}
	}
	if n := e.sim.Overlaps(); n != 0 {
		t.Errorf("%d destroys ran while a snapshot of the sandbox was being taken", n)
	}
}

// TestSnapshotOfEndedSandboxIsRefused: only a ready or paused sandbox can
// be snapshotted; nothing is written otherwise.
func TestSnapshotOfEndedSandboxIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sb := e.create("") // requested: no executor runs
	_, err := e.st.RequestSnapshot(e.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: sb.ID, Timeout: time.Minute})
	if domain.ErrorCode(err) != domain.CodeStateConflict {
		t.Errorf("snapshot of a requested sandbox: %v", err)
	}
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	_, err = e.st.RequestSnapshot(e.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: sb.ID, Timeout: time.Minute})
	if domain.ErrorCode(err) != domain.CodeStateConflict || domain.ConflictState(err) != domain.StateCancelled {
		t.Errorf("snapshot of a cancelled sandbox: %v", err)
	}
	_, err = e.st.RequestSnapshot(e.ctx, domain.SnapshotRequest{Tenant: "other", SourceID: sb.ID, Timeout: time.Minute})
	if !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("another tenant's sandbox: %v", err)
	}
	if sns, _, _ := e.st.ListSnapshots(e.ctx, domain.SnapshotFilter{Tenant: "acme", Limit: 10}); len(sns) != 0 {
		t.Errorf("refused requests wrote %d snapshots", len(sns))
	}
	if r := e.reasons(sb.ID); slices.Contains(r, "snapshot_requested") {
		t.Errorf("a refused request wrote an event: %v", r)
	}
}

// TestExitSnapshot: a sandbox created with on_end snapshot is snapshotted
// before its release when it ends by a delete, its TTL or its owner's
// lease, and not when its owner releases it; the release destroys the
// sandbox after the snapshot, whose data stays.
func TestExitSnapshot(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	onEnd := func(p *domain.CreateParams) { p.OnEnd = domain.OnEndSnapshot }
	for _, tc := range []struct {
		reason domain.Reason
		taken  bool
	}{{domain.ReasonRequested, true}, {domain.ReasonExpired, true}, {domain.ReasonOwnerExpired, true}, {domain.ReasonOwnerReleased, false}} {
		sb := e.create(`{"snapshot_delay_ms":50}`, onEnd)
		e.waitFor(sb.ID, "ready", isState(domain.StateReady))
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, tc.reason, domain.ActorJanitor, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
		e.waitFor(sb.ID, "released", isReleased)
		sn, found := e.exitSnapshotOf(sb.ID)
		if found != tc.taken {
			t.Errorf("%s: exit snapshot taken %v, want %v", tc.reason, found, tc.taken)
			continue
		}
		if e.holds(sb.ID) {
			t.Errorf("%s: the sandbox's resource outlived its release", tc.reason)
		}
		if !found {
			continue
		}
		if sn.State != domain.SnapshotReady || !e.sim.HasSnapshot(sn.ID) {
			t.Errorf("%s: exit snapshot %s, data held %v", tc.reason, sn.State, e.sim.HasSnapshot(sn.ID))
		}
		from := e.create("", func(p *domain.CreateParams) { p.FromSnapshot = sn.ID })
		e.waitFor(from.ID, "ready", isState(domain.StateReady))
	}
}

// TestExitSnapshotThatCannotBeTaken: an exit snapshot the provider refuses,
// or one slower than EXIT_SNAPSHOT_TIMEOUT, is recorded failed with its
// reason, and the release goes on.
func TestExitSnapshotThatCannotBeTaken(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{ExitSnapshotTimeout: 2 * time.Second})
	onEnd := func(p *domain.CreateParams) { p.OnEnd = domain.OnEndSnapshot }
	refused := e.create(`{"fail":"snapshot"}`, onEnd)
	slow := e.create(`{"snapshot_delay_ms":30000}`, onEnd)
	for _, sb := range []domain.Sandbox{refused, slow} {
		e.waitFor(sb.ID, "ready", isState(domain.StateReady))
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for want, sb := range map[string]domain.Sandbox{"injected failure": refused, "deadline": slow} {
		e.waitFor(sb.ID, "released", isReleased)
		sn, found := e.exitSnapshotOf(sb.ID)
		if !found || sn.State != domain.SnapshotFailed || !strings.Contains(sn.Error, want) {
			t.Errorf("exit snapshot of %s: found %v, %s, %q", sb.ID, found, sn.State, sn.Error)
		}
		if e.sim.HasSnapshot(sn.ID) {
			t.Errorf("a failed exit snapshot left its data")
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the releases took %s: the exit snapshot's bound did not hold", took)
	}
}

// TestSnapshotReconcile: the janitor removes snapshot data the catalog does
// not want (no record, or deleted) once the grace has passed, keeps what it
// wants, and marks a ready snapshot whose data is gone lost; retention
// deletes snapshots past their expires_at.
func TestSnapshotReconcile(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	take := func(retention time.Duration) domain.Snapshot {
		sb := e.ready(func(p *domain.CreateParams) {})
		sn, err := e.st.RequestSnapshot(e.ctx, domain.SnapshotRequest{Tenant: "acme", SourceID: sb.ID, Timeout: time.Hour, Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		claims, err := e.st.ClaimSnapshots(e.ctx, "sim", "", "w", 10, time.Minute)
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim snapshots: %v %v", claims, err)
		}
		size, err := e.sim.Snapshot(e.ctx, sb.ID, sn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if sn, err = e.st.FinishSnapshot(e.ctx, sn.ID, claims[0].Snapshot.Epoch, size, true); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	kept, deleted, gone, expiring := take(0), take(0), take(0), take(time.Hour)
	stranger := domain.NewSnapshotID()
	src := e.ready()
	if _, err := e.sim.Snapshot(e.ctx, src.ID, stranger); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.DeleteSnapshot(e.ctx, "acme", deleted.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.simDir, ".snapshots", gone.ID)); err != nil {
		t.Fatal(err)
	}
	if rep := e.sweep(); rep.SnapshotOrphans != 0 || rep.SnapshotsLost != 0 {
		t.Fatalf("within the grace: %d orphans removed, %d lost", rep.SnapshotOrphans, rep.SnapshotsLost)
	}
	e.clock.Advance(time.Since(e.clock.Now()) + grace + time.Second)
	rep := e.sweep()
	if rep.SnapshotOrphans != 2 || rep.SnapshotsLost != 1 {
		t.Errorf("orphans removed %d (want 2), lost %d (want 1)", rep.SnapshotOrphans, rep.SnapshotsLost)
	}
	if e.sim.HasSnapshot(stranger) || e.sim.HasSnapshot(deleted.ID) {
		t.Error("orphaned snapshot data is still held")
	}
	if !e.sim.HasSnapshot(kept.ID) || !e.sim.HasSnapshot(expiring.ID) {
		t.Error("the janitor removed a ready snapshot's data")
	}
	for id, want := range map[string]domain.SnapshotState{kept.ID: domain.SnapshotReady, gone.ID: domain.SnapshotLost, deleted.ID: domain.SnapshotDeleted} {
		if sn, _ := e.st.GetSnapshot(e.ctx, "acme", id); sn.State != want {
			t.Errorf("snapshot %s: %s, want %s", id, sn.State, want)
		}
	}
	if r := e.reasons(gone.SourceID); !slices.Contains(r, "snapshot_lost") {
		t.Errorf("reasons = %v", r)
	}
	// Retention: past its expires_at the snapshot is deleted, and its data
	// goes at the next round.
	e.clock.Advance(time.Hour)
	if rep := e.sweep(); rep.SnapshotsExpired != 1 {
		t.Errorf("expired %d, want 1", rep.SnapshotsExpired)
	}
	if sn, _ := e.st.GetSnapshot(e.ctx, "acme", expiring.ID); sn.State != domain.SnapshotDeleted {
		t.Errorf("expired snapshot is %s", sn.State)
	}
	e.clock.Advance(grace + time.Second)
	e.sweep()
	if e.sim.HasSnapshot(expiring.ID) {
		t.Error("an expired snapshot's data is still held")
	}
}
