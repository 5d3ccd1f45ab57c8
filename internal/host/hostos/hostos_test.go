package hostos

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestToolsGetAMinimalEnvironment(t *testing.T) {
	t.Setenv("TETHER_SENTINEL", "secret")
	out := filepath.Join(t.TempDir(), "env")
	if err := RunTool(t.Context(), "", "/bin/sh", "-c", "env > "+out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if name, _, _ := strings.Cut(line, "="); name != "PWD" && name != "SHLVL" && name != "_" { // the shell's own
			got = append(got, line)
		}
	}
	slices.Sort(got)
	if want := []string{"LANG=C", "PATH=" + DefaultPath}; !slices.Equal(got, want) {
		t.Errorf("a tool's environment = %q; want %q", got, want)
	}
}

func TestRunToolReportsItsOutput(t *testing.T) {
	err := RunTool(t.Context(), "in", "/bin/sh", "-c", "cat; echo ' and out' >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "in and out") {
		t.Fatalf("RunTool = %v; want the tool's input echoed in the error", err)
	}
}

func TestLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		second, err := Lock(path)
		if err != nil {
			t.Error(err)
			second = func() {}
		}
		got <- second
	}()
	select {
	case second := <-got:
		second()
		t.Fatal("a second Lock got the lock while the first held it")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	select {
	case second := <-got:
		second()
	case <-time.After(10 * time.Second):
		t.Fatal("the second Lock did not get the lock once the first let go")
	}
}

func TestOnOwnThread(t *testing.T) {
	var tid int
	if err := OnOwnThread(func() error { tid = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	if tid == unix.Getpid() {
		t.Error("fn ran on the process's main thread")
	}
	// The thread ends with fn: its tid is gone from the process.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join("/proc/self/task", strconv.Itoa(tid))); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d outlived fn", tid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUntraversable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Untraversable(inner); got != "" && !strings.HasPrefix(dir, got) {
		t.Fatalf("Untraversable(%s) = %q", inner, got)
	}
	if err := os.Chmod(filepath.Join(dir, "a"), 0o750); err != nil {
		t.Fatal(err)
	}
	if got := Untraversable(inner); got != filepath.Join(dir, "a") {
		t.Errorf("Untraversable(%s) = %q; want %s", inner, got, filepath.Join(dir, "a"))
	}
}

func TestFreeMBAndRealPath(t *testing.T) {
	dir := t.TempDir()
	if FreeMB(dir) <= 0 {
		t.Errorf("FreeMB(%s) = %d", dir, FreeMB(dir))
	}
	if FreeMB(filepath.Join(dir, "missing")) != 0 {
		t.Error("FreeMB of a missing folder is not 0")
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if got, want := RealPath(link), RealPath(dir); got != want {
		t.Errorf("RealPath(link) = %s; want %s", got, want)
	}
	if got := RealPath(filepath.Join(dir, "missing")); got != filepath.Join(dir, "missing") {
		t.Errorf("RealPath of a missing path = %s", got)
	}
}

func TestMissing(t *testing.T) {
	if got := Missing(Tool{Path: "/bin/sh", What: "sh"}); got != "" {
		t.Errorf("Missing of a present tool = %q", got)
	}
	if got, want := Missing(Tool{What: "a (pkg a)"}, Tool{Path: "/x", What: "x"}, Tool{What: "b (pkg b)"}), "missing on this host: a (pkg a), b (pkg b)"; got != want {
		t.Errorf("Missing = %q; want %q", got, want)
	}
}
