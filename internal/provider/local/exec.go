package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/cgroup"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/outputcap"
	"github.com/tetherhq/tether/provider/shfiles"
)

// running returns the metadata of a sandbox whose init runs.
func (p *Provider) running(id string) (meta, error) {
	if p.problem != "" {
		return meta{}, provider.Errorf(provider.CodeProviderUnavailable, "the local provider is unavailable: %s", p.problem)
	}
	m, err := p.readMeta(id)
	if err != nil || !m.alive() {
		return meta{}, noLongerRuns(id)
	}
	return m, nil
}

// noLongerRuns is the error for a call on a sandbox whose init has ended.
func noLongerRuns(id string) error {
	return provider.Errorf(provider.CodeProviderUnavailable,
		"sandbox %s no longer runs on this host; the janitor will mark it lost", id)
}

// sandboxCmd is a command that enters a sandbox, and the control groups
// it starts in (startCommand).
type sandboxCmd struct {
	*exec.Cmd
	groups []string
	// sandbox is the id of the sandbox it enters ("": none, the probe),
	// target its metadata: nsenter enters the namespaces of target's init.
	sandbox string
	target  meta
}

// enterFailed reports whether cmd, ended with err, failed as nsenter
// does when its sandbox has ended: exit status 1 (nsenter's own failures:
// it could not open the namespaces of an init that died after the
// lookup, killed by a destroy, say) and the init no longer runs. A
// command in a sandbox that still runs fails as itself.
func (cmd *sandboxCmd) enterFailed(err error) bool {
	var exitErr *exec.ExitError
	return cmd.sandbox != "" && errors.As(err, &exitErr) && exitErr.ExitCode() == 1 && !cmd.target.alive()
}

// command returns a command that runs argv inside the sandbox: in its
// control groups, namespaces and root, with every capability dropped and
// no_new_privs (startCommand), and only the sandbox's environment (plus
// extra).
func (p *Provider) command(m meta, extra map[string]string, argv ...string) *sandboxCmd {
	var groups []string
	if p.cg != nil && m.Limits.Pids > 0 {
		groups = p.cg.Dirs(m.SandboxID)
	}
	return p.commandIn(groups, m, extra, enterScript, argv...)
}

// enterScript is what a command entering a sandbox runs first, with the
// sandbox's /bin/sh: it lowers the open-files limit to its first argument
// (0: leaves it), exports each NAME=VALUE argument up to "--", then
// becomes the command after it. Only a POSIX sh is needed for it, so an
// image without env or setpriv runs commands too. (Names are identifiers:
// the API refuses others.)
const enterScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; shift; while [ "$1" != -- ]; do export "$1"; shift; done; shift; exec "$@"`

// execScript is enterScript for exec's command: after "--" come the
// working directory (empty: the sandbox's) and the command, which the
// script runs itself, as `sh -c` would (no positional parameters, $0 "sh",
// its exit status the script's), rather than exec a second shell for it.
const execScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; shift; while [ "$1" != -- ]; do export "$1"; shift; done; shift; if [ -n "$1" ]; then cd -- "$1" || exit 1; fi; shift; eval 'set --;' "$1"`

// commandIn is the command that runs script (enterScript or execScript)
// with args in the sandbox, started in the control groups whose folders
// are groups.
func (p *Provider) commandIn(groups []string, m meta, extra map[string]string, script string, args ...string) *sandboxCmd {
	env := baseEnv()
	for k, v := range m.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	// Into the sandbox's user namespace as its user: no capabilities there,
	// and none on the host. The sandbox's own sh sets its environment: the
	// host's nsenter must never run with one a tenant chose (LD_PRELOAD of
	// a file in its workspace, say).
	uid := strconv.Itoa(m.uid())
	argv := []string{"--target", strconv.Itoa(m.InitPID), "--user", "--pid", "--mount", "--ipc", "--uts", "--net", "--cgroup", "--root", "-w",
		"--setuid", uid, "--setgid", uid, "--", "/bin/sh", "-c", script, "sh", strconv.Itoa(m.Limits.OpenFiles)}
	for k, v := range env {
		argv = append(argv, k+"="+v)
	}
	argv = append(argv, "--")
	argv = append(argv, args...)
	//nolint:noctx // run kills the whole process group when its context ends; CommandContext would kill only nsenter
	cmd := exec.Command(p.nsenter, argv...)
	// nsenter's child is in the sandbox before the script exports the
	// sandbox's environment: it must not carry Tether's in there. What it
	// does carry is sandboxEnv, which the script overrides.
	cmd.Env = sandboxEnv()
	// A process group of its own, so a timeout can kill the command and
	// everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return &sandboxCmd{Cmd: cmd, groups: groups, sandbox: m.SandboxID, target: m}
}

