package providertest

import (
	"bytes"
	"context"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The Pauser's contract: pause and resume idempotent, a paused sandbox
// listed (and destroyed) like a running one, by a restarted provider too,
// and, with exec, its processes and files as they were once resumed.

func (s *suite) testPause(t *testing.T) {
	skipWithout[provider.Pauser](t, s, "Pauser")
	t.Parallel()
	t.Run("Idempotent", s.testPauseIdempotent)
	t.Run("DestroyWhilePaused", s.testDestroyPaused)
	t.Run("ListAfterRestart", s.testPausedAfterRestart)
	t.Run("ProcessesAndFilesKept", s.testPauseKeeps)
	t.Run("UnknownSandbox", s.testPauseUnknown)
}

// pauseSandbox makes a provider with Pauser and a sandbox in it.
func (s *suite) pauseSandbox(t *testing.T) (provider.Provider, provider.Pauser, provider.Resource, string) {
	t.Helper()
	p, state := s.open(t)
	pauser := capability[provider.Pauser](t, p, "Pauser")
	return p, pauser, s.create(t, p, provider.CreateSpec{}), state
}

func (s *suite) pause(t *testing.T, pp provider.Pauser, id string) {
	t.Helper()
	if err := pp.Pause(s.ctx(t), id); err != nil {
		t.Fatalf("Pause(%s): %v", id, err)
	}
}

func (s *suite) resume(t *testing.T, pp provider.Pauser, id string) {
	t.Helper()
	if err := pp.Resume(s.ctx(t), id); err != nil {
		t.Fatalf("Resume(%s): %v", id, err)
	}
}

// testPauseIdempotent: resuming a running sandbox, pausing a paused one and
// resuming a resumed one are success, and the sandbox stays listed, not
// defunct, throughout.
func (s *suite) testPauseIdempotent(t *testing.T) {
	t.Parallel()
	p, pp, res, _ := s.pauseSandbox(t)
	s.resume(t, pp, res.SandboxID) // running: nothing to do
	for range 2 {
		s.pause(t, pp, res.SandboxID)
	}
	if got, ok := s.list(t, p)[res.SandboxID]; !ok || got.Defunct {
		t.Errorf("List while paused = %+v (listed %v), want the sandbox, not defunct", got, ok)
	}
	for range 2 {
		s.resume(t, pp, res.SandboxID)
	}
	if got, ok := s.list(t, p)[res.SandboxID]; !ok || got.Defunct {
		t.Errorf("List after resume = %+v (listed %v), want the sandbox, not defunct", got, ok)
	}
}

// testDestroyPaused: a paused sandbox is destroyed whole, and destroying
// it again is success.
func (s *suite) testDestroyPaused(t *testing.T) {
	t.Parallel()
	p, pp, res, _ := s.pauseSandbox(t)
	if e, ok := p.(provider.Execer); ok {
		s.run(t, e, res.SandboxID, provider.ExecRequest{Command: `sleep 300 >/dev/null 2>&1 &`})
	}
	s.pause(t, pp, res.SandboxID)
	for i := range 2 {
		if err := p.Destroy(s.ctx(t), res.SandboxID); err != nil {
			t.Fatalf("Destroy #%d of a paused sandbox: %v", i+1, err)
		}
	}
	if _, ok := s.list(t, p)[res.SandboxID]; ok {
		t.Error("a destroyed paused sandbox is still listed")
	}
	if err := pp.Resume(s.ctx(t), res.SandboxID); err == nil {
		t.Error("Resume of a destroyed sandbox succeeded")
	}
}

// testPausedAfterRestart: a provider over the same state (a restarted
// Tether) lists a paused sandbox, not defunct, and resumes it.
func (s *suite) testPausedAfterRestart(t *testing.T) {
	t.Parallel()
	_, pp, res, state := s.pauseSandbox(t)
	s.pause(t, pp, res.SandboxID)
	restarted := s.h.Open(t, state)
	got, ok := s.list(t, restarted)[res.SandboxID]
	if !ok || got.Defunct || got.ProviderID != res.ProviderID {
		t.Fatalf("List after a restart, paused = %+v (listed %v), want %+v", got, ok, res)
	}
	rp := capability[provider.Pauser](t, restarted, "Pauser")
	s.pause(t, rp, res.SandboxID) // paused still
	s.resume(t, rp, res.SandboxID)
	if e, ok := restarted.(provider.Execer); ok {
		if out := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "echo up"}); out.Output != "up\n" {
			t.Errorf("exec after a resume by the restarted provider = %+v", out)
		}
	}
}

