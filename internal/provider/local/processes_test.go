package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
)

// ticker is a process that prints a count ten times a second.
var ticker = provider.ProcessSpec{Argv: []string{"sh", "-c", `i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.1; done`}, Tag: "ticker"}

// attachUntil attaches to sel from now until the output holds want, and
// returns whether it did within 20 seconds.
func attachUntil(t *testing.T, p *local.Provider, id string, sel provider.ProcessSelector, want string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	found := errors.New("found")
	err := p.AttachProcess(ctx, id, sel, provider.AttachNow, func(e provider.ProcessEvent) error {
		out.Write(e.Data)
		if strings.Contains(out.String(), want) {
			return found
		}
		return nil
	})
	return errors.Is(err, found)
}

// TestProcessesSurviveARestart: the processes of a sandbox are its exec
// server's children, in the sandbox, not Tether's: a second provider over
// the same state (the next Tether) lists them, attaches to them, and they
// end with the sandbox.
func TestProcessesSurviveARestart(t *testing.T) {
	t.Parallel()
	first, dir := newProvider(t)
	id := create(t, first, provider.CreateSpec{}).SandboxID
	info, err := first.StartProcess(t.Context(), id, ticker)
	if err != nil {
		t.Fatal(err)
	}
	if r := run(t, first, id, fmt.Sprintf("grep PPid /proc/%d/status", info.PID)); r.Output != "PPid:\t2\n" {
		t.Errorf("the process's parent: %q, want the exec server, pid 2", r.Output)
	}
	next, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := next.ListProcesses(t.Context(), id)
	if err != nil || len(procs) != 1 || procs[0].PID != info.PID || !procs[0].Running {
		t.Fatalf("the next provider lists %+v, %v; want the running ticker", procs, err)
	}
	if !attachUntil(t, next, id, provider.ProcessSelector{Tag: "ticker"}, "tick") {
		t.Fatal("the next provider's attach got no ticks")
	}
	if err := next.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if pids := hostPIDs(t, "tick $i"); len(pids) != 0 {
		t.Errorf("the ticker still runs on the host after Destroy: pids %v", pids)
	}
}

// TestAttachHelper is not a test: TestAttachHolderKilled runs the test
// binary as a process of its own that attaches to a process and is then
// killed.
func TestAttachHelper(t *testing.T) {
	dir, id := os.Getenv("TETHER_ATTACH_HELPER_DIR"), os.Getenv("TETHER_ATTACH_HELPER_ID")
	if dir == "" {
		t.Skip("a helper of TestAttachHolderKilled")
	}
	p, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	said := false
	_ = p.AttachProcess(context.Background(), id, provider.ProcessSelector{Tag: "ticker"}, provider.AttachStart, func(provider.ProcessEvent) error {
		if !said {
			fmt.Println("attached")
			said = true
		}
		return nil
	})
}

// TestAttachHolderKilled: a Tether killed (SIGKILL) while it holds attaches
// to a process, one reading and one that stopped reading with the
// server's writes blocked, hurts neither the sandbox, nor the process,
// nor its exec server.
func TestAttachHolderKilled(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t, local.WithProcessLimits(4, 64<<10))
	id := create(t, p, provider.CreateSpec{}).SandboxID
	loud := ticker
	loud.Argv = []string{"sh", "-c", `i=0; while :; do i=$((i+1)); seq 1 2000; echo "tick $i"; sleep 0.01; done`}
	info, err := p.StartProcess(t.Context(), id, loud)
	if err != nil {
		t.Fatal(err)
	}
	for _, stopReading := range []bool{false, true} {
		helper := exec.Command(os.Args[0], "-test.run=^TestAttachHelper$")
		helper.Env = append(os.Environ(), "TETHER_ATTACH_HELPER_DIR="+dir, "TETHER_ATTACH_HELPER_ID="+id)
		out, err := helper.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := helper.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "attached\n" {
			_ = helper.Process.Kill()
			_ = helper.Wait()
			t.Fatalf("the helper said %q, want attached", line)
		}
		if stopReading { // its socket fills, and the server's writes to it block
			_ = helper.Process.Signal(syscall.SIGSTOP)
			time.Sleep(500 * time.Millisecond)
		}
		_ = helper.Process.Kill()
		_ = helper.Wait()
	}
	if !attachUntil(t, p, id, provider.ProcessSelector{PID: info.PID}, "tick") {
		t.Fatal("after its attaches' holder was killed, the process's output no longer comes")
	}
	procs, err := p.ListProcesses(t.Context(), id)
	if err != nil || len(procs) != 1 || !procs[0].Running || procs[0].Dropped == 0 {
		t.Errorf("ListProcesses = %+v, %v; want the process running, its window overflowed", procs, err)
	}
	if r := run(t, p, id, "echo $PPID"); r.Output != "2\n" {
		t.Errorf("an exec after the kills: %+v, want it started by the exec server", r)
	}
	inv, err := p.List(t.Context())
	if err != nil || len(inv) != 1 || inv[0].Defunct {
		t.Errorf("List = %+v, %v; want the sandbox running", inv, err)
	}
}

