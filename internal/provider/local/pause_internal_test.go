package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The acceptance tests of pausing real bubblewrap sandboxes: a paused
// sandbox burns no CPU and keeps its processes, memory and files; it
// resumes as it was, again and again; and however it ends, none of its
// processes is left behind. Like the package's other tests they need root,
// bwrap and control groups with the freezer.

// pausable returns a provider whose sandboxes live in a parent group of
// the test's own, and a sandbox in it.
func pausable(t *testing.T) (*Provider, string, string) {
	t.Helper()
	p, dir := newSharedProvider(t, Limits{}, Limits{})
	id, err := createAs(t, p, "t-pause", "")
	if err != nil {
		t.Fatal(err)
	}
	if !p.cg.CanFreeze(id) {
		t.Fatal("the sandbox has no freezer group: this host's cgroup freezer is missing")
	}
	// Before the destroy of createAs: a test that failed with the sandbox
	// frozen leaves no frozen process behind (under v1 the destroy alone
	// would not end them if the code under test were broken).
	t.Cleanup(func() { _ = p.cg.KillFrozen(context.Background(), id) })
	return p, dir, id
}

// mustRun runs command in the sandbox and returns its output; it must
// succeed.
func mustRun(t *testing.T, p *Provider, id, command string) string {
	t.Helper()
	res := mustExec(t, p, id, command)
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%q) = %+v", command, res)
	}
	return res.Output
}

// mustExec runs command in the sandbox and returns how it ended; the
// provider must not fail.
func mustExec(t *testing.T, p *Provider, id, command string) provider.ExecResult {
	t.Helper()
	res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: command, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}

func mustPause(t *testing.T, p *Provider, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Pause(ctx, id); err != nil {
		t.Fatalf("Pause: %v", err)
	}
}

func mustResume(t *testing.T, p *Provider, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Resume(ctx, id); err != nil {
		t.Fatalf("Resume: %v", err)
	}
}

// cpuTicks is the CPU time the sandbox's processes used so far: under v2
// its group's cpu.stat usage (microseconds), under v1 (whose sandbox
// groups have no cpuacct) the user and system time, in clock ticks, of
// every process its pids groups hold, summed from /proc/<pid>/stat.
func cpuTicks(t *testing.T, p *Provider, id string) (used int64, unit time.Duration) {
	t.Helper()
	if p.cg.V2() {
		b, err := os.ReadFile(filepath.Join(p.cg.Dirs(id)[0], "cpu.stat"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n, time.Microsecond
			}
		}
		t.Fatal("cpu.stat has no usage_usec")
	}
	for _, pid := range p.cg.Procs(id) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		used += utime + stime
	}
	return used, 10 * time.Millisecond // USER_HZ 100
}

// cpuOver is the CPU time the sandbox used over d.
func cpuOver(t *testing.T, p *Provider, id string, d time.Duration) time.Duration {
	t.Helper()
	before, unit := cpuTicks(t, p, id)
	time.Sleep(d)
	after, _ := cpuTicks(t, p, id)
	return time.Duration(after-before) * unit
}

// rss is the resident anonymous memory of the sandbox's memory group, in
// bytes (v1 memory.stat total_rss, v2 memory.stat anon).
func rss(t *testing.T, p *Provider, id string) int64 {
	t.Helper()
	dir, key := p.cg.Dirs(id)[0], "anon "
	if !p.cg.V2() {
		dir, key = p.cg.Dirs(id)[1], "total_rss "
	}
	b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("memory.stat has no %q", key)
	return 0
}

