package providertest

import (
	"bytes"
	"encoding/json"
	"path"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// The Snapshotter's contract: a snapshot outlives its sandbox and the
// provider value that took it, is idempotent on its id, starts new
// sandboxes (with its files, where the provider has Files), and deletes
// idempotently; a snapshot of nothing, and a create from a snapshot the
// provider does not hold, fail without leaving anything listed.

func (s *suite) testSnapshots(t *testing.T) {
	skipWithout[provider.Snapshotter](t, s, "Snapshotter")
	t.Parallel()
	t.Run("RoundTrip", s.testSnapshotRoundTrip)
	t.Run("FromMissingSnapshot", s.testFromMissingSnapshot)
	t.Run("UnknownSandbox", s.testSnapshotUnknown)
}

// snapshotSpec is a create of a sandbox the provider can snapshot.
func (s *suite) snapshotSpec() provider.CreateSpec {
	return provider.CreateSpec{Params: json.RawMessage(s.h.SnapshotParams)}
}

// snapshots returns sn's snapshots by id, failing on one listed twice.
func (s *suite) snapshots(t *testing.T, sn provider.Snapshotter) map[string]provider.SnapshotInfo {
	t.Helper()
	list, err := sn.ListSnapshots(s.ctx(t))
	if err != nil {
		t.Fatalf("ListSnapshots: %v", err)
	}
	return byID(t, "ListSnapshots has snapshot", list, func(info provider.SnapshotInfo) string { return info.ID })
}

// wantSnapshot fails t unless sn lists snap, complete, of sandboxID.
func (s *suite) wantSnapshot(t *testing.T, sn provider.Snapshotter, snap, sandboxID, when string) {
	t.Helper()
	info, ok := s.snapshots(t, sn)[snap]
	if !ok || info.Partial || info.SandboxID != sandboxID {
		t.Fatalf("%s: snapshot %s listed %v as %+v, want it complete, of sandbox %s", when, snap, ok, info, sandboxID)
	}
}

func (s *suite) testSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	p, state := s.open(t)
	sn := capability[provider.Snapshotter](t, p, "Snapshotter")
	files, hasFiles := p.(provider.Files)
	res := s.create(t, p, s.snapshotSpec())
	file, content := path.Join(res.WorkDir, "providertest-snapshot"), []byte("kept by the snapshot\n")
	if hasFiles {
		if err := files.WriteFile(s.ctx(t), res.SandboxID, file, bytes.NewReader(content), 1<<20); err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
	}
	snap := provider.NewSnapshotID()
	t.Cleanup(func() { _ = sn.DeleteSnapshot(t.Context(), snap) })
	for range 2 { // idempotent on the snapshot's id
		if size, err := sn.Snapshot(s.ctx(t), res.SandboxID, snap); err != nil || size < 0 {
			t.Fatalf("Snapshot: size %d, err %v", size, err)
		}
	}
	s.wantSnapshot(t, sn, snap, res.SandboxID, "after Snapshot")
	s.destroy(t, p, res.SandboxID)
	again := capability[provider.Snapshotter](t, s.h.Open(t, state), "Snapshotter")
	s.wantSnapshot(t, again, snap, res.SandboxID, "its sandbox destroyed, by a restarted provider")

	spec := s.snapshotSpec()
	spec.FromSnapshot = snap
	from := s.create(t, p, spec)
	if hasFiles {
		got, err := s.read(t, files, from.SandboxID, path.Join(from.WorkDir, "providertest-snapshot"), 1<<20)
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("a sandbox from the snapshot reads %q, %v; want %q", got, err, content)
		}
	}
	for range 2 { // idempotent
		if err := again.DeleteSnapshot(s.ctx(t), snap); err != nil {
			t.Fatalf("DeleteSnapshot: %v", err)
		}
	}
	if _, ok := s.snapshots(t, sn)[snap]; ok {
		t.Error("a deleted snapshot is still listed")
	}
	if err := sn.DeleteSnapshot(s.ctx(t), provider.NewSnapshotID()); err != nil {
		t.Errorf("DeleteSnapshot of a snapshot never made: %v, want success", err)
	}
}

func (s *suite) testFromMissingSnapshot(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	spec := s.snapshotSpec()
	spec.SandboxID, spec.Tenant, spec.FromSnapshot = provider.NewSandboxID(), "providertest", provider.NewSnapshotID()
	_, err := p.Create(s.ctx(t), spec)
	if err == nil || provider.IsRetryable(err) {
		t.Errorf("Create from a snapshot the provider does not hold: err = %v, want a failure that is not retryable", err)
	}
	if _, made := s.list(t, p)[spec.SandboxID]; made {
		t.Error("Create from a snapshot the provider does not hold made a resource")
		s.destroy(t, p, spec.SandboxID)
	}
}

func (s *suite) testSnapshotUnknown(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	sn := capability[provider.Snapshotter](t, p, "Snapshotter")
	snap := provider.NewSnapshotID()
	if _, err := sn.Snapshot(s.ctx(t), provider.NewSandboxID(), snap); err == nil {
		t.Error("Snapshot of a sandbox the provider does not hold succeeded")
	}
	if info, ok := s.snapshots(t, sn)[snap]; ok && !info.Partial {
		t.Errorf("a failed Snapshot is listed complete: %+v", info)
	}
	_ = sn.DeleteSnapshot(s.ctx(t), snap)
}
