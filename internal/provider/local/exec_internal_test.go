package local

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/shfiles"
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

// TestEnterASandboxThatEnded: a call that looked its sandbox up while the
// init ran, and whose nsenter came after the init died (a destroy killed
// it, and its parent had not reaped it yet, or had), finds the sandbox
// gone, as a later lookup would: not a command that exited 1 with
// nsenter's complaint as its output, nor a file error. In a sandbox that
// runs, a command that says the same and exits 1 is still the command's.
func TestEnterASandboxThatEnded(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	p, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(t.Context()); !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	id, err := createAs(t, p, "t-ended", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.running(id) // the lookup of every call
	if err != nil {
		t.Fatal(err)
	}
	req := provider.ExecRequest{Command: "echo 'nsenter: said by the command' >&2; exit 1", Timeout: 30 * time.Second}
	if res, err := p.exec(t.Context(), m, req); err != nil || res.ExitCode != 1 || res.Output != "nsenter: said by the command\n" {
		t.Fatalf("the command's own failure = %+v, %v; want exit 1 and its output", res, err)
	}
	if err := p.readOut(t.Context(), m, "read file", "/nowhere", io.Discard, nil, "sh", "-c", shfiles.ReadFileNonblock, "sh", "/nowhere", "100"); provider.ErrorCode(err) != provider.CodeFileNotFound {
		t.Fatalf("reading a missing file = %v; want %s", err, provider.CodeFileNotFound)
	}

	// The init is killed, its parent (bwrap's monitor, which would reap
	// it) stopped: it stays a zombie, as between a destroy's kill and the
	// monitor's wait.
	fields, err := hostos.StatFields(m.InitPID)
	if err != nil {
		t.Fatal(err)
	}
	monitor, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(monitor, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			_ = syscall.Kill(monitor, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont) // before createAs's destroy
	if err := syscall.Kill(m.InitPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); m.alive(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed init still runs")
		}
	}
	check := func(when string) {
		t.Helper()
		res, err := p.exec(t.Context(), m, provider.ExecRequest{Command: "echo ran", Timeout: 30 * time.Second})
		if provider.ErrorCode(err) != provider.CodeProviderUnavailable {
			t.Errorf("exec, the init %s = %+v, %v; want %s", when, res, err, provider.CodeProviderUnavailable)
		}
		err = p.readOut(t.Context(), m, "read file", "/etc/passwd", io.Discard, nil, "sh", "-c", shfiles.ReadFileNonblock, "sh", "/etc/passwd", "100000")
		if provider.ErrorCode(err) != provider.CodeProviderUnavailable {
			t.Errorf("reading a file, the init %s = %v; want %s", when, err, provider.CodeProviderUnavailable)
		}
	}
	check("a zombie")
	// Reaped: its pid is no one's.
	cont()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(m.InitPID)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed init was not reaped")
		}
	}
	check("reaped")
}
