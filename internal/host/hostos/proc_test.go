package hostos

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestProcesses: a process started here is listed by its command's base
// name, with its parent, its command line and its working directory (as
// the local provider finds a sandbox's bwrap monitor by its folder).
func TestProcesses(t *testing.T) {
	dir := t.TempDir()
	// A copy of sleep under a name no other process has.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostos-proc-test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30") //nolint:noctx // killed below
	cmd.Dir, cmd.Env = dir, []string{"PATH=" + DefaultPath}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	procs, err := Processes("hostos-proc-test")
	if err != nil {
		t.Fatal(err)
	}
	want := Process{PID: cmd.Process.Pid, PPID: os.Getpid(), Args: []string{bin, "30"}, Cwd: dir}
	if len(procs) != 1 || procs[0].PID != want.PID || procs[0].PPID != want.PPID ||
		!slices.Equal(procs[0].Args, want.Args) || procs[0].Cwd != want.Cwd {
		t.Fatalf("Processes = %+v, want [%+v]", procs, want)
	}
	if procs, err := Processes("no-such-command-here"); err != nil || len(procs) != 0 {
		t.Errorf("Processes of a command nothing runs = %+v, %v; want none", procs, err)
	}
}

func TestStatFields(t *testing.T) {
	fields, err := StatFields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// State, then the parent: the command name with its parentheses is gone.
	if len(fields) < 20 || fields[1] != strconv.Itoa(os.Getppid()) {
		t.Errorf("StatFields = %q, want the state then ppid %d", fields, os.Getppid())
	}
	if _, err := StatFields(-1); err == nil {
		t.Error("StatFields of no process: no error")
	}
	if got := SplitNUL([]byte("a\x00b c\x00")); !slices.Equal(got, []string{"a", "b c"}) {
		t.Errorf("SplitNUL = %q", got)
	}
}