// TestPausedSandboxUsesNoCPU: a busy loop that burns CPU before the pause
// burns none while paused; the sandbox keeps its processes and its memory
// (the 32 MiB a process holds stays resident); after the resume the same
// loop burns CPU again and the files are as they were.
func TestPausedSandboxUsesNoCPU(t *testing.T) {
	p, _, id := pausable(t)
	mustRun(t, p, id, `(while :; do :; done) </dev/null >/dev/null 2>&1 & echo $! > /workspace/busy`)
	// 32 MiB held resident by a process that then sleeps.
	mustRun(t, p, id, `(x=$(head -c 33554432 /dev/zero | tr '\0' a); echo held > /tmp/held; sleep 3600; echo "$x" >/dev/null) </dev/null >/dev/null 2>&1 &`)
	mustRun(t, p, id, `head -c 200000 /dev/urandom > /workspace/data; sha256sum /workspace/data > /workspace/data.sum`)
	for deadline := time.Now().Add(20 * time.Second); mustRun(t, p, id, `cat /tmp/held 2>/dev/null || true`) != "held\n"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the memory holder never filled its memory")
		}
	}
	busy := strings.TrimSpace(mustRun(t, p, id, `cat /workspace/busy`))
	if used := cpuOver(t, p, id, time.Second); used < 50*time.Millisecond {
		t.Fatalf("the busy loop used %s of CPU in 1s before the pause: it does not run", used)
	} else {
		t.Logf("running: %s of CPU over 1s", used)
	}

	mustPause(t, p, id)
	procs, memory := p.cg.Procs(id), rss(t, p, id)
	if memory < 32<<20 {
		t.Errorf("the sandbox holds %d bytes resident when paused, want at least the 32 MiB its process holds", memory)
	}
	used := cpuOver(t, p, id, time.Second)
	t.Logf("paused: %s of CPU over 1s, %d processes, %d bytes resident", used, len(procs), memory)
	if used > 20*time.Millisecond {
		t.Errorf("the paused sandbox used %s of CPU over 1s, want none", used)
	}
	if after := p.cg.Procs(id); !sameSet(after, procs) {
		t.Errorf("the paused sandbox's processes changed: %v, then %v", procs, after)
	}
	if after := rss(t, p, id); after != memory {
		t.Errorf("the paused sandbox's resident memory went from %d to %d bytes", memory, after)
	}

	mustResume(t, p, id)
	if used := cpuOver(t, p, id, time.Second); used < 50*time.Millisecond {
		t.Errorf("the busy loop used %s of CPU in 1s after the resume: it does not run", used)
	} else {
		t.Logf("resumed: %s of CPU over 1s", used)
	}
	if got := mustRun(t, p, id, `kill -0 `+busy+` && sha256sum -c --quiet /workspace/data.sum && cat /tmp/held && echo ok`); got != "held\nok\n" {
		t.Errorf("after the resume: %q, want the busy loop alive, the data intact and /tmp/held", got)
	}
	if after := p.cg.Procs(id); len(after) < len(procs)-2 {
		t.Errorf("processes lost over the pause: %v, then %v", procs, after)
	}
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[int]bool{}
	for _, x := range a {
		in[x] = true
	}
	for _, x := range b {
		if !in[x] {
			return false
		}
	}
	return true
}

// TestPauseResumeCycles: 20 pauses and resumes of one sandbox all succeed;
// while paused, commands are refused as a state conflict, at once; after
// each resume a background counter started before the first pause runs.
func TestPauseResumeCycles(t *testing.T) {
	t.Parallel()
	p, _, id := pausable(t)
	mustRun(t, p, id, `(i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; sleep 0.01; done) </dev/null >/dev/null 2>&1 &`)
	count := func() int {
		n, _ := strconv.Atoi(strings.TrimSpace(mustRun(t, p, id, `cat /workspace/n 2>/dev/null || echo 0`)))
		return n
	}
	last := 0
	for i := range 20 {
		mustPause(t, p, id)
		if !p.cg.Frozen(id) {
			t.Fatalf("cycle %d: paused, but the group is not frozen", i)
		}
		start := time.Now()
		_, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: "true", Timeout: 10 * time.Second})
		if provider.ErrorCode(err) != provider.CodeStateConflict || !provider.IsPaused(err) {
			t.Fatalf("cycle %d: exec on the paused sandbox: %v, want SANDBOX_STATE_CONFLICT (paused)", i, err)
		}
		var buf bytes.Buffer
		if err := p.ReadFile(t.Context(), id, "/workspace/n", &buf, 1<<10); provider.ErrorCode(err) != provider.CodeStateConflict {
			t.Fatalf("cycle %d: reading a file of the paused sandbox: %v, want SANDBOX_STATE_CONFLICT", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("cycle %d: refusing took %s", i, took)
		}
		mustResume(t, p, id)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n := count()
			if n > last {
				last = n
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cycle %d: the counter is stuck at %d after the resume", i, n)
			}
		}
	}
}

// TestDestroyPausedLeavesNoProcess: destroying a paused sandbox (with a
// detached background process, and an exec frozen mid-command) ends every
// one of its processes and removes its groups, the freezer's too, and
// does so promptly: a v1-frozen process would not die of the SIGKILL
// alone, and Destroy would wait for it until its context ended.
func TestDestroyPausedLeavesNoProcess(t *testing.T) {
	t.Parallel()
	p, _, id := pausable(t)
	mustRun(t, p, id, `setsid sleep 3601 </dev/null >/dev/null 2>&1 &`)
	execDone := make(chan struct{})
	go func() { // an exec under way when the sandbox is paused
		defer close(execDone)
		_, _ = p.Exec(context.Background(), id, provider.ExecRequest{Command: "sleep 3602", Timeout: time.Hour})
	}()
	for deadline := time.Now().Add(20 * time.Second); len(pgrepAll(t, "sleep 3602")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exec never started")
		}
	}
	mustPause(t, p, id)
	procs := p.cg.Procs(id)
	if len(procs) < 4 {
		t.Fatalf("the paused sandbox has processes %v, want its init, bwrap, the sleeps and the exec's", procs)
	}
	dirs := append(p.cg.Dirs(id), p.cg.FreezerDir(id))
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy of the paused sandbox: %v", err)
	}
	t.Logf("destroyed a paused sandbox of %d processes in %s", len(procs), time.Since(start))
	for _, pid := range procs {
		if processRunning(pid) { // a zombie is dead, waiting for the host's pid 1
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d of the paused sandbox survived its destroy: %s", pid, stat)
		}
	}
	for _, marker := range []string{"sleep 3601", "sleep 3602"} {
		if left := pgrepAll(t, marker); len(left) > 0 {
			t.Errorf("%q survived the destroy: %v", marker, left)
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the group %s is left after the destroy", dir)
		}
	}
	select {
	case <-execDone:
	case <-time.After(10 * time.Second):
		t.Error("the exec under way did not return after the destroy")
	}
}

