package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/vmwire"
	"github.com/tetherhq/tether/provider"
)

// Snapshots are copies of a VM's workspace disk, kept under
// MICROVM_STATE_DIR/snapshots/<id>/: workspace.img and snapshot.json,
// the last written last (a folder without it is a partial snapshot).
// A sandbox created from one starts with a copy of that disk as its
// workspace.

const snapshotMeta = "snapshot.json"

type snapshotRecord struct {
	SandboxID string    `json:"sandbox_id"`
	CreatedAt time.Time `json:"created_at"`
	Size      int64     `json:"size"`
}

func (p *Provider) snapshotDir(id string) string {
	return filepath.Join(p.cfg.StateDir, "snapshots", id)
}

// Snapshot implements provider.Snapshotter: the guest flushes its file
// systems, its vCPUs stop for the copy (a consistent disk, as of one
// moment), and it runs on. The copy keeps the disk sparse. A VM that no
// longer runs (an exit snapshot) is copied as its disk is.
func (p *Provider) Snapshot(ctx context.Context, sandboxID, snapshotID string) (int64, error) {
	if !provider.ValidSnapshotID(snapshotID) {
		return 0, provider.Errorf(provider.CodeInvalidRequest, "microvm: %q is not a snapshot id", snapshotID)
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	if _, err := p.readMeta(sandboxID); err != nil {
		return 0, provider.Errorf(provider.CodeProviderUnavailable, "microvm: no sandbox %s here", sandboxID)
	}
	dir := p.snapshotDir(snapshotID)
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := p.copyWorkspace(ctx, sandboxID, filepath.Join(dir, wsDisk)); err != nil {
		return 0, err
	}
	size, err := diskUsage(filepath.Join(dir, wsDisk))
	if err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	rec, err := json.Marshal(snapshotRecord{SandboxID: sandboxID, CreatedAt: time.Now().UTC(), Size: size})
	if err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMeta+".tmp"), rec, 0o600); err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.Rename(filepath.Join(dir, snapshotMeta+".tmp"), filepath.Join(dir, snapshotMeta)); err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	return size, nil
}

// copyWorkspace copies the VM's workspace disk to dst, the guest stopped
// meanwhile if it runs.
func (p *Provider) copyWorkspace(ctx context.Context, id, dst string) error {
	src := filepath.Join(p.vmDir(id), wsDisk)
	if _, alive := p.running(id); !alive {
		return p.tool(ctx, "cp", "--sparse=always", src, dst)
	}
	_, paused := os.Stat(filepath.Join(p.vmDir(id), pausedFile))
	if paused != nil {
		// Running: what the guest holds in its caches goes to the disk
		// first.
		if err := p.agent(id).simple(ctx, vmwire.Request{Op: vmwire.OpSync}); err != nil {
			return p.lostOr(id, fmt.Errorf("snapshot: flushing the guest: %w", err))
		}
		socket, err := p.socket(id, qmpSocket)
		if err == nil {
			err = qmp(ctx, socket, "stop")
		}
		if err != nil {
			return provider.Retryable(fmt.Errorf("microvm: snapshot: stopping the guest: %w", err))
		}
		defer func() {
			if socket, err := p.socket(id, qmpSocket); err == nil {
				_ = qmp(context.WithoutCancel(ctx), socket, "cont")
			}
		}()
	}
	return p.tool(ctx, "cp", "--sparse=always", src, dst)
}

// diskUsage is what a file takes on the disk (a sparse file's holes
// take nothing).
func diskUsage(path string) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Blocks * 512, nil
}

// DeleteSnapshot implements provider.Snapshotter.
func (p *Provider) DeleteSnapshot(_ context.Context, snapshotID string) error {
	if !provider.ValidSnapshotID(snapshotID) {
		return nil
	}
	if err := os.RemoveAll(p.snapshotDir(snapshotID)); err != nil {
		return fmt.Errorf("microvm: deleting a snapshot: %w", err)
	}
	return nil
}

// ListSnapshots implements provider.Snapshotter.
func (p *Provider) ListSnapshots(context.Context) ([]provider.SnapshotInfo, error) {
	entries, err := os.ReadDir(filepath.Join(p.cfg.StateDir, "snapshots"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("microvm: listing snapshots: %w", err)
	}
	var out []provider.SnapshotInfo
	for _, e := range entries {
		if !provider.ValidSnapshotID(e.Name()) {
			continue
		}
		info := provider.SnapshotInfo{ID: e.Name(), Partial: true}
		b, err := os.ReadFile(filepath.Join(p.snapshotDir(e.Name()), snapshotMeta))
		var rec snapshotRecord
		if err == nil && json.Unmarshal(b, &rec) == nil {
			info = provider.SnapshotInfo{ID: e.Name(), SandboxID: rec.SandboxID, Size: rec.Size, CreatedAt: rec.CreatedAt}
		} else if fi, err := e.Info(); err == nil {
			info.CreatedAt = fi.ModTime()
		}
		out = append(out, info)
	}
	return out, nil
}

// snapshotDisk returns the workspace disk of a complete snapshot.
func (p *Provider) snapshotDisk(snapshotID string) (string, error) {
	if !provider.ValidSnapshotID(snapshotID) {
		return "", provider.Errorf(provider.CodeInvalidRequest, "microvm: %q is not a snapshot id", snapshotID)
	}
	if _, err := os.Stat(filepath.Join(p.snapshotDir(snapshotID), snapshotMeta)); err != nil {
		return "", provider.Errorf(provider.CodeInvalidRequest, "microvm: no snapshot %s here", strings.TrimSpace(snapshotID))
	}
	return filepath.Join(p.snapshotDir(snapshotID), wsDisk), nil
}