// TestProcessesWithoutSupervisor: a sandbox without an exec server, or
// whose server its user killed, has no processes: NOT_SUPPORTED, and the
// sandbox lives on.
func TestProcessesWithoutSupervisor(t *testing.T) {
	t.Parallel()
	off, _ := newProvider(t, local.WithExecServer(false))
	if info := off.Info(t.Context()); info.Processes || info.PTY || info.Watch {
		t.Errorf("Info without the exec server = %+v, want no processes, terminals or watches", info)
	}
	id := create(t, off, provider.CreateSpec{}).SandboxID
	_, err := off.StartProcess(t.Context(), id, ticker)
	if provider.ErrorCode(err) != provider.CodeNotSupported {
		t.Errorf("StartProcess without the exec server: %v, want NOT_SUPPORTED", err)
	}
	p, _ := newProvider(t)
	id = create(t, p, provider.CreateSpec{}).SandboxID
	if _, err := p.StartProcess(t.Context(), id, ticker); err != nil {
		t.Fatal(err)
	}
	run(t, p, id, "kill -9 2")
	_, err = p.ListProcesses(t.Context(), id)
	if provider.ErrorCode(err) != provider.CodeNotSupported || !strings.Contains(err.Error(), "exec server") {
		t.Errorf("ListProcesses after the sandbox killed its exec server: %v, want NOT_SUPPORTED saying why", err)
	}
	if r := run(t, p, id, "echo alive"); r.Output != "alive\n" {
		t.Errorf("exec after the exec server was killed: %+v", r)
	}
}

// TestProcessEnvironment: a process's environment is exactly the base,
// the sandbox's and its own (TERM for a terminal): nothing of the exec
// server's (GOMAXPROCS) nor of Tether's.
func TestProcessEnvironment(t *testing.T) {
	t.Setenv("TETHER_SENTINEL", "tether-only")
	p, _ := newProvider(t)
	id := create(t, p, provider.CreateSpec{Env: map[string]string{"GREETING": "hi"}}).SandboxID
	for _, tc := range []struct {
		pty  *provider.PTYSize
		want string
	}{
		{nil, "ASKED=yes\nGREETING=hi\nHOME=/workspace\nLANG=C.UTF-8\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nTERM=dumb\n"},
		{&provider.PTYSize{Rows: 24, Cols: 80}, "ASKED=yes\r\nGREETING=hi\r\nHOME=/workspace\r\nLANG=C.UTF-8\r\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\r\nTERM=xterm-256color\r\n"},
	} {
		info, err := p.StartProcess(t.Context(), id, provider.ProcessSpec{Argv: []string{"env"}, Env: map[string]string{"ASKED": "yes"}, PTY: tc.pty})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		err = p.AttachProcess(t.Context(), id, provider.ProcessSelector{PID: info.PID}, provider.AttachStart, func(e provider.ProcessEvent) error {
			out.Write(e.Data)
			return nil
		})
		if err != nil || out.String() != tc.want {
			t.Errorf("the environment (terminal %v): %q, %v; want %q", tc.pty != nil, out.String(), err, tc.want)
		}
	}
}
