package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
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
	if p.cg == nil {
		t.Skip("no control groups on this host: nsenter starts outside any limit of the sandbox's")
	}
	// The stand-ins: one says what nsenter says, one says more (a command
	// of the sandbox's that printed the same and went on).
	bin := t.TempDir()
	couldNotFork := filepath.Join(bin, "nsenter")
	said := filepath.Join(bin, "nsenter-and-more")
	for path, script := range map[string]string{
		couldNotFork: "#!/bin/sh\necho 'nsenter: fork failed: Resource temporarily unavailable' >&2\nexit 1\n",
		said:         "#!/bin/sh\necho 'nsenter: fork failed: Resource temporarily unavailable' >&2\necho more\nexit 1\n",
	} {
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p.nsenter = couldNotFork // nothing else of p runs now
	res := mustExec(t, p, id, "echo started")
	if res.ExitCode != 1 || !strings.Contains(res.Output, "nsenter: fork failed") || !strings.Contains(res.Output, "process limit") {
		t.Errorf("exec whose nsenter could not fork = %+v; want exit 1, nsenter's complaint and why", res)
	}
	// Streamed, the note follows nsenter's complaint on stderr.
	var streamed strings.Builder
	res, err = p.ExecStream(t.Context(), id, provider.ExecRequest{Command: "echo started", Timeout: 30 * time.Second},
		func(stream string, chunk []byte) error {
			if stream == provider.Stderr {
				streamed.Write(chunk)
			}
			return nil
		})
	if err != nil || res.ExitCode != 1 || !strings.Contains(streamed.String(), "process limit") {
		t.Errorf("streamed exec whose nsenter could not fork = %+v, %v, stderr %q; want exit 1 and why on stderr", res, err, streamed.String())
	}
	p.nsenter = said
	if res := mustExec(t, p, id, "echo started"); strings.Contains(res.Output, "process limit") {
		t.Errorf("exec that wrote more than nsenter's complaint = %+v; want no note", res)
	}
}
