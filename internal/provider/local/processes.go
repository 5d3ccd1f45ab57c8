package local

// Tether's side of the processes, PTY and watch capabilities: each call
// is a connection to the sandbox's exec server (execsock.go), whose
// supervisor (supervisor.go) runs and keeps the processes inside the
// sandbox. Nothing of them is in Tether: they outlive a Tether restart
// and end with the sandbox. What the server says is the sandbox's data:
// every frame is bounded, every unary answer has a deadline, and nothing
// it says decides anything on the host.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/shfiles"
)

// The local provider has every capability of the processes family.
var (
	_ provider.Processes   = (*Provider)(nil)
	_ provider.PTY         = (*Provider)(nil)
	_ provider.FileWatcher = (*Provider)(nil)
)

// WithProcessLimits sets how many processes a sandbox's supervisor keeps
// at once (running, and ended ones for a minute) and how many bytes of
// each one's latest output it keeps; DefaultProcessMax and
// DefaultProcessOutput otherwise. Both count against the sandbox's own
// limits.
func WithProcessLimits(maxProcesses int, output int64) Option {
	return func(p *Provider) { p.procMax, p.procOutput = maxProcesses, output }
}

// processesNote says how processes work here, for Info.
func (p *Provider) processesNote() string {
	return fmt.Sprintf("processes, terminals and watches: run by the sandbox's exec server, inside it, as its user; they survive a Tether restart and end with the sandbox; "+
		"the last %d KiB of each process's output and at most %d processes (running, or ended within %s) are kept per sandbox, counted against its memory and pids; "+
		"not in sandboxes without an exec server (LOCAL_EXEC_SERVER=false, an image with a Tether binary linked against the C library, or made by an older Tether)",
		p.procOutput>>10, p.procMax, processKeep)
}

// supervised returns the metadata of a sandbox whose supervisor can be
// asked: it runs, is not paused, and has one.
func (p *Provider) supervised(id string) (meta, error) {
	m, err := p.enterable(id)
	if err != nil {
		return m, err
	}
	if m.Supervisor < 1 {
		return m, provider.Errorf(provider.CodeNotSupported,
			"sandbox %s runs no process supervisor: it has no exec server (LOCAL_EXEC_SERVER=false, or an image the server cannot run in) or was made by an older Tether", id)
	}
	return m, nil
}

// procLimits are the limits every start sends.
func (p *Provider) procLimits() procLimits {
	return procLimits{Max: p.procMax, Output: p.procOutput, KeepMS: processKeep.Milliseconds()}
}

// dialSupervisor connects to m's exec server and sends it op with r.
func (p *Provider) dialSupervisor(ctx context.Context, m meta, op string, r procRequest) (*net.UnixConn, error) {
	dctx, cancel := context.WithTimeout(ctx, serverDial)
	defer cancel()
	var conn net.Conn
	err := onSocketPath(p.sandboxDir(m.SandboxID), func(path string) error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(dctx, "unix", path)
		return err
	})
	if err != nil {
		return nil, p.supervisorLost(ctx, m)
	}
	uc := conn.(*net.UnixConn)
	var frame frameBuffer
	if err := writeFrame(&frame, serverRequest{Op: op, Proc: &r}); err != nil {
		_ = uc.Close()
		return nil, fmt.Errorf("local: %s: %w", op, err)
	}
	if len(frame) > 4+maxRequest {
		_ = uc.Close()
		return nil, provider.Errorf(provider.CodeInvalidRequest, "the request is %d bytes, over %d", len(frame)-4, maxRequest)
	}
	_ = uc.SetWriteDeadline(time.Now().Add(serverDial))
	if _, err := uc.Write(frame); err != nil {
		_ = uc.Close()
		return nil, p.supervisorLost(ctx, m)
	}
	_ = uc.SetWriteDeadline(time.Time{})
	return uc, nil
}

