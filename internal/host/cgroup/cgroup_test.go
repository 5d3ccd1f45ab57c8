package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// detect makes a parent group of the test's own, removed at its end.
func detect(t *testing.T) *Groups {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("control groups need root")
	}
	g, err := Detect("tether-test-cg-" + hostos.RandomSuffix())
	if err != nil {
		t.Skipf("no control groups to manage here: %v", err)
	}
	t.Cleanup(func() {
		if err := g.RemoveParents(); err != nil {
			t.Errorf("removing the test's parent: %v", err)
		}
	})
	return g
}

// file reads the control file name of the group that has it among dirs.
func file(t *testing.T, dirs []string, name string) string {
	t.Helper()
	for _, dir := range dirs {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no %s in %v", name, dirs)
	return ""
}

// startIn starts argv in the groups dirs from the first instruction.
func startIn(t *testing.T, g *Groups, dirs []string, argv ...string) *exec.Cmd {
	t.Helper()
	//nolint:noctx // killed by the test
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := hostos.OnOwnThread(func() error {
		done, err := g.Enter(dirs, cmd.SysProcAttr)
		if err != nil {
			return err
		}
		defer done()
		return cmd.Start()
	}); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func procs(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// TestSandboxGroup: a sandbox's group holds its limits, and a process
// started in it is counted there from the start; an exec group's kill takes every process in it and nothing else; Remove takes
// the groups once their processes are gone.
func TestSandboxGroup(t *testing.T) {
	g := detect(t)
	if err := g.SetCeiling(900, 2048); err != nil {
		t.Fatal(err)
	}
	if got := file(t, g.Parents(), "pids.max"); got != "900" {
		t.Errorf("the parent's pids.max = %s; want 900", got)
	}
	const id = "sbx-cgroup-test"
	if err := g.Create(id, 8, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clear(t, g, id) })
	dirs := g.Dirs(id)
	if got := file(t, dirs, "pids.max"); got != "8" {
		t.Errorf("pids.max = %s; want 8", got)
	}
	memFile := "memory.limit_in_bytes"
	if g.V2() {
		memFile = "memory.max"
	}
	if got := file(t, dirs, memFile); got != strconv.Itoa(64<<20) {
		t.Errorf("%s = %s; want %d", memFile, got, 64<<20)
	}

	sleeper := startIn(t, g, dirs, "sleep", "60")
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if got := procs(t, dirs[0]); !slices.Contains(got, sleeper.Process.Pid) {
		t.Errorf("the group's processes %v lack the one started in it, %d", got, sleeper.Process.Pid)
	}

	exg, err := g.NewExecGroup(id)
	if err != nil {
		t.Fatal(err)
	}
	defer exg.Release()

	// An exec group: its kill takes the detached and the rest alike.
	detached := startIn(t, g, exg.Dirs(), "sh", "-c", `setsid sleep 60 & sleep 60`)
	for deadline := time.Now().Add(5 * time.Second); len(procs(t, exg.Dirs()[0])) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the exec group holds %v", procs(t, exg.Dirs()[0]))
		}
	}
	exg.Kill()
	_ = detached.Wait()
	if left := procs(t, exg.Dirs()[0]); len(left) > 0 {
		t.Errorf("after Kill the exec group holds %v", left)
	}
	if err := syscall.Kill(sleeper.Process.Pid, 0); err != nil {
		t.Errorf("the exec group's kill reached the sandbox's other process: %v", err)
	}
	if n := g.OOMKills(id); n != 0 {
		t.Errorf("OOMKills = %d; want 0", n)
	}

	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	for range 100 { // the kernel frees a group's last process a moment after it died
		if len(procs(t, dirs[0])) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Remove(id); err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", dir, err)
		}
	}
}

// TestSelfJoin: a process of the sandbox moves itself into an exec group
// through the file OpenSelfJoin opened, as another user, and what it then
// forks is born there; Holds says so, and not of a process elsewhere.
func TestSelfJoin(t *testing.T) {
	g := detect(t)
	const id = "sbx-cgroup-selfjoin"
	if err := g.Create(id, 16, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clear(t, g, id) })
	exg, err := g.NewExecGroup(id)
	if err != nil {
		t.Fatal(err)
	}
	defer exg.Release()
	join, err := exg.OpenSelfJoin()
	if err != nil {
		t.Fatal(err)
	}
	if join == nil {
		t.Skip("no tasks file (cgroup v2): processes are moved, not moved by themselves")
	}
	defer func() { _ = join.Close() }()
	// As nobody, with the file as descriptor 3: the shell's background
	// list (a subshell) moves itself and forks a sleep; the shell itself
	// stays in the sandbox's group.
	//nolint:noctx // killed by the test
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", `echo 0 >&3 && exec 3>&- && sleep 60 & wait`)
	cmd.ExtraFiles = []*os.File{join}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := hostos.OnOwnThread(func() error {
		done, err := g.Enter(g.Dirs(id), cmd.SysProcAttr)
		if err != nil {
			return err
		}
		defer done()
		return cmd.Start()
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	if exg.Holds(cmd.Process.Pid) {
		t.Errorf("the exec group holds %d, which did not join it", cmd.Process.Pid)
	}
	var born []int
	for deadline := time.Now().Add(5 * time.Second); len(born) == 0; time.Sleep(10 * time.Millisecond) {
		born = procs(t, exg.Dirs()[0])
		if time.Now().After(deadline) {
			t.Fatal("nothing joined the exec group by itself")
		}
	}
	for _, pid := range born {
		if !exg.Holds(pid) {
			t.Errorf("Holds(%d) = false for a process in the group", pid)
		}
	}
	exg.Kill()
}

// TestPidsLimit: a group's processes cannot outnumber its pids limit.
func TestPidsLimit(t *testing.T) {
	g := detect(t)
	const id = "sbx-cgroup-storm"
	if err := g.Create(id, 4, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clear(t, g, id) })
	storm := startIn(t, g, g.Dirs(id), "sh", "-c", `for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done; wait`)
	defer func() { _ = storm.Wait() }()
	time.Sleep(200 * time.Millisecond)
	if got := procs(t, g.Dirs(id)[0]); len(got) == 0 || len(got) > 4 {
		t.Errorf("%d processes in a group of at most 4", len(got))
	}
}

// clear kills what is left in the sandbox's groups and removes them.
func clear(t *testing.T, g *Groups, id string) {
	t.Helper()
	if _, err := os.Stat(g.Dirs(id)[0]); os.IsNotExist(err) {
		return // removed by the test
	}
	for range 100 {
		left := procs(t, g.Dirs(id)[0])
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Remove(id); err != nil {
		t.Error(err)
	}
}

// TestKeepersGroup: the keepers' group sits beside the sandboxes', once.
func TestKeepersGroup(t *testing.T) {
	g := detect(t)
	dirs, err := g.KeeperDirs()
	if err != nil {
		t.Fatal(err)
	}
	again, err := g.KeeperDirs()
	if err != nil || !slices.Equal(dirs, again) {
		t.Fatalf("KeeperDirs twice = %v, %v; want %v", again, err, dirs)
	}
	for i, dir := range dirs {
		if filepath.Dir(dir) != g.Parents()[i] {
			t.Errorf("the keepers' group %s is not in the parent %s", dir, g.Parents()[i])
		}
	}
}

func TestHostMemory(t *testing.T) {
	if mem := HostMemory(); mem < 64<<20 {
		t.Errorf("HostMemory = %d", mem)
	}
	if n := ReadInt("/proc/sys/kernel/pid_max"); n <= 0 {
		t.Errorf("ReadInt(pid_max) = %d", n)
	}
}