// run starts cmd (see startCommand) and waits for it, killing its process
// group when ctx ends. It reports whether ctx ended it. A command that
// failed because its sandbox ended (enterFailed) is noLongerRuns.
func (p *Provider) run(ctx context.Context, cmd *sandboxCmd) (killed bool, err error) {
	if err := p.startIn(cmd); err != nil {
		return false, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if cmd.enterFailed(err) {
			return false, noLongerRuns(cmd.sandbox)
		}
		return false, err
	case <-ctx.Done():
		if p.cg != nil && cmd.sandbox != "" && p.cg.Frozen(cmd.sandbox) {
			// Paused under the command: its processes would not die of
			// the signal until the sandbox is resumed.
			p.cg.KillProcessGroup(cmd.sandbox, cmd.Process.Pid)
		}
		killGroup(cmd.Process.Pid)
		return true, <-waited
	}
}

// killGroup kills the process group pgid and waits, a bounded while, until
// none of its processes is left (killed processes in the sandbox die, and
// are reaped by its init, a moment after the signal).
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for range 400 {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopCommand kills a timed-out command entered through nsenter (pid,
// the leader of its process group), everything it started and what it
// detached into its exec group, and returns what waited (its Wait) says.
//
// With an exec group, the command's processes go first and nsenter last:
// nsenter then reaps its child (the command's shell in the sandbox) and
// ends itself. Killed together, nsenter may die first and leave that
// child's zombie to the host's pid 1, which need not reap it (a container's
// often does not), and the process group would last, a zombie, until that
// pid 1 got round to it: timeouts overran by one to two seconds.
func stopCommand(pid int, group cgroup.ExecGroup, waited <-chan error) error {
	if len(group.Dirs()) == 0 {
		killGroup(pid)
		return <-waited
	}
	if group.Frozen() {
		// The sandbox was paused under the command: nsenter is frozen
		// with it and cannot reap its child. Kill takes all of them out
		// of the freezer group, to die.
		group.Kill()
		return <-waited
	}
	group.KillBut(pid)
	select {
	case err := <-waited:
		group.Kill() // what it started as it went
		return err
	case <-time.After(time.Second):
		killGroup(pid)
		group.Kill()
		return <-waited
	}
}

// Exec implements provider.Execer.
func (p *Provider) Exec(ctx context.Context, sandboxID string, req provider.ExecRequest) (provider.ExecResult, error) {
	m, err := p.enterable(sandboxID)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return p.exec(ctx, m, req)
}

func (p *Provider) exec(ctx context.Context, m meta, req provider.ExecRequest) (provider.ExecResult, error) {
	limit := outputLimit(req)
	var out []byte
	c := outputcap.New(limit, provider.Stderr, func(_ string, chunk []byte) error {
		// Grown by hand: never past the limit, which head, marker and tail
		// together do not exceed.
		if need := len(out) + len(chunk); need > cap(out) {
			grown := make([]byte, len(out), min(max(need, 2*cap(out)), max(limit, need)))
			copy(grown, out)
			out = grown
		}
		out = append(out, chunk...)
		return nil
	})
	res, err := p.runCaptured(ctx, m, req, c, false)
	if err != nil {
		return res, err
	}
	res.Output = string(out) // its bytes as they came: text or not
	return res, nil
}

// oomKills counts the processes the sandbox's memory limit killed so far
// (-1 if unknown).
func (p *Provider) oomKills(m meta) int {
	if p.cg == nil || m.Limits.MemoryMB == 0 {
		return -1
	}
	return p.cg.OOMKills(m.SandboxID)
}

// execCommand is the command that runs req in the sandbox through
// nsenter, its output going to the given files, started in group.
func (p *Provider) execCommand(m meta, req provider.ExecRequest, group cgroup.ExecGroup, stdout, stderr *os.File) *sandboxCmd {
	cmd := p.commandIn(group.Dirs(), m, req.Env, execScript, req.WorkDir, req.Command)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd
}

// execGroup makes the group of one exec's processes (the zero group, whose
// kill and release do nothing, where the sandbox has no control groups).
func (p *Provider) execGroup(m meta) (cgroup.ExecGroup, error) {
	var group cgroup.ExecGroup
	if p.cg != nil && m.Limits.Pids > 0 {
		var err error
		if group, err = p.cg.NewExecGroup(m.SandboxID); err != nil {
			return group, fmt.Errorf("local: exec: %w", err)
		}
	}
	return group, nil
}

func execTimeout(req provider.ExecRequest) time.Duration {
	if req.Timeout <= 0 {
		return time.Minute
	}
	return req.Timeout
}

func outputLimit(req provider.ExecRequest) int {
	if req.MaxOutput <= 0 {
		return 1 << 20
	}
	return req.MaxOutput
}

// execOutcome is the exit code and timeout of a command that run ended
// (killed: at its timeout), or why it could not run.
func execOutcome(killed bool, err error) (provider.ExecResult, error) {
	var res provider.ExecResult
	var exitErr *exec.ExitError
	var code *exitCode
	switch {
	case killed:
		res.TimedOut, res.ExitCode = true, 124
	case errors.As(err, &code):
		res.ExitCode = code.code
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	case err != nil:
		return res, fmt.Errorf("local: exec: %w", err)
	}
	return res, nil
}

// ExecStream implements provider.StreamExecer: stdout and stderr come
// through pipes of their own, each chunk passed on as it is read, up to half
// the limit; what follows is held (the latest bytes, up to the other half)
// and passed on when the command ends, after the marker if the output was
// cut (see outputcap.Cap).
func (p *Provider) ExecStream(ctx context.Context, sandboxID string, req provider.ExecRequest, emit func(stream string, chunk []byte) error) (provider.ExecResult, error) {
	m, err := p.enterable(sandboxID)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return p.runCaptured(ctx, m, req, outputcap.New(outputLimit(req), provider.Stderr, emit), true)
}

// runCaptured runs req in the sandbox and writes its output to out as it
// comes, through pipes that Tether reads: stdout and stderr apart when
// split, else one pipe for both, which keeps their order. The pipes are
// read for as long as the command runs, so it never waits on a full pipe,
// and out holds no more than its limit whatever the command writes: no
// output is ever stored on the host's disk.
//
// Background processes the command started may hold the pipes after it
// ends: what they wrote until then is read, and detachOutput takes the
// pipes from there.
func (p *Provider) runCaptured(ctx context.Context, m meta, req provider.ExecRequest, out *outputcap.Cap, split bool) (provider.ExecResult, error) {
	var res provider.ExecResult
	streams := []string{provider.Stdout}
	if split {
		streams = append(streams, provider.Stderr)
	}
	readers, writers, err := outputPipes(len(streams))
	if err != nil {
		return res, fmt.Errorf("local: exec: %w", err)
	}
	defer closeAll(readers)
	group, err := p.execGroup(m)
	if err != nil {
		closeAll(writers)
		return res, err
	}
	defer group.Release()
	ooms := p.oomKills(m)
	run := &captured{p: p, m: m, group: group, streams: streams, readers: readers,
		sink: &outputSink{out: out, failed: make(chan struct{})}}
	srv, outcome, err := p.startServerIn(ctx, m, req, writers[0], writers[len(writers)-1], group)
	switch outcome {
	case serverAtLimit:
		closeAll(writers)
		return atProcessLimit(out, streams[len(streams)-1])
	case serverStarted:
		closeAll(writers) // the command holds its own ends
		defer srv.close()
		run.waitFn = srv.wait
		run.stopFn = func(waited <-chan error) error { return srv.stop(group, waited) }
	case serverPaused:
		closeAll(writers)
		return res, fmt.Errorf("local: exec: %w", err)
	default: // through nsenter
		cmd := p.execCommand(m, req, group, writers[0], writers[len(writers)-1])
		err = p.startIn(cmd)
		closeAll(writers) // the command holds its own ends; EOF once it and its children let go
		if errors.Is(err, syscall.EAGAIN) && len(cmd.groups) > 0 {
			// Forked in the sandbox's groups: the sandbox is at its process
			// limit. The command's failure, as a fork inside it would be.
			return atProcessLimit(out, streams[len(streams)-1])
		}
		if err != nil {
			return res, fmt.Errorf("local: exec: %w", err)
		}
		run.waitFn = cmd.Wait
		run.stopFn = func(waited <-chan error) error { return stopCommand(cmd.Process.Pid, group, waited) }
		run.entered = cmd
		// What nsenter says of its own failures is watched for: that it
		// could not enter the sandbox, or (in the sandbox's groups) found
		// no room to fork the command's shell there.
		run.sink.watched = streams[len(streams)-1]
	}
	killed, waitErr, failure := run.wait(ctx, execTimeout(req))
	if failure != nil {
		return res, failure
	}
	if res, err = run.outcome(out, streams[len(streams)-1], killed, waitErr); err != nil {
		return res, err
	}
	res.OOMKilled = p.oomKills(m) > ooms
	if res.Truncated, err = out.Finish(); err != nil {
		return res, fmt.Errorf("local: exec: passing output on: %w", err)
	}
	return res, nil
}

// outcome is the result of the command c ran, which ended with waitErr
// (killed at its timeout or not), its notes written to errStream of out.
func (c *captured) outcome(out *outputcap.Cap, errStream string, killed bool, waitErr error) (provider.ExecResult, error) {
	var (
		res provider.ExecResult
		err error
	)
	if c.entered != nil && !killed && c.entered.enterFailed(waitErr) && c.sink.wroteLine(nsenterPrefix) {
		// The sandbox ended between its lookup and nsenter's entry (its
		// init killed by a destroy): nothing of the command ran, as if
		// the lookup had found it gone. (A command that wrote one line
		// starting so and exited 1 as its sandbox ended is taken for it.)
		return res, noLongerRuns(c.m.SandboxID)
	}
	if errors.Is(waitErr, errServerLost) && !killed {
		// Killed in the sandbox (its user may): the command's status went
		// with it. (The command has ended; what it left in the background
		// lives on, as after any command.)
		waitErr = &exitCode{137}
		if err := out.Write(errStream, []byte("\n[tether: the sandbox's exec server was killed during the command; its exit status is unknown]\n")); err != nil {
			return res, fmt.Errorf("local: exec: passing output on: %w", err)
		}
	}
	if res, err = execOutcome(killed, waitErr); err != nil {
		return res, err
	}
	if res.ExitCode == 1 && c.entered != nil && len(c.entered.groups) > 0 && c.sink.wroteOnly(nsenterForkFailed) {
		// nsenter started in the sandbox's groups but could not fork the
		// command's shell: at the process limit, though nsenter alone
		// says only EAGAIN. (A command that wrote exactly that line and
		// nothing else, and exited 1, would get the note too.)
		if err := out.Write(errStream, []byte("[tether: the command did not start: the sandbox is at its process limit]\n")); err != nil {
			return res, fmt.Errorf("local: exec: passing output on: %w", err)
		}
	}
	return res, nil
}

// outputPipes makes n pipes for a command's output; on an error none
// stays open.
func outputPipes(n int) (readers, writers []*os.File, err error) {
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(readers)
			closeAll(writers)
			return nil, nil, err
		}
		readers, writers = append(readers, r), append(writers, w)
	}
	return readers, writers, nil
}

