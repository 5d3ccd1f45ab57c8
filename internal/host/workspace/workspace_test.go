package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// detect returns an FS that works under a state folder of the test's own,
// or skips where the host cannot mount workspace images.
func detect(t *testing.T) (*FS, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting workspace images needs root")
	}
	dir := t.TempDir()
	w := &FS{}
	w.Detect(dir, "")
	if w.Problem() != "" {
		t.Skipf("workspace images unavailable here: %s", w.Problem())
	}
	return w, dir
}

// sandboxDir makes a sandbox's folder under dir with its workspace
// folder, cleared at the test's end.
func sandboxDir(t *testing.T, dir, name string) (sbx, ws string) {
	t.Helper()
	sbx = filepath.Join(dir, name)
	ws = filepath.Join(sbx, "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Clear(context.Background(), sbx); err != nil {
			t.Error(err)
		}
	})
	return sbx, ws
}

// TestCreateAndClear: a workspace of 32 MiB is a file system of its own,
// its root the sandbox user's, that refuses writes past its size with
// ENOSPC; the host's disk holds what was written, not the whole size;
// Leftovers finds its loop device while attached; Clear unmounts it and
// detaches the device, and clears nothing twice.
func TestCreateAndClear(t *testing.T) {
	t.Parallel()
	w, dir := detect(t)
	sbx, ws := sandboxDir(t, dir, "sbx-create")
	if err := w.Create(t.Context(), sbx, 4242, 32); err != nil {
		t.Fatal(err)
	}
	if !Mounted(ws) {
		t.Fatal("the workspace is not mounted")
	}
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil || st.Uid != 4242 || st.Gid != 4242 {
		t.Errorf("the workspace's root: uid %d gid %d, %v; want 4242", st.Uid, st.Gid, err)
	}
	if entries, _ := os.ReadDir(ws); len(entries) != 0 {
		t.Errorf("a fresh workspace holds %v", entries)
	}
	err := os.WriteFile(filepath.Join(ws, "big"), make([]byte, 40<<20), 0o600)
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing 40 MiB into 32: %v; want ENOSPC", err)
	}
	var img unix.Stat_t
	if err := unix.Stat(filepath.Join(sbx, ImageFile), &img); err != nil || img.Blocks*512 > 33<<20 {
		t.Errorf("the image holds %d bytes on the host, %v; want at most its size", img.Blocks*512, err)
	}
	if left := Leftovers(dir); !left["sbx-create"] || len(left) != 1 {
		t.Errorf("Leftovers = %v; want the attached workspace's folder", left)
	}
	for range 2 {
		if err := Clear(t.Context(), sbx); err != nil {
			t.Fatal(err)
		}
	}
	if Mounted(ws) {
		t.Error("still mounted after Clear")
	}
	if left := Leftovers(dir); len(left) != 0 {
		t.Errorf("after Clear, Leftovers = %v", left)
	}
}

// TestTemplateOncePerSize: workspaces of one size start as copies of one
// template, formatted once.
func TestTemplateOncePerSize(t *testing.T) {
	t.Parallel()
	w, dir := detect(t)
	for _, name := range []string{"sbx-a", "sbx-b"} {
		sbx, _ := sandboxDir(t, dir, name)
		if err := w.Create(t.Context(), sbx, 0, MinMB); err != nil {
			t.Fatal(err)
		}
	}
	templates, _ := filepath.Glob(filepath.Join(dir, workspaceTemplates, "*"))
	if len(templates) != 1 || !strings.HasSuffix(templates[0], "/16.img") {
		t.Errorf("templates = %v; want one, of 16 MiB", templates)
	}
}

// TestDiscard: before unmounting a workspace, Clear shuts its
// file system down so that what the sandbox wrote last is not first
// written to the host's disk; only a workspace's own file system, never
// another mounted there, nor the host's.
func TestDiscard(t *testing.T) {
	t.Parallel()
	w, dir := detect(t)
	sbx, ws := sandboxDir(t, dir, "sbx-discard")
	if err := w.Create(t.Context(), sbx, 0, 64); err != nil {
		t.Fatal(err)
	}
	write := func() error { return os.WriteFile(filepath.Join(ws, "f"), make([]byte, 1<<20), 0o600) }
	if err := write(); err != nil {
		t.Fatal(err)
	}
	discard(ws, filepath.Join(dir, "other", ImageFile)) // not its image
	discard(dir, filepath.Join(dir, ImageFile))         // not a workspace
	if err := write(); err != nil {
		t.Fatalf("after discarding what is not the workspace's: %v", err)
	}
	discard(ws, filepath.Join(hostos.RealPath(sbx), ImageFile))
	if err := write(); err == nil {
		t.Error("the workspace's file system still takes writes after its discard")
	}
}