// counter is a background loop that writes its pid, then a count that
// grows, to files in dir.
const counter = `mkdir -p %[1]s && (echo $$ > %[1]s/pid; i=0; while :; do i=$((i+1)); echo $i > %[1]s/n.tmp; mv %[1]s/n.tmp %[1]s/n; sleep 0.05; done) </dev/null >/dev/null 2>&1 &`

// testPauseKeeps: a process started before the pause runs on after the
// resume (the same process, its count going on from where it was), files
// are as they were, and an exec on the paused sandbox fails rather than
// hanging.
func (s *suite) testPauseKeeps(t *testing.T) {
	t.Parallel()
	p, pp, res, _ := s.pauseSandbox(t)
	e := capability[provider.Execer](t, p, "Execer")
	dir := path.Join(res.WorkDir, "providertest-pause")
	s.run(t, e, res.SandboxID, provider.ExecRequest{Command: strings.ReplaceAll(counter, "%[1]s", dir)})
	try := func(name string) (int, provider.ExecResult) {
		t.Helper()
		out := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "cat " + path.Join(dir, name)})
		n, err := strconv.Atoi(strings.TrimSpace(out.Output))
		if err != nil || out.ExitCode != 0 {
			return -1, out
		}
		return n, out
	}
	read := func(name string) int {
		t.Helper()
		n, out := try(name)
		if n < 0 {
			t.Fatalf("reading %s: %+v", name, out)
		}
		return n
	}
	waitCount(t, try, 3)
	pid := read("pid")
	want := binary(10_000)
	if f, ok := p.(provider.Files); ok {
		if err := f.WriteFile(s.ctx(t), res.SandboxID, path.Join(dir, "kept.bin"), bytes.NewReader(want), int64(len(want))); err != nil {
			t.Fatal(err)
		}
	}
	s.pause(t, pp, res.SandboxID)
	ctx, cancel := context.WithTimeout(s.ctx(t), 30*time.Second)
	if _, err := e.Exec(ctx, res.SandboxID, provider.ExecRequest{Command: "true", Timeout: 20 * time.Second, MaxOutput: 1 << 10}); err == nil {
		t.Error("Exec on a paused sandbox succeeded")
	} else if ctx.Err() != nil {
		t.Errorf("Exec on a paused sandbox hung until its context ended: %v", err)
	}
	cancel()
	s.resume(t, pp, res.SandboxID)
	before := read("n")
	waitCount(t, try, before+3)
	if got := read("pid"); got != pid {
		t.Errorf("the background loop's pid is %d after the resume, was %d", got, pid)
	}
	if f, ok := p.(provider.Files); ok {
		got, err := s.read(t, f, res.SandboxID, path.Join(dir, "kept.bin"), 1<<20)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("a file written before the pause reads back %d bytes, %v; want the %d written", len(got), err, len(want))
		}
	}
}

// waitCount waits, a bounded while, for the counter file to reach n.
func waitCount(t *testing.T, try func(string) (int, provider.ExecResult), n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, out := try("n") // not there yet (-1) while the loop starts
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background loop's count is %d (%+v), want it to reach %d: it does not run", got, out, n)
		}
	}
}

func (s *suite) testPauseUnknown(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	pp := capability[provider.Pauser](t, p, "Pauser")
	id := provider.NewSandboxID()
	if err := pp.Pause(s.ctx(t), id); err == nil {
		t.Error("Pause of a sandbox the provider does not have succeeded")
	}
	if err := pp.Resume(s.ctx(t), id); err == nil {
		t.Error("Resume of a sandbox the provider does not have succeeded")
	}
}
