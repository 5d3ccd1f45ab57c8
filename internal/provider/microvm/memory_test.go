package microvm_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/microvm"
	"github.com/tetherhq/tether/internal/provider/microvm/microvmtest"
	"github.com/tetherhq/tether/provider"
)

// counterScript starts a loop that counts into /workspace/n, and into a
// file it holds open and has deleted (only its memory keeps it), and
// writes its pid.
const counterScript = `(exec 7>/tmp/held; rm /tmp/held; sh -c 'echo $PPID' > /workspace/pid;
i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; echo $i >&7; sleep 0.1; done) </dev/null >/dev/null 2>&1 &`

type vm struct {
	t  *testing.T
	p  *microvm.Provider
	id string
}

func (v vm) run(cmd string) string {
	v.t.Helper()
	out, err := v.p.Exec(v.t.Context(), v.id, provider.ExecRequest{Command: cmd, Timeout: time.Minute})
	if err != nil || out.ExitCode != 0 {
		v.t.Fatalf("%s in %s: %v %+v", cmd, v.id, err, out)
	}
	return strings.TrimSpace(out.Output)
}

// count reads the counter; 0 before its first write.
func (v vm) count() int {
	v.t.Helper()
	n, _ := strconv.Atoi(v.run("cat /workspace/n 2>/dev/null || true"))
	return n
}

// waitCount waits until the counter passes n.
func (v vm) waitCount(n int) int {
	v.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if c := v.count(); c > n {
			return c
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("the counter of %s does not pass %d", v.id, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func create(t *testing.T, p *microvm.Provider, from string) vm {
	t.Helper()
	id := provider.NewSandboxID()
	start := time.Now()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, FromSnapshot: from}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s made in %s (from %q)", id, time.Since(start).Round(time.Millisecond), from)
	t.Cleanup(func() { _ = p.Destroy(t.Context(), id) })
	return vm{t, p, id}
}

// TestMemorySnapshotForks: copies made from a memory snapshot of a
// running sandbox resume its processes where they were (the same pid,
// counting on from the snapshot's value, a deleted file still held open),
// while the original runs on; each copy has its own host name, machine id,
// random numbers and the host's time.
func TestMemorySnapshotForks(t *testing.T) {
	p := microvmtest.New(t, t.TempDir())
	orig := create(t, p, "")
	orig.run(counterScript)
	before := orig.waitCount(3)
	pid := orig.run("cat /workspace/pid")

	snap := provider.NewSnapshotID()
	start := time.Now()
	size, err := p.SnapshotMemory(t.Context(), orig.id, snap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory snapshot: %d bytes on disk, the original stopped for at most %s", size, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _ = p.DeleteSnapshot(t.Context(), snap) })
	orig.waitCount(orig.count())

	a, b := create(t, p, snap), create(t, p, snap)
	names := map[string]bool{orig.run("hostname"): true}
	ids := map[string]bool{orig.run("cat /etc/machine-id"): true}
	randoms := map[string]bool{}
	for _, c := range []vm{a, b} {
		if got := c.run("cat /workspace/pid"); got != pid {
			t.Errorf("the copy's pid file says %s, want %s", got, pid)
		}
		n := c.waitCount(before)
		if n < before {
			t.Errorf("the copy counts from %d, below the %d it had before the snapshot", n, before)
		}
		if held := c.run("tail -n 1 /proc/" + pid + "/fd/7"); held == "" {
			t.Error("the copy's counter no longer holds its deleted file")
		}
		names[c.run("hostname")] = true
		ids[c.run("cat /etc/machine-id")] = true
		randoms[c.run("od -An -tx1 -N16 /dev/urandom")] = true
		guest, err := strconv.ParseInt(c.run("date +%s"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Now().Unix() - guest; d > 10 || d < -10 {
			t.Errorf("the copy's clock is %d s off the host's", d)
		}
	}
	if len(names) != 3 || len(ids) != 3 || len(randoms) != 2 {
		t.Errorf("the original and copies share names %v, machine ids %v or random numbers %v", names, ids, randoms)
	}
}
