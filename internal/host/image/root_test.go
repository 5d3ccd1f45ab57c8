package image

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestHostRootArgs: the host's root binds its system folders (or repeats
// their symbolic links, as merged-/usr hosts have them) and the curated
// /etc entries it has, nothing else of /etc.
func TestHostRootArgs(t *testing.T) {
	t.Parallel()
	args := strings.Join(HostRootArgs(), " ")
	if !strings.Contains(args, "--ro-bind /usr /usr") {
		t.Errorf("no /usr in %s", args)
	}
	for _, dir := range []string{"/bin", "/lib"} {
		info, err := os.Lstat(dir)
		if err != nil {
			continue
		}
		want := "--ro-bind " + dir + " " + dir
		if info.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(dir)
			want = "--symlink " + target + " " + dir
		}
		if !strings.Contains(args, want) {
			t.Errorf("%s: want %q in %s", dir, want, args)
		}
	}
	if _, err := os.Stat("/etc/nsswitch.conf"); err == nil && !strings.Contains(args, "/etc/nsswitch.conf /etc/nsswitch.conf") {
		t.Errorf("no /etc/nsswitch.conf in %s", args)
	}
	for _, never := range []string{"/etc/passwd", "/etc/shadow", "/etc/hostname", "/home", "/root"} {
		if strings.Contains(args, " "+never+" ") || strings.HasSuffix(args, " "+never) {
			t.Errorf("the host's %s is in %s", never, args)
		}
	}
}

// TestRootArgs: an image's top-level entries and its /etc's are bound
// read-only or repeated as links, but for what the sandbox has of its own
// and for kinds that are neither files, folders nor links.
func TestRootArgs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, dir := range []string{"usr/bin", "etc", "proc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/passwd", "etc/os-release", "file"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	args, err := RootArgs(root, map[string]bool{"passwd": true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--symlink", "usr/bin", "/bin",
		"--ro-bind", filepath.Join(root, "file"), "/file",
		"--ro-bind", filepath.Join(root, "usr"), "/usr",
		"--dir", "/etc",
		"--ro-bind", filepath.Join(root, "etc/os-release"), "/etc/os-release",
	}
	if !slices.Equal(args, want) {
		t.Errorf("RootArgs =\n%q\nwant\n%q", args, want)
	}
}

// TestFolderRoot: a folder image's root is the folder, its links
// resolved; one the sandbox users cannot reach is refused, naming why.
func TestFolderRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if root, err := (Image{Name: "x", Path: link}).Root(t.TempDir()); err != nil || root != real {
		t.Errorf("Root = %q, %v; want %s", root, err, real)
	}
	if err := os.Chmod(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := (Image{Name: "x", Path: real}).Root(t.TempDir()); err == nil || !strings.Contains(err.Error(), "needs o+x") {
		t.Errorf("Root of an unreachable folder = %v", err)
	}
}