// atProcessLimit is the result of a command that could not start, the
// sandbox being at its process limit: exit status 1 and fork's complaint
// on stream, as a fork inside the sandbox would fail.
func atProcessLimit(out *outputcap.Cap, stream string) (provider.ExecResult, error) {
	res := provider.ExecResult{ExitCode: 1}
	if err := out.Write(stream, []byte("cannot start the command: fork: resource temporarily unavailable (the sandbox is at its process limit)\n")); err != nil {
		return res, fmt.Errorf("local: exec: passing output on: %w", err)
	}
	truncated, err := out.Finish()
	if err != nil {
		return res, fmt.Errorf("local: exec: passing output on: %w", err)
	}
	res.Truncated = truncated
	return res, nil
}

// nsenterForkFailed is what nsenter (util-linux) writes when it has
// entered the sandbox but cannot fork the command's shell there.
const nsenterForkFailed = "nsenter: fork failed: Resource temporarily unavailable\n"

// nsenterPrefix starts each line nsenter writes of its own failures, such
// as "nsenter: cannot open /proc/N/ns/cgroup: No such file or directory"
// for an init that has died.
const nsenterPrefix = "nsenter: "

// captured is a started command whose output runCaptured reads.
type captured struct {
	p *Provider
	m meta
	// waitFn waits for the command to end; stopFn kills it and all it
	// started, given the channel waitFn's answer comes on, and returns it.
	waitFn func() error
	stopFn func(waited <-chan error) error
	// entered is the command when it runs through nsenter (nil: through
	// the exec server).
	entered *sandboxCmd
	group   cgroup.ExecGroup
	streams []string
	readers []*os.File
	sink    *outputSink
}

