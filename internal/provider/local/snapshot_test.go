package local_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// writerScript writes files into /workspace without a pause, each followed
// by its checksum's line in /workspace/manifest once it is whole: any
// moment's /workspace has every file its manifest names, as named.
const writerScript = `mkdir -p /workspace/d; i=0; while :; do i=$((i+1)); ` +
	`head -c $(( (i %% 7 + 1) * 6000 )) /dev/urandom > /workspace/d/f$i; ` +
	`sha256sum /workspace/d/f$i >> /workspace/manifest; done # %s`

// TestSnapshotWhileWriting: snapshots taken while a process in the sandbox
// writes restore, in new sandboxes, a consistent /workspace: every file of
// the snapshot's manifest is there with its checksum, and the new
// sandbox's user owns and can write them. The snapshot is sparse.
func TestSnapshotWhileWriting(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	id := provider.NewSandboxID()
	create(t, p, provider.CreateSpec{SandboxID: id, Params: json.RawMessage(`{"workspace_mb":64}`)})
	marker := "writer" + strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	if r := run(t, p, id, "nohup sh -c '"+strings.ReplaceAll(fmtWriter(marker), "'", `'\''`)+"' >/dev/null 2>&1 & echo started"); r.ExitCode != 0 {
		t.Fatalf("start the writer: %+v", r)
	}
	var snaps []string
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		snap := provider.NewSnapshotID()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		size, err := p.Snapshot(ctx, id, snap)
		cancel()
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if size <= 0 || size >= 64<<20 {
			t.Errorf("snapshot size %d: want the image's used blocks, under its 64 MiB", size)
		}
		snaps = append(snaps, snap)
		t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), snap) })
	}
	// The writer ran on between and after the snapshots.
	if r := run(t, p, id, "wc -l < /workspace/manifest"); r.ExitCode != 0 {
		t.Fatalf("the sandbox after its snapshots: %+v", r)
	}
	listed, err := p.ListSnapshots(t.Context())
	if err != nil || len(listed) != 3 {
		t.Fatalf("ListSnapshots = %+v, %v; want 3", listed, err)
	}
	prev := 0
	for _, snap := range snaps {
		rid := provider.NewSandboxID()
		create(t, p, provider.CreateSpec{SandboxID: rid, FromSnapshot: snap})
		r := run(t, p, rid, "cd / && sha256sum -c --quiet /workspace/manifest && wc -l < /workspace/manifest")
		if r.ExitCode != 0 {
			t.Fatalf("restored from %s: manifest check failed: %+v", snap, r)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(r.Output))
		if n == 0 || n < prev {
			t.Errorf("restored from %s: %d files in the manifest (the one before had %d)", snap, n, prev)
		}
		prev = n
		if r := run(t, p, rid, "echo more >> /workspace/d/f1 && touch /workspace/new && test -O /workspace/d/f1"); r.ExitCode != 0 {
			t.Errorf("the restored files are not the new sandbox's user's: %+v", r)
		}
	}
	// A snapshot's data is removed by DeleteSnapshot.
	if err := p.DeleteSnapshot(t.Context(), snaps[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".snapshots", snaps[0])); !os.IsNotExist(err) {
		t.Errorf("deleted snapshot still on disk: %v", err)
	}
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: provider.NewSandboxID(), FromSnapshot: snaps[0]}); err == nil || provider.IsRetryable(err) {
		t.Errorf("create from a deleted snapshot: %v, want a lasting error", err)
	}
}

func fmtWriter(marker string) string {
	return strings.ReplaceAll(strings.ReplaceAll(writerScript, "%%", "%"), "%s", marker)
}

// TestSnapshotNeedsAWorkspaceImage: a sandbox whose /workspace has no size
// limit has no image to copy: its snapshot is refused, not retried.
func TestSnapshotNeedsAWorkspaceImage(t *testing.T) {
	t.Parallel()
	p, err := local.New(harness.ReachableTempDir(t), local.WithLimits(
		local.Limits{Pids: local.DefaultPids, MemoryMB: local.DefaultMemoryMB},
		local.Limits{Pids: local.DefaultMaxPids, MemoryMB: local.DefaultMaxMemoryMB, WorkspaceMB: local.DefaultMaxWorkspaceMB}))
	if err != nil {
		t.Fatal(err)
	}
	id := provider.NewSandboxID()
	create(t, p, provider.CreateSpec{SandboxID: id})
	if _, err := p.Snapshot(t.Context(), id, provider.NewSnapshotID()); err == nil || provider.IsRetryable(err) {
		t.Errorf("snapshot of a folder workspace: %v", err)
	}
}

// TestSnapshotOfPausedSandbox: a paused sandbox (its processes frozen) can
// be snapshotted, and runs on once resumed.
func TestSnapshotOfPausedSandbox(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	id := provider.NewSandboxID()
	create(t, p, provider.CreateSpec{SandboxID: id, Params: json.RawMessage(`{"workspace_mb":32}`)})
	if r := run(t, p, id, "echo paused-state > /workspace/s.txt"); r.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	if err := p.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	snap := provider.NewSnapshotID()
	t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), snap) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	_, err := p.Snapshot(ctx, id, snap)
	cancel()
	if err != nil {
		t.Fatalf("Snapshot of a paused sandbox: %v", err)
	}
	if err := p.Resume(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if r := run(t, p, id, "cat /workspace/s.txt"); r.Output != "paused-state\n" {
		t.Errorf("after resume: %+v", r)
	}
	rid := provider.NewSandboxID()
	create(t, p, provider.CreateSpec{SandboxID: rid, FromSnapshot: snap})
	if r := run(t, p, rid, "cat /workspace/s.txt"); r.Output != "paused-state\n" {
		t.Errorf("restored from a paused sandbox's snapshot: %+v", r)
	}
}
