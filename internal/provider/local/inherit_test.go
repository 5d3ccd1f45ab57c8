package local_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/provider"
)

// TestInheritedDescriptorsStayOut: a descriptor Tether inherited without
// close-on-exec (as flock(1) hands its lock to the command it runs) reaches
// no process of a sandbox: not bubblewrap, the keeper, the init or an exec.
// Not parallel: a sandbox another test started while the descriptor is
// open would rightly hold it too.
func TestInheritedDescriptorsStayOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inherited")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0) // no O_CLOEXEC: as if inherited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	p, _ := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	if r := run(t, p, id, `sleep 0.1; ls /proc/self/fd | wc -l`); r.ExitCode != 0 {
		t.Fatalf("exec: exit %d: %s", r.ExitCode, r.Output)
	}
	if holders := holdersOf(t, path); len(holders) > 0 {
		t.Errorf("processes other than the test hold the inherited descriptor: %v", holders)
	}
}

// holdersOf lists the processes, other than this one, with path open.
func holdersOf(t *testing.T, path string) []string {
	t.Helper()
	fds, err := filepath.Glob("/proc/[0-9]*/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/"
	var out []string
	for _, f := range fds {
		if strings.HasPrefix(f, self) {
			continue
		}
		if target, err := os.Readlink(f); err == nil && target == path {
			pid := strings.Split(f, "/")[2]
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			out = append(out, pid+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}