// wait reads the command's output until it ends, its timeout (killed) or
// ctx does, or the output cannot be passed on (failure), then takes what
// it wrote last and hands pipes that background processes still hold to
// detachOutput.
func (c *captured) wait(ctx context.Context, timeout time.Duration) (killed bool, waitErr, failure error) {
	ended := make([]bool, len(c.readers))
	var readersDone sync.WaitGroup
	for i, r := range c.readers {
		readersDone.Go(func() { ended[i] = c.sink.readFrom(c.streams[i], r) })
	}
	waited := make(chan error, 1)
	go func() { waited <- c.waitFn() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	killed = true
	select {
	case waitErr = <-waited:
		killed = false
	case <-timer.C:
	case <-ctx.Done():
		c.sink.discard()
		failure = fmt.Errorf("local: exec: %w", ctx.Err())
	case <-c.sink.failed:
		failure = fmt.Errorf("local: exec: passing output on: %w", c.sink.failure())
	}
	if killed {
		waitErr = c.stopFn(waited)
	}

	// The command has ended, and all it wrote is in the pipes. Stop the
	// readers (they would wait for background processes), then take what
	// is left without waiting.
	for _, r := range c.readers {
		_ = r.SetReadDeadline(time.Now())
	}
	readersDone.Wait()
	var held []*os.File
	for i, r := range c.readers {
		if !ended[i] && !c.sink.drainNow(c.streams[i], r) {
			held = append(held, r)
		}
	}
	if len(held) > 0 {
		c.p.detachOutput(ctx, c.m, held)
	}
	if failure == nil && c.sink.failure() != nil {
		failure = fmt.Errorf("local: exec: passing output on: %w", c.sink.failure())
	}
	return killed, waitErr, failure
}

// outputSink is where the pipe readers of one command put its output, one
// chunk at a time. After out fails (the client of a streaming exec went
// away), or once told to discard, it drops what comes while the readers go
// on draining the pipes.
type outputSink struct {
	mu       sync.Mutex
	out      *outputcap.Cap
	dropping bool
	err      error
	// failed is closed when out fails.
	failed chan struct{}
	// head is the start of what was written to the stream watched (none:
	// nothing is kept), up to headMax bytes; written is how many bytes
	// were written in all, to any stream.
	watched string
	head    []byte
	written int
}

// headMax is how much of the stream watched an outputSink keeps: room
// for a line of nsenter's, which may name a path.
const headMax = 256

// wroteOnly reports whether all the command wrote, on any stream, was
// want on the stream watched (want no longer than headMax). Called once
// the readers are done.
func (s *outputSink) wroteOnly(want string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watched != "" && s.written == len(want) && string(s.head) == want
}

// wroteLine reports whether all the command wrote, on any stream, was one
// line, starting with prefix, on the stream watched. Called once the
// readers are done.
func (s *outputSink) wroteLine(prefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watched != "" && s.written == len(s.head) && bytes.HasPrefix(s.head, []byte(prefix)) &&
		bytes.IndexByte(s.head, '\n') == len(s.head)-1
}

func (s *outputSink) write(stream string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropping {
		return
	}
	s.written += len(p)
	if stream == s.watched && len(s.head) < headMax {
		s.head = append(s.head, p[:min(len(p), headMax-len(s.head))]...)
	}
	if err := s.out.Write(stream, p); err != nil {
		s.dropping, s.err = true, err
		close(s.failed)
	}
}

func (s *outputSink) discard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropping = true
}

