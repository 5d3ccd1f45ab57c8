package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/test/harness"
)

// TestEnteredButNotForked: an exec entered through nsenter whose nsenter
// started in the sandbox's groups but could not fork the command's shell
// there (the last free slot of its process limit was nsenter's) fails as
// the command would, and says that the sandbox is at its process limit,
// not only nsenter's EAGAIN.
//
// nsenter is a stand-in here, saying what util-linux's said when this
// happened in CI: the real one fails this way only by a race (under
// cgroup v1 the thread that forks nsenter is charged to the sandbox's
// group until it leaves, so one free slot is the thread's).
func TestEnteredButNotForked(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	p, err := New(dir, WithExecServer(false))
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(t.Context()); !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	id, err := createAs(t, p, "t-nsenter", `{"pids":16}`)
	if err != nil {
		t.Fatal(err)
	}
	if res := mustExec(t, p, id, "echo started"); res.ExitCode != 0 || strings.Contains(res.Output, "process limit") {
		t.Fatalf("exec through the real nsenter = %+v", res)
	}
	fake := filepath.Join(t.TempDir(), "nsenter")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'nsenter: fork failed: Resource temporarily unavailable' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.nsenter = fake // nothing else of p runs now
	res := mustExec(t, p, id, "echo started")
	if res.ExitCode != 1 || !strings.Contains(res.Output, "nsenter: fork failed") || !strings.Contains(res.Output, "process limit") {
		t.Errorf("exec whose nsenter could not fork = %+v; want exit 1, nsenter's complaint and why", res)
	}
}

func mustExec(t *testing.T, p *Provider, id, command string) sandbox.ExecResult {
	t.Helper()
	res, err := p.Exec(t.Context(), id, sandbox.ExecRequest{Command: command, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return res
}
