package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBareBwrapArgs(t *testing.T) {
	t.Parallel()
	dir, mirror := "/state/sbx_1", "/bench/bare"
	cmdline := []string{
		"--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", dir + "/etc/passwd", "/etc/passwd",
		"--ro-bind-data", "7", "/etc/group", "--ro-bind-data", "8", "/etc/hosts",
		"--bind", dir + "/workspace", "/workspace", "--hostname", "sbx-1", "--unshare-net",
		"--seccomp", "4", "--info-fd", "3", "--", "sh", "-c", "echo ready; exec sleep infinity " + dir + "/x",
	}
	args, paths, dests, err := bareBwrapArgs(cmdline, dir, mirror)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", mirror + "/etc/passwd", "/etc/passwd",
		"--ro-bind-data", "6", "/etc/group", "--ro-bind-data", "7", "/etc/hosts",
		"--bind", mirror + "/workspace", "/workspace", "--hostname", "sbx-1", "--unshare-net",
		"--info-fd", "3", "--", "sh", "-c", "echo ready; exec sleep infinity " + dir + "/x",
	}
	if !slices.Equal(args, want) {
		t.Errorf("args:\n got %q\nwant %q", args, want)
	}
	if want := []string{"etc/passwd", "workspace"}; !slices.Equal(paths, want) {
		t.Errorf("paths = %q, want %q", paths, want)
	}
	if want := []string{"/etc/group", "/etc/hosts"}; !slices.Equal(dests, want) {
		t.Errorf("dests = %q, want %q", dests, want)
	}
}

// TestBareBwrapArgsWithoutExecServer: the baseline's init is the sh that
// says ready, not the exec server, whose descriptors it does not pass.
func TestBareBwrapArgsWithoutExecServer(t *testing.T) {
	t.Parallel()
	cmdline := []string{"--tmpfs", "/", "--", "/bin/sh", "-c", "script", "sh", "1024", "9", "10"}
	args, _, _, err := bareBwrapArgs(cmdline, "/state/sbx_1", "/bare")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--tmpfs", "/", "--info-fd", "3", "--", "/bin/sh", "-c", "script", "sh", "1024", "", ""}; !slices.Equal(args, want) {
		t.Errorf("args:\n got %q\nwant %q", args, want)
	}
}

func TestBareBwrapArgsRefuses(t *testing.T) {
	t.Parallel()
	for name, cmdline := range map[string][]string{
		"args from a descriptor":   {"--args", "5", "--", "true"},
		"a file from a descriptor": {"--file", "5", "/etc/x", "--", "true"},
		"no command":               {"--tmpfs", "/", "--unshare-pid"},
	} {
		if _, _, _, err := bareBwrapArgs(cmdline, "/state/sbx_1", "/bare"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSandboxInit(t *testing.T) {
	t.Parallel()
	const prefix = "/state/sbx_2/"
	procs := []bwrapProcess{
		{PID: 10, PPID: 1, Args: []string{"bwrap", "--bind", "/state/sbx_1/workspace", "/workspace"}},
		{PID: 11, PPID: 10, Args: []string{"bwrap", "--bind", "/state/sbx_1/workspace", "/workspace"}},
		{PID: 20, PPID: 5, Args: []string{"bwrap", "--bind", prefix + "workspace", "/workspace"}},
		{PID: 21, PPID: 20, Args: []string{"bwrap", "--bind", prefix + "workspace", "/workspace"}},
	}
	got, err := sandboxInit(procs, prefix)
	if err != nil || got != 21 {
		t.Errorf("sandboxInit = %d, %v; want 21", got, err)
	}
	if _, err := sandboxInit(procs[:3], prefix); err == nil {
		t.Error("a sandbox with no init running: no error")
	}
	// The provider's bwrap now runs in the sandbox's folder, its options
	// read from bwrap.args: only its monitor names the folder.
	procs = []bwrapProcess{
		{PID: 30, PPID: 1, Args: []string{"bwrap", "--args", "9", "--", "/bin/sh"}, Cwd: "/state/sbx_1"},
		{PID: 31, PPID: 30, Args: []string{"bwrap", "--args", "9", "--", "/bin/sh"}, Cwd: "/workspace"},
		{PID: 40, PPID: 7, Args: []string{"bwrap", "--args", "9", "--", "/bin/sh"}, Cwd: "/state/sbx_2"},
		{PID: 41, PPID: 40, Args: []string{"bwrap", "--args", "9", "--", "/bin/sh"}, Cwd: "/workspace"},
	}
	if got, err := sandboxInit(procs, prefix); err != nil || got != 41 {
		t.Errorf("sandboxInit by folder = %d, %v; want 41", got, err)
	}
}

func TestMonitorArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bwrap.args"), []byte("--tmpfs\x00/\x00--info-fd\x003\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := monitorArgs([]string{"bwrap", "--args", "9", "--", "/bin/sh", "-c", "x"}, dir)
	if want := []string{"--tmpfs", "/", "--info-fd", "3", "--", "/bin/sh", "-c", "x"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("monitorArgs = %q, %v; want %q", got, err, want)
	}
	if got, err := monitorArgs([]string{"/usr/bin/bwrap", "--tmpfs", "/", "--", "sh"}, dir); err != nil || !slices.Equal(got, []string{"--tmpfs", "/", "--", "sh"}) {
		t.Errorf("monitorArgs of an older command line = %q, %v", got, err)
	}
}

func TestStatusUID(t *testing.T) {
	t.Parallel()
	status := "Name:\tbwrap\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t100042\t100042\t100042\t100042\nGid:\t100042\t100042\t100042\t100042\n"
	if got, err := statusUID(status); err != nil || got != 100042 {
		t.Errorf("statusUID = %d, %v; want 100042", got, err)
	}
	if _, err := statusUID(strings.ReplaceAll(status, "Uid:", "Xid:")); err == nil {
		t.Error("no Uid line: no error")
	}
}

func TestReadySteps(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	var s readySteps
	events := []event{{At: at(2), To: "requested"}, {At: at(5), To: "creating"}, {At: at(45), To: "ready"}, {At: at(90), To: "terminated"}}
	if err := s.add(t0, at(50), events); err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{s.request[0], s.claim[0], s.provider[0], s.notice[0]}
	want := []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond, 5 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	if want := "POST → requested 2.0 ms, requested → claimed 3.0 ms, claimed → ready (claim query + provider create) 40.0 ms, ready → seen by the wait 5.0 ms"; s.String() != want {
		t.Errorf("String() = %q, want %q", s.String(), want)
	}
	if err := s.add(t0, at(50), events[:2]); err == nil {
		t.Error("no ready event: no error")
	}
}