func (s *outputSink) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// readBuffer is how much of a pipe is read at once.
const readBuffer = 32 << 10

// readFrom writes what comes from r to the sink until r ends (true: no
// process holds it any more) or its read deadline passes (false).
func (s *outputSink) readFrom(stream string, r *os.File) bool {
	buf := make([]byte, readBuffer)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.write(stream, buf[:n])
		}
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// drainNow writes to the sink what r holds now, without waiting for more:
// at most its capacity, which covers all that was written before the
// readers stopped. It reports whether r ended (no process holds it).
func (s *outputSink) drainNow(stream string, r *os.File) bool {
	rc, err := r.SyscallConn()
	if err != nil || r.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	left := 1 << 20 // the kernel's default pipe-max-size, if the pipe does not say
	_ = rc.Control(func(fd uintptr) {
		if n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil {
			left = n
		}
	})
	buf := make([]byte, readBuffer)
	for left > 0 {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf[:min(len(buf), left)])
			return true // never wait
		})
		switch {
		case err != nil:
			return false
		case errors.Is(rerr, unix.EINTR):
		case rerr != nil: // EAGAIN: empty, and still held open
			return false
		case n == 0:
			return true
		default:
			s.write(stream, buf[:n])
			left -= n
		}
	}
	return false
}

// detachOutput hands the output pipes that background processes of an
// ended command still hold to a drain inside the sandbox (cat into
// /dev/null, or the shell's read in an image without cat; in the sandbox's
// control groups), which lives as long as they
// hold them. What they write from then on is discarded; they neither block
// on a full pipe nor die of SIGPIPE, and that outlasts Tether. If the drain
// cannot start (the sandbox at its process limit), the pipes are closed.
func (p *Provider) detachOutput(ctx context.Context, m meta, pipes []*os.File) {
	for _, r := range pipes {
		cmd := p.command(m, nil, "sh", "-c", `{ if command -v cat >/dev/null; then exec cat; fi; while read -r _; do :; done; } <&3 >/dev/null 2>&1 3<&- &`)
		cmd.ExtraFiles = []*os.File{r} // blocking again: cat must wait for data
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = p.run(dctx, cmd)
		cancel()
	}
}

