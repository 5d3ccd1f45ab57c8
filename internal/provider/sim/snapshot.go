package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The sim implements provider.Snapshotter: a snapshot is a file in the
// folder .snapshots/ of its state directory (hidden: List and the chaos
// harness take its other entries for resources), named the snapshot id, written
// as ID.tmp first and renamed when complete (an interrupted call leaves
// the .tmp, which ListSnapshots lists as Partial). Params of the source
// sandbox shape it:
//
//	snapshot_delay_ms  how long a snapshot takes
//	snapshot_bytes     the size it reports (default 4096)
//	ignore_cancel      a snapshot runs its delay out even if its caller
//	                   gives up, like a copy that cannot be interrupted
//	fail               "snapshot": every snapshot fails (not retryable);
//	                   "snapshot_once": the first attempt in this process
//	                   fails retryably
//
// A sandbox created from a snapshot records its id in its resource file
// (FromSnapshot reads it back); one from a snapshot the sim does not hold
// fails to create.
var _ provider.Snapshotter = (*Provider)(nil)

// snapshotsDir is the folder of snapshots in the state directory.
const snapshotsDir = ".snapshots"

// defaultSnapshotBytes is the size a snapshot reports without
// params.snapshot_bytes.
const defaultSnapshotBytes = 4096

// snapshotRecord is the content of a snapshot file.
type snapshotRecord struct {
	provider.SnapshotRecord
	Size int64 `json:"size"`
}

func (p *Provider) snapshotPath(id string) string { return filepath.Join(p.dir, snapshotsDir, id) }

// Snapshot implements provider.Snapshotter.
func (p *Provider) Snapshot(ctx context.Context, sandboxID, snapshotID string) (int64, error) {
	if !validName(sandboxID) || !provider.ValidSnapshotID(snapshotID) {
		return 0, fmt.Errorf("sim: snapshot: invalid id %q or %q", sandboxID, snapshotID)
	}
	b, err := os.ReadFile(filepath.Join(p.dir, sandboxID))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("sim: snapshot: sandbox %s not found", sandboxID)
	}
	if err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err)
	}
	var rec record
	_ = json.Unmarshal(b, &rec) // a damaged record has no params
	params, _ := parseParams(rec.Params)
	switch params.Fail {
	case "snapshot":
		return 0, errors.New("sim: snapshot: injected failure")
	case "snapshot_once":
		if p.firstFailure("snapshot/" + snapshotID) {
			return 0, provider.Retryable(errors.New("sim: snapshot: injected transient failure"))
		}
	}
	p.mu.Lock()
	p.snapshotting[sandboxID]++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.snapshotting[sandboxID]--; p.snapshotting[sandboxID] <= 0 {
			delete(p.snapshotting, sandboxID)
		}
		p.mu.Unlock()
	}()
	if err := os.MkdirAll(filepath.Join(p.dir, snapshotsDir), 0o755); err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err)
	}
	tmp := p.snapshotPath(snapshotID) + provider.PartialSuffix
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err)
	}
	delay := time.Duration(params.SnapshotDelayMS) * time.Millisecond
	if params.IgnoreCancel {
		time.Sleep(delay) // like a copy that cannot be interrupted
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("sim: snapshot: %w", err) // the .tmp stays: a partial snapshot
		}
	} else if err := sleep(ctx, delay); err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err) // the .tmp stays: a partial snapshot
	}
	size := int64(defaultSnapshotBytes)
	if params.SnapshotBytes > 0 {
		size = params.SnapshotBytes
	}
	out, _ := json.Marshal(snapshotRecord{SnapshotRecord: provider.NewSnapshotRecord(snapshotID, sandboxID), Size: size})
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err)
	}
	if err := os.Rename(tmp, p.snapshotPath(snapshotID)); err != nil {
		return 0, fmt.Errorf("sim: snapshot: %w", err)
	}
	return size, nil
}

// DeleteSnapshot implements provider.Snapshotter.
func (p *Provider) DeleteSnapshot(_ context.Context, snapshotID string) error {
	if !provider.ValidSnapshotID(snapshotID) {
		return fmt.Errorf("sim: delete snapshot: invalid id %q", snapshotID)
	}
	for _, path := range []string{p.snapshotPath(snapshotID), p.snapshotPath(snapshotID) + provider.PartialSuffix} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sim: delete snapshot: %w", err)
		}
	}
	return nil
}

// ListSnapshots implements provider.Snapshotter: a file per snapshot.
func (p *Provider) ListSnapshots(context.Context) ([]provider.SnapshotInfo, error) {
	regular := func(e fs.DirEntry) bool { return e.Type().IsRegular() }
	out, err := provider.SnapshotsIn(filepath.Join(p.dir, snapshotsDir), regular, func(info *provider.SnapshotInfo, _ fs.DirEntry) {
		if info.Partial {
			return
		}
		if b, err := os.ReadFile(p.snapshotPath(info.ID)); err == nil {
			var rec snapshotRecord
			if json.Unmarshal(b, &rec) == nil {
				info.SandboxID, info.Size = rec.SandboxID, rec.Size
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("sim: list snapshots: %w", err)
	}
	return out, nil
}

// HasSnapshot reports whether the sim holds the complete snapshot.
func (p *Provider) HasSnapshot(id string) bool {
	_, err := os.Stat(p.snapshotPath(id))
	return err == nil
}

// FromSnapshot returns the snapshot the sim's sandbox was created from, ""
// for none (or a sandbox it does not hold).
func (p *Provider) FromSnapshot(sandboxID string) string {
	b, err := os.ReadFile(filepath.Join(p.dir, sandboxID))
	if err != nil {
		return ""
	}
	var rec record
	_ = json.Unmarshal(b, &rec)
	return rec.FromSnapshot
}

// Overlaps counts the Destroy calls this process made on a sandbox while a
// Snapshot of it was in flight: a release that did not wait for the
// snapshot's lease. Tests check that it stays 0.
func (p *Provider) Overlaps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overlaps
}
