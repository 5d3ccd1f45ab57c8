package microvm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	// Memory is set for a snapshot of the whole VM: its memory and device
	// state (memory.state) and both disks, as of one moment; Params and
	// KernelArgs are its VM's, which a restored copy gets.
	Memory     bool   `json:"memory,omitempty"`
	Params     Params `json:"params"`
	KernelArgs string `json:"kernel_args,omitempty"`
}

// memoryState is a memory snapshot's saved VM state.
const memoryState = "memory.state"

// snapshotRecord reads a complete snapshot's record.
func (p *Provider) snapshotRecord(snapshotID string) (snapshotRecord, error) {
	var rec snapshotRecord
	if !provider.ValidSnapshotID(snapshotID) {
		return rec, provider.Errorf(provider.CodeInvalidRequest, "microvm: %q is not a snapshot id", snapshotID)
	}
	b, err := os.ReadFile(filepath.Join(p.snapshotDir(snapshotID), snapshotMeta))
	if err != nil {
		return rec, provider.Errorf(provider.CodeInvalidRequest, "microvm: no snapshot %s here", snapshotID)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("microvm: snapshot %s: %w", snapshotID, err)
	}
	return rec, nil
}

// writeSnapshotRecord writes the record, last of the snapshot's folder.
func writeSnapshotRecord(dir string, rec snapshotRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMeta+".tmp"), b, 0o600); err != nil {
		return fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.Rename(filepath.Join(dir, snapshotMeta+".tmp"), filepath.Join(dir, snapshotMeta)); err != nil {
		return fmt.Errorf("microvm: snapshot: %w", err)
	}
	return nil
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
	dir, err := p.freshSnapshotDir(snapshotID)
	if err != nil {
		return 0, err
	}
	if err := p.copyWorkspace(ctx, sandboxID, filepath.Join(dir, wsDisk)); err != nil {
		return 0, err
	}
	size, err := diskUsage(filepath.Join(dir, wsDisk))
	if err != nil {
		return 0, fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := writeSnapshotRecord(dir, snapshotRecord{SandboxID: sandboxID, CreatedAt: time.Now().UTC(), Size: size}); err != nil {
		return 0, err
	}
	return size, nil
}

// freshSnapshotDir empties the snapshot's folder of what an interrupted
// call left, and returns it.
func (p *Provider) freshSnapshotDir(snapshotID string) (string, error) {
	dir := p.snapshotDir(snapshotID)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("microvm: snapshot: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("microvm: snapshot: %w", err)
	}
	return dir, nil
}

// copyWorkspace copies the VM's workspace disk to dst, the guest stopped
// meanwhile if it runs.
func (p *Provider) copyWorkspace(ctx context.Context, id, dst string) error {
	src := filepath.Join(p.vmDir(id), wsDisk)
	if _, alive := p.running(id); !alive {
		return p.tool(ctx, "cp", "--sparse=always", src, dst)
	}
	if _, err := os.Stat(filepath.Join(p.vmDir(id), pausedFile)); err != nil {
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

// SnapshotMemory takes a snapshot of the whole VM: its memory and device
// state and both its disks, as of one moment, the guest stopped for as
// long as that takes. A sandbox created from it resumes where the VM was:
// its processes running, their files open, with an identity of its own
// (restore). A paused VM stays paused; a running one runs on.
func (p *Provider) SnapshotMemory(ctx context.Context, sandboxID, snapshotID string) (int64, error) {
	if !provider.ValidSnapshotID(snapshotID) {
		return 0, provider.Errorf(provider.CodeInvalidRequest, "microvm: %q is not a snapshot id", snapshotID)
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	m, err := p.readMeta(sandboxID)
	if err != nil {
		return 0, provider.Errorf(provider.CodeProviderUnavailable, "microvm: no sandbox %s here", sandboxID)
	}
	socket, err := p.socket(sandboxID, qmpSocket)
	if err != nil {
		return 0, err
	}
	dir, err := p.freshSnapshotDir(snapshotID)
	if err != nil {
		return 0, err
	}
	mon, err := dialQMP(ctx, socket)
	if err != nil {
		return 0, provider.Retryable(fmt.Errorf("microvm: snapshot: %w", err))
	}
	defer mon.close()
	was, err := mon.status()
	if err != nil {
		return 0, provider.Retryable(fmt.Errorf("microvm: snapshot: %w", err))
	}
	if _, err := mon.run("stop", nil, nil); err != nil {
		return 0, provider.Retryable(fmt.Errorf("microvm: snapshot: %w", err))
	}
	if was == "running" {
		defer func() { _, _ = mon.run("cont", nil, nil) }()
	}
	if err := p.saveVM(ctx, mon, sandboxID, dir); err != nil {
		return 0, err
	}
	var size int64
	for _, f := range []string{memoryState, rootDisk, wsDisk} {
		n, err := diskUsage(filepath.Join(dir, f))
		if err != nil {
			return 0, fmt.Errorf("microvm: snapshot: %w", err)
		}
		size += n
	}
	rec := snapshotRecord{SandboxID: sandboxID, CreatedAt: time.Now().UTC(), Size: size, Memory: true, Params: m.Params, KernelArgs: m.KernelArgs}
	if err := writeSnapshotRecord(dir, rec); err != nil {
		return 0, err
	}
	return size, nil
}

// saveVM writes the stopped VM's state and copies its disks into dir.
func (p *Provider) saveVM(ctx context.Context, mon *qmpConn, id, dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, memoryState), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("microvm: snapshot: %w", err)
	}
	err = mon.migrateTo(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("microvm: snapshot: saving the VM: %w", err)
	}
	for _, disk := range []string{rootDisk, wsDisk} {
		if err := p.tool(ctx, "cp", "--sparse=always", filepath.Join(p.vmDir(id), disk), filepath.Join(dir, disk)); err != nil {
			return err
		}
	}
	return nil
}

// restore makes a VM from a memory snapshot: copies of its disks, its
// machine (memory, vCPUs, kernel command line), its saved state loaded
// by QEMU; the guest then runs on from where it was, and the agent gives
// it a name, entropy and a clock of its own.
func (p *Provider) restore(ctx context.Context, m meta, rec snapshotRecord) error {
	src := p.snapshotDir(m.FromSnapshot)
	m.Params.MemoryMB, m.Params.CPUs, m.KernelArgs = rec.Params.MemoryMB, rec.Params.CPUs, rec.KernelArgs
	dir := p.vmDir(m.SandboxID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	for _, disk := range []string{rootDisk, wsDisk} {
		if err := p.tool(ctx, "cp", "--sparse=always", filepath.Join(src, disk), filepath.Join(dir, disk)); err != nil {
			return err
		}
	}
	if err := p.writeMeta(m); err != nil {
		return err
	}
	state, err := os.Open(filepath.Join(src, memoryState))
	if err != nil {
		return fmt.Errorf("microvm: restore: %w", err)
	}
	defer func() { _ = state.Close() }()
	if err := p.boot(ctx, m, state); err != nil {
		return err
	}
	entropy := make([]byte, 64)
	_, _ = rand.Read(entropy)
	err = p.agent(m.SandboxID).simple(ctx, vmwire.Request{
		Op: vmwire.OpIdentity, Hostname: hostname(m.SandboxID), Entropy: entropy, Time: time.Now().UnixNano(),
	})
	if err != nil {
		return fmt.Errorf("microvm: restore: giving the copy its identity: %w", err)
	}
	return nil
}
