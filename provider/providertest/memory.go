package providertest

import (
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// The MemorySnapshotter's contract: a memory snapshot of a running
// sandbox leaves it running, and a sandbox created from the snapshot
// resumes the captured processes where they were (the same process,
// counting on from the count it had), as often as it is asked for.

func (s *suite) testMemorySnapshots(t *testing.T) {
	skipWithout[provider.MemorySnapshotter](t, s, "MemorySnapshotter")
	t.Parallel()
	p, _ := s.open(t)
	ms := capability[provider.MemorySnapshotter](t, p, "MemorySnapshotter")
	e := capability[provider.Execer](t, p, "Execer")
	res := s.create(t, p, s.snapshotSpec())
	dir := path.Join(res.WorkDir, "providertest-memory")
	s.run(t, e, res.SandboxID, provider.ExecRequest{Command: strings.ReplaceAll(counter, "%[1]s", dir)})
	try := func(id string) func(string) (int, provider.ExecResult) {
		return func(name string) (int, provider.ExecResult) {
			out := s.run(t, e, id, provider.ExecRequest{Command: "cat " + path.Join(dir, name)})
			n, err := strconv.Atoi(strings.TrimSpace(out.Output))
			if err != nil || out.ExitCode != 0 {
				return -1, out
			}
			return n, out
		}
	}
	waitCount(t, try(res.SandboxID), 3)
	pid, _ := try(res.SandboxID)("pid")
	before, _ := try(res.SandboxID)("n")

	snap := provider.NewSnapshotID()
	t.Cleanup(func() { _ = ms.DeleteSnapshot(t.Context(), snap) })
	if _, err := ms.SnapshotMemory(s.ctx(t), res.SandboxID, snap); err != nil {
		t.Fatalf("SnapshotMemory: %v", err)
	}
	taken, _ := try(res.SandboxID)("n")
	s.wantSnapshot(t, ms, snap, res.SandboxID, "after SnapshotMemory")
	waitCount(t, try(res.SandboxID), taken+2) // the original runs on

	for i := range 2 {
		spec := s.snapshotSpec()
		spec.FromSnapshot = snap
		copyRes := s.create(t, p, spec)
		if got, out := try(copyRes.SandboxID)("pid"); got != pid {
			t.Errorf("copy %d: the counter's pid is %d (%+v), want the original's %d", i, got, out, pid)
		}
		n, _ := try(copyRes.SandboxID)("n")
		if n < before {
			t.Errorf("copy %d counts %d, below the %d counted before the snapshot: the count did not go on", i, n, before)
		}
		waitCount(t, try(copyRes.SandboxID), n+2) // the captured process runs on
		s.destroy(t, p, copyRes.SandboxID)
	}
}
