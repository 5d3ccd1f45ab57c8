package local

// Snapshots: a snapshot of a sandbox is a copy of its /workspace's ext4
// image (workspace.Snapshot: sparse, taken with the file system frozen, so
// consistent as of one moment), kept in the folder .snapshots/ID of the
// provider's state folder with spec.json, what a restore needs of the
// sandbox it was taken of. It is made as .snapshots/ID.tmp and renamed
// when complete: ListSnapshots lists a .tmp as partial. A create with
// FromSnapshot copies the image into the new sandbox's workspace instead
// of a fresh one, of the snapshot's size, and hands its files to the new
// sandbox's user. Only a size-limited workspace (params.workspace_mb or
// LOCAL_WORKSPACE_MB) has an image: a snapshot of a sandbox without one is
// refused.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
)

var _ provider.Snapshotter = (*Provider)(nil)

// snapshotsFolder is the folder of snapshots in the state folder; not a
// sandbox id, so List never sees it.
const snapshotsFolder = ".snapshots"

// snapshotSpec is a snapshot's spec.json.
type snapshotSpec struct {
	provider.SnapshotRecord
	Tenant      string `json:"tenant"`
	WorkspaceMB int    `json:"workspace_mb"`
	Image       string `json:"image,omitempty"`
}

func (p *Provider) snapshotDir(id string) string { return filepath.Join(p.dir, snapshotsFolder, id) }

// Snapshot implements provider.Snapshotter. It holds the sandbox's lock, so
// that no destroy or create of the sandbox runs meanwhile. A snapshot's
// bytes count against its tenant's share of the disk and the host's
// (ceiling.go): one that does not fit is QUOTA_EXCEEDED, not retried.
func (p *Provider) Snapshot(ctx context.Context, sandboxID, snapshotID string) (int64, error) {
	if !provider.ValidSandboxID(sandboxID) || !provider.ValidSnapshotID(snapshotID) {
		return 0, fmt.Errorf("local: snapshot: invalid id %q or %q", sandboxID, snapshotID)
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	m, err := p.readMeta(sandboxID)
	if err != nil || !m.Ready {
		return 0, fmt.Errorf("local: snapshot: sandbox %s not found", sandboxID)
	}
	if m.Limits.WorkspaceMB == 0 {
		return 0, errors.New("local: snapshot: the sandbox's /workspace has no size limit, so no image to copy: create it with params.workspace_mb (or set LOCAL_WORKSPACE_MB)")
	}
	// The copy takes about what the workspace's image takes on disk: it
	// must fit the tenant's share beside its sandboxes and snapshots, and
	// once taken, so must what it really took.
	used, _ := workspace.DiskUsage(filepath.Join(p.sandboxDir(sandboxID), workspace.ImageFile))
	if err := p.reserve(snapshotID, m.Tenant, Limits{WorkspaceMB: mibOf(used)}, "snapshot"); err != nil {
		return 0, err
	}
	size, err := p.copySnapshot(ctx, m, snapshotID)
	if err != nil {
		p.recountSnapshot(snapshotID, m.Tenant)
		return 0, err
	}
	return size, nil
}

// copySnapshot takes the snapshot snapshotID of the sandbox m: its
// workspace's image and spec.json, written as a partial folder and renamed
// once complete. A copy that took more than the tenant's share can hold is
// removed and refused.
func (p *Provider) copySnapshot(ctx context.Context, m meta, snapshotID string) (int64, error) {
	final := p.snapshotDir(snapshotID)
	tmp := final + provider.PartialSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("local: snapshot: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return 0, fmt.Errorf("local: snapshot: %w", err)
	}
	size, err := workspace.Snapshot(ctx, p.sandboxDir(m.SandboxID), filepath.Join(tmp, workspace.ImageFile))
	if err != nil {
		return 0, provider.Retryable(fmt.Errorf("local: snapshot: %w", err))
	}
	if err := p.reserve(snapshotID, m.Tenant, Limits{WorkspaceMB: mibOf(size)}, "snapshot"); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, err
	}
	spec, _ := json.Marshal(snapshotSpec{SnapshotRecord: provider.NewSnapshotRecord(snapshotID, m.SandboxID),
		Tenant: m.Tenant, WorkspaceMB: m.Limits.WorkspaceMB, Image: m.Image})
	if err := writeSynced(filepath.Join(tmp, "spec.json"), spec); err != nil {
		return 0, fmt.Errorf("local: snapshot: %w", err)
	}
	// A snapshot taken again (a retried call) replaces the earlier one.
	if err := os.RemoveAll(final); err != nil {
		return 0, fmt.Errorf("local: snapshot: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return 0, fmt.Errorf("local: snapshot: %w", err)
	}
	return size, nil
}

// writeSynced writes b to the new file path and syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// DeleteSnapshot implements provider.Snapshotter.
func (p *Provider) DeleteSnapshot(_ context.Context, snapshotID string) error {
	if !provider.ValidSnapshotID(snapshotID) {
		return fmt.Errorf("local: delete snapshot: invalid id %q", snapshotID)
	}
	for _, path := range []string{p.snapshotDir(snapshotID), p.snapshotDir(snapshotID) + provider.PartialSuffix} {
		if err := os.RemoveAll(path); err != nil {
			p.recountSnapshot(snapshotID, "")
			return fmt.Errorf("local: delete snapshot: %w", err)
		}
	}
	p.unreserve(snapshotID)
	return nil
}

// ListSnapshots implements provider.Snapshotter: a folder per snapshot.
func (p *Provider) ListSnapshots(context.Context) ([]provider.SnapshotInfo, error) {
	dir := filepath.Join(p.dir, snapshotsFolder)
	out, err := provider.SnapshotsIn(dir, fs.DirEntry.IsDir, func(info *provider.SnapshotInfo, e fs.DirEntry) {
		if spec, err := p.readSnapshotSpec(filepath.Join(dir, e.Name())); err == nil {
			info.SandboxID = spec.SandboxID
		} else {
			info.Partial = true // no spec: never complete
		}
		info.Size, _ = workspace.DiskUsage(filepath.Join(dir, e.Name(), workspace.ImageFile))
	})
	if err != nil {
		return nil, fmt.Errorf("local: list snapshots: %w", err)
	}
	return out, nil
}

func (p *Provider) readSnapshotSpec(dir string) (snapshotSpec, error) {
	var spec snapshotSpec
	b, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		return spec, err
	}
	return spec, json.Unmarshal(b, &spec)
}

// fromSnapshot is the spec of the snapshot a create starts from, or an
// error (not retryable) when the provider does not hold it.
func (p *Provider) fromSnapshot(id string) (snapshotSpec, error) {
	if !provider.ValidSnapshotID(id) {
		return snapshotSpec{}, createErr(fmt.Errorf("invalid snapshot id %q", id))
	}
	spec, err := p.readSnapshotSpec(p.snapshotDir(id))
	if err != nil {
		return spec, createErr(fmt.Errorf("snapshot %s not found on this host: %w", id, err))
	}
	return spec, nil
}