// TestExecFrozenMidCommandTimesOut: an exec whose sandbox is paused under
// it still ends at its timeout, its command killed and the sandbox left
// paused; an exec whose caller goes away ends too.
func TestExecFrozenMidCommandTimesOut(t *testing.T) {
	t.Parallel()
	p, _, id := pausable(t)
	type result struct {
		res provider.ExecResult
		err error
	}
	started := func(marker string, ctx context.Context, timeout time.Duration) <-chan result {
		done := make(chan result, 1)
		go func() {
			res, err := p.Exec(ctx, id, provider.ExecRequest{Command: "echo before; " + marker, Timeout: timeout})
			done <- result{res, err}
		}()
		for deadline := time.Now().Add(20 * time.Second); len(pgrepAll(t, marker)) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the exec never started")
			}
		}
		return done
	}
	timedOut := started("sleep 3603", t.Context(), 3*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := started("sleep 3604", ctx, time.Hour)
	mustPause(t, p, id)
	cancel()
	for name, done := range map[string]<-chan result{"timed out": timedOut, "cancelled": cancelled} {
		select {
		case r := <-done:
			if name == "timed out" && (r.err != nil || !r.res.TimedOut) {
				t.Errorf("the exec frozen mid-command = %+v, %v; want it timed out", r.res, r.err)
			}
			if name == "cancelled" && r.err == nil {
				t.Errorf("the cancelled exec frozen mid-command = %+v, want its context's error", r.res)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the %s exec frozen mid-command never returned", name)
		}
	}
	for _, marker := range []string{"sleep 3603", "sleep 3604"} {
		if left := pgrepAll(t, marker); len(left) > 0 {
			t.Errorf("%q survived its exec's end: %v", marker, left)
		}
	}
	if !p.cg.Frozen(id) {
		t.Error("ending an exec thawed the paused sandbox")
	}
	mustResume(t, p, id)
	if got := mustRun(t, p, id, "echo up"); got != "up\n" {
		t.Errorf("after the resume: %q", got)
	}
}

// TestPausedSandboxAfterRestart: a Tether killed while its sandbox was
// paused leaves it frozen; the next one lists it (not defunct), refuses
// commands in it, resumes it, or destroys it whole.
func TestPausedSandboxAfterRestart(t *testing.T) {
	t.Parallel()
	p, dir, id := pausable(t)
	second, err := createAs(t, p, "t-pause", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []string{id, second} {
		mustRun(t, p, sb, `sleep 3605 </dev/null >/dev/null 2>&1 &`)
		mustPause(t, p, sb)
	}
	procs := p.cg.Procs(second)

	next, err := New(dir, WithCgroupParent(p.cgroupParent))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := next.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]provider.Resource{}
	for _, r := range inv {
		listed[r.SandboxID] = r
	}
	for _, sb := range []string{id, second} {
		if r, ok := listed[sb]; !ok || r.Defunct {
			t.Errorf("the restarted provider lists %s as %+v (listed %v), want it running", sb, r, ok)
		}
	}
	if _, err := next.Exec(t.Context(), id, provider.ExecRequest{Command: "true"}); provider.ErrorCode(err) != provider.CodeStateConflict {
		t.Errorf("exec through the restarted provider on a paused sandbox: %v, want SANDBOX_STATE_CONFLICT", err)
	}
	mustResume(t, next, id)
	if got := mustRun(t, next, id, `pgrep -f "sleep 3605" >/dev/null && echo alive`); got != "alive\n" {
		t.Errorf("after a resume by the restarted provider: %q", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := next.Destroy(ctx, second); err != nil {
		t.Fatalf("the restarted provider's destroy of a paused sandbox: %v", err)
	}
	for _, pid := range procs {
		if processRunning(pid) { // a zombie is dead, waiting for the host's pid 1
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d of the paused sandbox survived the restarted provider's destroy: %s", pid, stat)
		}
	}
}

// pgrepAll returns the host pids of processes whose command line contains
// marker.
func pgrepAll(t *testing.T, marker string) []int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", marker).Output()
	if err != nil {
		return nil // pgrep exits 1 when nothing matches
	}
	var pids []int
	for f := range strings.FieldsSeq(string(out)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	return pids
}