// supervisorLost is the error for a supervisor that cannot be reached, or
// whose answer broke off: the sandbox ended (it may take a moment to be
// seen), was paused, or its user killed its exec server, and with it the
// supervisor's records.
func (p *Provider) supervisorLost(ctx context.Context, m meta) error {
	if ctx.Err() != nil {
		return fmt.Errorf("local: processes: %w", ctx.Err())
	}
	for range 20 {
		if !m.alive() {
			return provider.Errorf(provider.CodeProviderUnavailable,
				"sandbox %s no longer runs on this host; the janitor will mark it lost", m.SandboxID)
		}
		if p.frozen(m.SandboxID) {
			return pausedConflict(m.SandboxID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Not the dial's or read's error: it may name the host's state folder.
	return provider.Errorf(provider.CodeNotSupported,
		"sandbox %s's exec server, which runs its processes, is gone (a process of the sandbox killed it): its processes are out of reach", m.SandboxID)
}

// callSupervisor asks for op and reads its one answer.
func (p *Provider) callSupervisor(ctx context.Context, m meta, op string, r procRequest) (procReply, error) {
	var reply procReply
	conn, err := p.dialSupervisor(ctx, m, op, r)
	if err != nil {
		return reply, err
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(supervisorWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	if err := readFrame(conn, maxProcFrame, &reply); err != nil {
		return reply, p.supervisorLost(ctx, m)
	}
	return reply, replyError(m.SandboxID, reply)
}

// replyError is the provider's error for the supervisor's (nil if it
// answered no error).
func replyError(id string, r procReply) error {
	if r.Code == "" {
		return nil
	}
	msg := strings.ToValidUTF8(r.Error, "\uFFFD")
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	codes := map[string]provider.Code{
		errNotFound: provider.CodeProcessNotFound, errEnded: provider.CodeProcessNotFound,
		errInvalid: provider.CodeInvalidRequest, errQuota: provider.CodeQuotaExceeded,
		errNoFile: provider.CodeFileNotFound, errNotDir: provider.CodeInvalidPath, errDenied: provider.CodePermissionDenied,
	}
	if code, ok := codes[r.Code]; ok {
		return provider.Errorf(code, "sandbox %s: %s", id, msg)
	}
	return fmt.Errorf("local: sandbox %s's process supervisor: %s", id, msg)
}

// checkSpec refuses a spec the supervisor must not be asked for, and
// returns its size.
func checkSpec(spec provider.ProcessSpec) error {
	bad := func(format string, args ...any) error {
		return provider.Errorf(provider.CodeInvalidRequest, "process: "+format, args...)
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return bad("argv names no command")
	}
	size := len(spec.Cwd) + len(spec.Tag)
	for _, a := range spec.Argv {
		size += len(a) + 1
		if strings.IndexByte(a, 0) >= 0 {
			return bad("an argument holds a NUL byte")
		}
	}
	for k, v := range spec.Env {
		size += len(k) + len(v) + 2
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return bad("env name %q is not a variable's name, or its value holds a NUL byte", k)
		}
	}
	switch {
	case spec.Cwd != "" && (!path.IsAbs(spec.Cwd) || strings.IndexByte(spec.Cwd, 0) >= 0):
		return bad("cwd %q is not an absolute path", spec.Cwd)
	case strings.IndexByte(spec.Tag, 0) >= 0:
		return bad("the tag holds a NUL byte")
	case spec.PTY != nil && !validSize(*spec.PTY):
		return bad("a terminal's rows and columns are 1 to 65535 (got %dx%d)", spec.PTY.Rows, spec.PTY.Cols)
	case spec.Timeout < 0:
		return bad("a negative timeout")
	case size > maxSpecBytes:
		return bad("argv, env, cwd and tag hold %d bytes, over %d", size, maxSpecBytes)
	}
	return nil
}

func validSize(s provider.PTYSize) bool {
	return s.Rows >= 1 && s.Cols >= 1 && s.Rows <= 65535 && s.Cols <= 65535
}

func checkSelector(sel provider.ProcessSelector) error {
	if sel.PID < 0 || (sel.PID == 0 && sel.Tag == "") {
		return provider.Errorf(provider.CodeInvalidRequest, "a process is selected by its pid or its tag")
	}
	return nil
}

// wireSpec is the request that starts spec in m: its environment is the
// provider's base (with TERM for a terminal), the sandbox's and spec's,
// and nothing else.
func wireSpec(m meta, spec provider.ProcessSpec) *procSpec {
	env := baseEnv()
	if spec.PTY != nil {
		env["TERM"] = "xterm-256color"
	}
	maps.Copy(env, m.Env)
	maps.Copy(env, spec.Env)
	list := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}
	ws := &procSpec{Argv: spec.Argv, Env: list, SpecEnv: spec.Env, Cwd: spec.Cwd, Dir: WorkDir, Tag: spec.Tag,
		Stdin: spec.Stdin, TimeoutMS: spec.Timeout.Milliseconds()}
	if spec.Cwd != "" {
		ws.Dir = path.Clean(spec.Cwd)
	}
	if spec.Timeout > 0 && ws.TimeoutMS == 0 {
		ws.TimeoutMS = 1
	}
	if spec.PTY != nil {
		ws.Rows, ws.Cols = spec.PTY.Rows, spec.PTY.Cols
	}
	return ws
}

// processInfo is the provider's ProcessInfo of the supervisor's.
func processInfo(i *procInfo) provider.ProcessInfo {
	out := provider.ProcessInfo{PID: i.PID, Tag: i.Spec.Tag, Argv: i.Spec.Argv, Env: i.Spec.SpecEnv, Cwd: i.Spec.Cwd,
		Stdin: i.Spec.Stdin, StartedAt: i.StartedAt, Running: i.Exit == nil, Kept: i.Kept, Dropped: i.Dropped}
	if i.Spec.pty() {
		out.PTY = &provider.PTYSize{Rows: i.Spec.Rows, Cols: i.Spec.Cols}
	}
	if i.Exit != nil {
		e := provider.ProcessExit(*i.Exit)
		out.Exit = &e
	}
	return out
}

// StartProcess implements provider.Processes. Starts are serialised with
// freezing the sandbox, as exec's are.
func (p *Provider) StartProcess(ctx context.Context, sandboxID string, spec provider.ProcessSpec) (provider.ProcessInfo, error) {
	if err := checkSpec(spec); err != nil {
		return provider.ProcessInfo{}, err
	}
	m, err := p.supervised(sandboxID)
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	unlock := p.starts.lock(sandboxID)
	defer unlock()
	if p.frozen(sandboxID) {
		return provider.ProcessInfo{}, pausedConflict(sandboxID)
	}
	reply, err := p.callSupervisor(ctx, m, opStart, procRequest{Spec: wireSpec(m, spec), Limits: p.procLimits()})
	if err != nil {
		return provider.ProcessInfo{}, err
	}
	if reply.Info == nil {
		return provider.ProcessInfo{}, fmt.Errorf("local: start process: the supervisor's answer holds no process")
	}
	return processInfo(reply.Info), nil
}

// ListProcesses implements provider.Processes.
func (p *Provider) ListProcesses(ctx context.Context, sandboxID string) ([]provider.ProcessInfo, error) {
	m, err := p.supervised(sandboxID)
	if err != nil {
		return nil, err
	}
	conn, err := p.dialSupervisor(ctx, m, opList, procRequest{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(supervisorWait))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	var out []provider.ProcessInfo
	budget := &io.LimitedReader{R: conn, N: maxListBytes}
	for range maxListed + 1 {
		var reply procReply
		if err := readFrame(budget, maxProcFrame, &reply); err != nil {
			if budget.N <= 0 {
				return nil, fmt.Errorf("local: list processes: the supervisor's list exceeds %d bytes", maxListBytes)
			}
			return nil, p.supervisorLost(ctx, m)
		}
		if err := replyError(sandboxID, reply); err != nil {
			return nil, err
		}
		if reply.Done {
			return out, nil
		}
		if reply.Info == nil {
			return nil, fmt.Errorf("local: list processes: the supervisor's answer holds no process")
		}
		out = append(out, processInfo(reply.Info))
	}
	return nil, fmt.Errorf("local: list processes: the supervisor listed more than %d", maxListed)
}

// eventKinds are the process events the supervisor may send.
var eventKinds = map[string]provider.ProcessEventKind{
	"start": provider.ProcessStart, streamStdout: provider.ProcessStdout, streamStderr: provider.ProcessStderr,
	streamPTY: provider.ProcessPTYOutput, "dropped": provider.ProcessDropped, "end": provider.ProcessEnd,
}

// AttachProcess implements provider.Processes.
func (p *Provider) AttachProcess(ctx context.Context, sandboxID string, sel provider.ProcessSelector, from provider.AttachFrom, emit func(provider.ProcessEvent) error) error {
	if err := checkSelector(sel); err != nil {
		return err
	}
	m, err := p.supervised(sandboxID)
	if err != nil {
		return err
	}
	conn, err := p.dialSupervisor(ctx, m, opAttach, procRequest{PID: sel.PID, Tag: sel.Tag, FromStart: from == provider.AttachStart})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		var reply procReply
		if err := readFrame(conn, maxProcFrame, &reply); err != nil {
			return p.supervisorLost(ctx, m)
		}
		if err := replyError(sandboxID, reply); err != nil {
			return err
		}
		kind, ok := "", false
		if reply.Event != nil {
			kind, ok = reply.Event.Kind, eventKinds[reply.Event.Kind] != ""
		}
		if !ok || (kind == "end" && reply.Event.Exit == nil) {
			return fmt.Errorf("local: attach: the supervisor sent an event of kind %q", kind)
		}
		ev := provider.ProcessEvent{Kind: eventKinds[kind], PID: reply.Event.PID, Data: reply.Event.Data,
			Offset: reply.Event.Offset, Dropped: reply.Event.Dropped}
		if reply.Event.Exit != nil {
			e := provider.ProcessExit(*reply.Event.Exit)
			ev.Exit = &e
		}
		if err := emit(ev); err != nil {
			return err
		}
		if ev.Kind == provider.ProcessEnd {
			return nil
		}
	}
}

// control asks for one of the operations on a process that answer
// nothing.
func (p *Provider) control(ctx context.Context, sandboxID, op string, sel provider.ProcessSelector, r procRequest) error {
	if err := checkSelector(sel); err != nil {
		return err
	}
	m, err := p.supervised(sandboxID)
	if err != nil {
		return err
	}
	r.PID, r.Tag = sel.PID, sel.Tag
	_, err = p.callSupervisor(ctx, m, op, r)
	return err
}

// WriteStdin implements provider.Processes, in requests of at most
// maxInput bytes.
func (p *Provider) WriteStdin(ctx context.Context, sandboxID string, sel provider.ProcessSelector, data []byte) error {
	for {
		n := min(len(data), maxInput)
		if err := p.control(ctx, sandboxID, opInput, sel, procRequest{Data: data[:n]}); err != nil {
			return err
		}
		if data = data[n:]; len(data) == 0 {
			return nil
		}
	}
}

// CloseStdin implements provider.Processes.
func (p *Provider) CloseStdin(ctx context.Context, sandboxID string, sel provider.ProcessSelector) error {
	return p.control(ctx, sandboxID, opCloseStdin, sel, procRequest{})
}

// SignalProcess implements provider.Processes.
func (p *Provider) SignalProcess(ctx context.Context, sandboxID string, sel provider.ProcessSelector, signal int) error {
	if signal < 1 || signal > 64 {
		return provider.Errorf(provider.CodeInvalidRequest, "signal %d is not a signal (1 to 64)", signal)
	}
	return p.control(ctx, sandboxID, opSignal, sel, procRequest{Signal: signal})
}

// ResizePTY implements provider.PTY.
func (p *Provider) ResizePTY(ctx context.Context, sandboxID string, sel provider.ProcessSelector, size provider.PTYSize) error {
	if !validSize(size) {
		return provider.Errorf(provider.CodeInvalidRequest, "a terminal's rows and columns are 1 to 65535 (got %dx%d)", size.Rows, size.Cols)
	}
	return p.control(ctx, sandboxID, opResize, sel, procRequest{Rows: size.Rows, Cols: size.Cols})
}

// fileKinds are the file events the supervisor may send.
var fileKinds = map[string]provider.FileEventKind{
	"start": provider.FileWatchStart, "create": provider.FileCreate, "write": provider.FileWrite,
	"remove": provider.FileRemove, "rename": provider.FileRename, "chmod": provider.FileChmod,
}

// WatchFiles implements provider.FileWatcher: inotify in the sandbox, as
// its user.
func (p *Provider) WatchFiles(ctx context.Context, sandboxID, dir string, recursive bool, emit func(provider.FileEvent) error) error {
	clean, err := shfiles.CheckPath(dir)
	if err != nil {
		return err
	}
	m, err := p.supervised(sandboxID)
	if err != nil {
		return err
	}
	conn, err := p.dialSupervisor(ctx, m, opWatch, procRequest{Path: clean, Recursive: recursive})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		var reply procReply
		if err := readFrame(conn, maxProcFrame, &reply); err != nil {
			return p.supervisorLost(ctx, m)
		}
		if err := replyError(sandboxID, reply); err != nil {
			return err
		}
		if reply.File == nil || fileKinds[reply.File.Kind] == "" || !validRel(reply.File.Path) {
			return errors.New("local: watch: the supervisor sent a malformed event")
		}
		f := reply.File
		if err := emit(provider.FileEvent{Kind: fileKinds[f.Kind], Path: f.Path, IsDir: f.IsDir, At: f.At}); err != nil {
			return err
		}
	}
}

// validRel reports whether rel is a path relative to a watched folder
// and inside it (or empty).
func validRel(rel string) bool {
	return rel == "" || (!path.IsAbs(rel) && path.Clean(rel) == rel && rel != ".." && !strings.HasPrefix(rel, "../"))
}