// writableRoots are where a sandbox may write.
var writableRoots = []string{WorkDir, "/tmp"}

func writable(p string) bool {
	for _, root := range writableRoots {
		if strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// limitedReader fails once more than limit bytes were read.
type limitedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

var errTooLarge = errors.New("file exceeds the size limit")

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.left < 0 {
		l.exceeded = true
		return 0, errTooLarge
	}
	if int64(len(b)) > l.left+1 {
		b = b[:l.left+1]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	if l.left < 0 {
		l.exceeded = true
		return n, errTooLarge
	}
	return n, err
}

// fullNote is what local adds to the file error of a full file system.
const fullNote = " (its /workspace size limit, or /tmp's memory)"

// fileError turns a file script's exit code into the file error it means.
func fileError(code int, clean, stderr string) error {
	return shfiles.Error(code, clean, stderr, fullNote)
}

// WriteFile implements provider.Files. The write happens inside the sandbox,
// as the sandbox's own processes would make it, so its read-only mounts and
// symlinks mean what they mean there. The body goes to a temporary file
// beside the target, which replaces the target only once the whole body
// arrived within the limit: a failed or rejected upload leaves the old file
// as it was and no partial one.
func (p *Provider) WriteFile(ctx context.Context, sandboxID, filePath string, r io.Reader, limit int64) error {
	clean, err := shfiles.CheckPath(filePath)
	if err != nil {
		return err
	}
	if !writable(clean) {
		return provider.Errorf(provider.CodeInvalidPath, "path %s is outside the sandbox's writable areas (%s)", clean, strings.Join(writableRoots, ", "))
	}
	m, err := p.enterable(sandboxID)
	if err != nil {
		return err
	}
	tmp := path.Join(path.Dir(clean), ".tether-upload-"+hostos.RandomSuffix()+"-"+path.Base(clean))
	return p.stageThenCommit(ctx, m, r, limit, staging{
		op: "write file", what: "file", clean: clean,
		stage:   []string{"sh", "-c", shfiles.StageFileFromStdin, "sh", clean, tmp},
		commit:  []string{"sh", "-c", shfiles.CommitFile, "sh", tmp, clean},
		discard: []string{"rm", "-f", "--", tmp},
	})
}

// staging is an upload in two steps: stage writes the body aside (its exit
// codes are the file scripts'), commit puts it in place, discard removes
// what stage left.
type staging struct {
	op, what, clean        string
	stage, commit, discard []string
	// badBody, if set, is what shfiles.ExitWriteFailed from stage means.
	badBody string
}

// stageThenCommit runs st.stage with r (at most limit bytes) as its input
// and, only if all of it arrived and stage succeeded, st.commit; whatever
// fails, st.discard cleans up, so that the target is as it was.
func (p *Provider) stageThenCommit(ctx context.Context, m meta, r io.Reader, limit int64, st staging) error {
	body := &limitedReader{r: r, left: limit}
	var stderr bytes.Buffer
	cmd := p.command(m, nil, st.stage...)
	cmd.Stdin, cmd.Stderr = body, &stderr
	_, err := p.run(ctx, cmd)
	discard := func() {
		_, _ = p.run(context.WithoutCancel(ctx), p.command(m, nil, st.discard...))
	}
	var exitErr *exec.ExitError
	switch {
	case body.exceeded:
		discard()
		return provider.Errorf(provider.CodePayloadTooLarge, "%s exceeds the %d-byte limit", st.what, limit)
	case ctx.Err() != nil:
		discard()
		return fmt.Errorf("local: %s: %w", st.op, ctx.Err())
	case errors.As(err, &exitErr) && exitErr.ExitCode() == shfiles.ExitWriteFailed && st.badBody != "":
		discard()
		return provider.Errorf(provider.CodeInvalidRequest, "%s: %s", st.badBody, shfiles.ShellError(stderr.String()))
	case errors.As(err, &exitErr):
		discard()
		return fileError(exitErr.ExitCode(), st.clean, stderr.String())
	case err != nil:
		discard()
		return fmt.Errorf("local: %s: %w", st.op, err)
	}
	stderr.Reset()
	commit := p.command(m, nil, st.commit...)
	commit.Stderr = &stderr
	if _, err := p.run(context.WithoutCancel(ctx), commit); err != nil {
		discard()
		if errors.As(err, &exitErr) {
			return fileError(exitErr.ExitCode(), st.clean, stderr.String())
		}
		return fmt.Errorf("local: %s: %w", st.op, err)
	}
	return nil
}

// ReadFile implements provider.Files.
func (p *Provider) ReadFile(ctx context.Context, sandboxID, filePath string, w io.Writer, limit int64) error {
	clean, err := shfiles.CheckPath(filePath)
	if err != nil {
		return err
	}
	m, err := p.enterable(sandboxID)
	if err != nil {
		return err
	}
	return p.readOut(ctx, m, "read file", clean, w, func(code int) error {
		if code == shfiles.ExitTooLarge {
			return provider.Errorf(provider.CodePayloadTooLarge, "%s is larger than the %d-byte file limit", clean, limit)
		}
		return nil
	}, "sh", "-c", shfiles.ReadFileNonblock, "sh", clean, strconv.FormatInt(limit, 10))
}

// readOut runs argv in the sandbox with its output going to w, and turns a
// failure into the file error it means (special, if set, may claim an exit
// code first).
func (p *Provider) readOut(ctx context.Context, m meta, op, clean string, w io.Writer, special func(code int) error, argv ...string) error {
	var stderr bytes.Buffer
	cmd := p.command(m, nil, argv...)
	cmd.Stdout, cmd.Stderr = w, &stderr
	_, err := p.run(ctx, cmd)
	if ctx.Err() != nil {
		return fmt.Errorf("local: %s: %w", op, ctx.Err())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if special != nil {
			if err := special(exitErr.ExitCode()); err != nil {
				return err
			}
		}
		return fileError(exitErr.ExitCode(), clean, stderr.String())
	}
	if err != nil {
		return fmt.Errorf("local: %s: %w", op, err)
	}
	return nil
}

// ReadArchive implements provider.Archives.
func (p *Provider) ReadArchive(ctx context.Context, sandboxID, dir string, w io.Writer) error {
	clean, err := shfiles.CheckPath(dir)
	if err != nil {
		return err
	}
	m, err := p.enterable(sandboxID)
	if err != nil {
		return err
	}
	return p.readOut(ctx, m, "read archive", clean, w, nil, "sh", "-c", shfiles.ReadArchive, "sh", clean)
}

// WriteArchive implements provider.Archives. The archive is extracted into a
// staging folder inside the target first, and copied over it only once it
// arrived whole within the limit.
func (p *Provider) WriteArchive(ctx context.Context, sandboxID, dir string, r io.Reader, limit int64) error {
	clean, err := shfiles.CheckPath(dir)
	if err != nil {
		return err
	}
	if !writable(clean) && clean != WorkDir && clean != "/tmp" {
		return provider.Errorf(provider.CodeInvalidPath, "path %s is outside the sandbox's writable areas (%s)", clean, strings.Join(writableRoots, ", "))
	}
	m, err := p.enterable(sandboxID)
	if err != nil {
		return err
	}
	stage := path.Join(clean, ".tether-archive-"+hostos.RandomSuffix())
	return p.stageThenCommit(ctx, m, r, limit, staging{
		op: "write archive", what: "archive", clean: clean,
		stage:   []string{"sh", "-c", shfiles.StageArchiveFromStdin, "sh", clean, stage},
		commit:  []string{"sh", "-c", `cp -a -- "$1"/. "$2"/ && rm -rf -- "$1"`, "sh", stage, clean},
		discard: []string{"rm", "-rf", "--", stage},
		badBody: "the body is not a tar archive that extracts here",
	})
}

// outputNote describes exec output, for Info.
const outputNote = "exec output: read through pipes and never stored on the host; past the server's cap (MAX_EXEC_OUTPUT) the first and last parts are kept, with \"[tether: N bytes of output omitted]\" between them"
