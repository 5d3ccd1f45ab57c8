package provider_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

func TestSnapshotsIn(t *testing.T) {
	dir := t.TempDir()
	done, writing, skipped := provider.NewSnapshotID(), provider.NewSnapshotID(), provider.NewSnapshotID()
	for _, name := range []string{done, writing + provider.PartialSuffix, "not-an-id", "snp_short"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An entry keep refuses (a file where the provider keeps folders).
	if err := os.WriteFile(filepath.Join(dir, skipped), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, done), when, when); err != nil {
		t.Fatal(err)
	}
	var filled []string
	got, err := provider.SnapshotsIn(dir, fs.DirEntry.IsDir, func(info *provider.SnapshotInfo, e fs.DirEntry) {
		filled = append(filled, e.Name())
		info.SandboxID, info.Size = "sbx-of-"+info.ID, 42
	})
	if err != nil {
		t.Fatal(err)
	}
	// The complete snapshot first.
	slices.SortFunc(got, func(a, b provider.SnapshotInfo) int { return boolInt(a.Partial) - boolInt(b.Partial) })
	if len(got) != 2 {
		t.Fatalf("SnapshotsIn = %+v; want the complete and the partial snapshot", got)
	}
	if g := got[0]; g.ID != done || g.Partial || !g.CreatedAt.Equal(when) || g.SandboxID != "sbx-of-"+done || g.Size != 42 {
		t.Errorf("complete snapshot = %+v", g)
	}
	if g := got[1]; g.ID != writing || !g.Partial || g.SandboxID != "sbx-of-"+writing {
		t.Errorf("partial snapshot = %+v", g)
	}
	if len(filled) != 2 {
		t.Errorf("fill saw %v; want only the two snapshots", filled)
	}
}

func TestSnapshotsInMissingFolder(t *testing.T) {
	got, err := provider.SnapshotsIn(filepath.Join(t.TempDir(), "none"), fs.DirEntry.IsDir, func(*provider.SnapshotInfo, fs.DirEntry) {})
	if err != nil || len(got) != 0 {
		t.Fatalf("SnapshotsIn of a missing folder = %+v, %v; want none, nil", got, err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
