//go:build linux

package vmagent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/vmwire"
)

// execSeq numbers the commands' cgroups.
var execSeq atomic.Int64

// drainGrace is how long output is still passed on after the command's
// shell ended, for what it wrote last; what background processes write
// after that is read and dropped.
const drainGrace = 50 * time.Millisecond

// runExec runs one command: in a cgroup of its own, as the guest's user,
// in a session of its own, with exactly the environment asked for. Its
// output goes out as frames while it runs; Tether's frames give it stdin
// and signals. If the stream breaks, everything the command started is
// killed.
func runExec(stream net.Conn, w *vmwire.Writer, req vmwire.Request) {
	if len(req.Argv) == 0 {
		_ = w.Fail(vmwire.FailBadRequest, "no command")
		return
	}
	group, err := newGroup()
	if err != nil {
		_ = w.Fail(vmwire.FailInternal, "%v", err)
		return
	}
	defer group.remove()
	cmd, pipes, err := startCommand(req, group)
	if err != nil {
		_ = w.Fail(vmwire.FailInternal, "starting the command: %v", err)
		return
	}
	out := &forwarder{w: w}
	var readers sync.WaitGroup
	readers.Go(func() { out.copy(vmwire.KindStdout, pipes.stdout) })
	readers.Go(func() { out.copy(vmwire.KindStderr, pipes.stderr) })

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	control := make(chan struct{})
	go func() {
		defer close(control)
		readControl(stream, pipes.stdin, cmd, group)
	}()
	var waitErr error
	select {
	case waitErr = <-waited:
	case <-control:
		// Tether went away: nothing of the command may outlive it.
		group.kill()
		<-waited //nolint:errcheck // killed: how it ended tells nothing
		return
	}
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()
	select {
	case <-readersDone:
	case <-time.After(drainGrace):
	}
	out.stop()
	_ = w.JSON(vmwire.KindExit, vmwire.Exit{Code: exitCode(waitErr), OOM: group.oomKilled()})
}

type commandPipes struct {
	stdin          io.WriteCloser
	stdout, stderr *os.File
}

func startCommand(req vmwire.Request, g *group) (*exec.Cmd, commandPipes, error) {
	var p commandPipes
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...) //nolint:noctx,gosec // the sandbox's own command; the stream ends it
	cmd.Env = req.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = req.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:      true,
		UseCgroupFD: true,
		CgroupFD:    int(g.dir.Fd()),
		Credential:  &syscall.Credential{Uid: UserID, Gid: UserID},
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, p, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, p, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, p, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	_ = outW.Close()
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		return nil, p, err
	}
	return cmd, commandPipes{stdin: stdin, stdout: outR, stderr: errR}, nil
}

// readControl reads Tether's frames for a running command until the
// stream ends.
func readControl(stream io.Reader, stdin io.WriteCloser, cmd *exec.Cmd, g *group) {
	defer func() { _ = stdin.Close() }()
	for {
		kind, payload, err := vmwire.ReadFrame(stream)
		if err != nil {
			return
		}
		switch kind {
		case vmwire.KindStdin:
			_, _ = stdin.Write(payload)
		case vmwire.KindStdinClose:
			_ = stdin.Close()
		case vmwire.KindSignal:
			if len(payload) != 1 {
				continue
			}
			if sig := syscall.Signal(payload[0]); sig == syscall.SIGKILL {
				g.kill()
			} else {
				_ = syscall.Kill(-cmd.Process.Pid, sig)
			}
		}
	}
}

// forwarder passes a command's output on as frames until stopped; after
// that it reads and drops what background processes still write.
type forwarder struct {
	mu      sync.Mutex
	w       *vmwire.Writer
	stopped bool
}

func (f *forwarder) copy(kind byte, r *os.File) {
	defer func() { _ = r.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.mu.Lock()
			if !f.stopped && f.w.Frame(kind, buf[:n]) != nil {
				f.stopped = true
			}
			f.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (f *forwarder) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 127
}

// group is a command's cgroup.
type group struct {
	path string
	dir  *os.File
}

func newGroup() (*group, error) {
	path := filepath.Join("/sys/fs/cgroup", "exec-"+strconv.FormatInt(execSeq.Add(1), 10))
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("making the command's cgroup: %w", err)
	}
	dir, err := os.Open(path)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("opening the command's cgroup: %w", err)
	}
	return &group{path: path, dir: dir}, nil
}

// kill ends every process of the group.
func (g *group) kill() {
	_ = os.WriteFile(filepath.Join(g.path, "cgroup.kill"), []byte("1"), 0o644)
}

// oomKilled reports whether the OOM killer killed a process of the group.
func (g *group) oomKilled() bool {
	f, err := os.Open(filepath.Join(g.path, "memory.events"))
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			return v != "0"
		}
	}
	return false
}

// remove removes the group once nothing runs in it; a group that
// background processes still hold stays.
func (g *group) remove() {
	_ = g.dir.Close()
	_ = os.Remove(g.path)
}
