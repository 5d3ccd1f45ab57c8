package provider

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"
)

// SnapshotRecord is what a provider that keeps its snapshots itself
// records of each, beside the snapshot (the sim's snapshot file, local's
// spec.json): which snapshot, of which sandbox, taken when. A provider
// embeds it in a record of its own, with what else it needs (a size, what
// a restore needs of the sandbox), so that every such record reads the
// same way.
type SnapshotRecord struct {
	SnapshotID string    `json:"snapshot_id"`
	SandboxID  string    `json:"sandbox_id"`
	CreatedAt  time.Time `json:"created_at"`
}

// NewSnapshotRecord is the record of snapshotID of sandboxID, taken now.
func NewSnapshotRecord(snapshotID, sandboxID string) SnapshotRecord {
	return SnapshotRecord{SnapshotID: snapshotID, SandboxID: sandboxID, CreatedAt: time.Now().UTC()}
}

// PartialSuffix ends the name of a snapshot's entry in a folder while the
// snapshot is being written (SnapshotsIn lists it as Partial).
const PartialSuffix = ".tmp"

// SnapshotsIn lists the snapshots a provider keeps as the entries of one
// folder, an entry per snapshot named by its id (with PartialSuffix while
// it is written): each entry that keep accepts and whose name is a valid
// snapshot id becomes a SnapshotInfo with its ID, Partial and CreatedAt
// (the entry's modification time), which fill then completes from the
// entry (its sandbox and size). Other entries are skipped; a folder that
// does not exist holds no snapshot.
func SnapshotsIn(dir string, keep func(fs.DirEntry) bool, fill func(*SnapshotInfo, fs.DirEntry)) ([]SnapshotInfo, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotInfo, 0, len(entries))
	for _, e := range entries {
		id, partial := strings.CutSuffix(e.Name(), PartialSuffix)
		if !keep(e) || !ValidSnapshotID(id) {
			continue
		}
		info := SnapshotInfo{ID: id, Partial: partial}
		if fi, err := e.Info(); err == nil {
			info.CreatedAt = fi.ModTime().UTC()
		}
		fill(&info, e)
		out = append(out, info)
	}
	return out, nil
}
