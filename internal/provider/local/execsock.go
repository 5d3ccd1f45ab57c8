package local

// Tether's side of the exec server (execserver.go): the listening socket
// it makes for a sandbox, and an exec through it.
//
// Per exec, Tether connects to the socket and sends the request with three
// descriptors: the command's stdout and stderr (the write ends of the
// pipes it reads, as for nsenter) and one end of a socket pair, the token.
// The server forks the command's shell (the sandbox's /bin/sh) with the
// token as its descriptor 3. That shell writes one byte to it: the kernel
// attaches its pid to the byte (SO_PASSCRED on Tether's end), translated
// into Tether's pid namespace; a process without CAP_SYS_ADMIN cannot
// claim another's. Tether checks that the pid is a process of this
// sandbox (its pid namespace), moves it into the exec's control group,
// and only then writes the go-ahead, which the shell waits for before it
// runs anything: whatever the command starts is in the exec group, as
// with nsenter. Every wait has a deadline and every frame a bound; if the
// server cannot be reached or says nothing usable before the go-ahead
// (nothing of the command ran), the exec goes through nsenter instead.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/cgroup"
	"github.com/tetherhq/tether/provider"
)

// execSocket is the exec server's socket in a sandbox's folder.
const execSocket = "exec.sock"

// Deadlines of an exec through the server, before the command runs.
const (
	// serverDial bounds the connect and the sending of the request.
	serverDial = 5 * time.Second
	// serverToken bounds the wait for the command's shell to say its pid.
	serverToken = 10 * time.Second
	// serverReplyWait bounds the wait for the server's answer where one
	// must come at once: why it could not start the command, or, after a
	// kill, how the command ended.
	serverReplyWait = time.Second
)

// serverScript is what the command's shell runs when the server starts
// it: it moves itself into its exec group where it was given the group's
// tasks file (descriptor 4: cgroup.ExecGroup.OpenSelfJoin; silently not,
// where it was not) and closes that; it says its pid on the token
// (descriptor 3) and waits for the go-ahead, then closes it and goes on
// as execScript does (the environment is the process's own already: the
// request's, never the server's).
const serverScript = `{ echo 0 >&4; exec 4>&-; } 2>/dev/null; echo >&3 && read -r _ <&3 || exit 126; exec 3<&-; [ "$1" = 0 ] || ulimit -n "$1" || exit 126; shift; if [ -n "$1" ]; then cd -- "$1" || exit 1; fi; shift; eval 'set --;' "$1"`

// onSocketPath calls fn with a path of the sandbox's socket that connect
// and bind take: the path itself, or, past the 107 bytes a socket
// address holds, the same through a descriptor of its folder.
func onSocketPath(dir string, fn func(path string) error) error {
	full := filepath.Join(dir, execSocket)
	if len(full) < 100 {
		return fn(full)
	}
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return fn("/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + execSocket)
}

// execListener makes the listening socket of sandbox id's exec server,
// which only root may connect to, and returns it for bwrap to pass on.
func (p *Provider) execListener(id string) (*os.File, error) {
	dir := p.sandboxDir(id)
	_ = os.Remove(filepath.Join(dir, execSocket)) // an interrupted create's
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), execSocket)
	err = onSocketPath(dir, func(path string) error {
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			return err
		}
		return unix.Listen(fd, 128)
	})
	if err == nil {
		err = os.Chmod(filepath.Join(dir, execSocket), 0o600)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	return f, nil
}

// serverRun is a command that the exec server started and Tether let run.
type serverRun struct {
	conn *net.UnixConn
	// pid is the command's shell as the host sees it, pidfd a descriptor
	// of it.
	pid, pidfd int
	// gone is closed by abort (once): the wait stops waiting for the
	// command.
	gone     chan struct{}
	goneOnce sync.Once
}

// serverOutcome is how an attempt at an exec through the server ended.
type serverOutcome int

const (
	// serverStarted: the command runs.
	serverStarted serverOutcome = iota
	// serverFallback: nothing ran; exec goes through nsenter.
	serverFallback
	// serverAtLimit: the server could not fork, the sandbox being at its
	// process limit.
	serverAtLimit
	// serverPaused: the sandbox is frozen; nothing was asked.
	serverPaused
)

// errServerLost is what waiting for a command says when the server ended
// before it could say how the command ended.
var errServerLost = errors.New("the sandbox's exec server ended before the command did")

// startThroughServer asks m's exec server to start req's command with its
// output going to stdout and stderr, in group. Where it reports
// serverFallback, why says why (for tests and logs).
func (p *Provider) startThroughServer(ctx context.Context, m meta, req provider.ExecRequest, stdout, stderr *os.File, group cgroup.ExecGroup) (run *serverRun, outcome serverOutcome, why error) {
	if !p.execServer {
		return nil, serverFallback, errors.New("the exec server is off")
	}
	dctx, cancel := context.WithTimeout(ctx, serverDial)
	defer cancel()
	var conn net.Conn
	err := onSocketPath(p.sandboxDir(m.SandboxID), func(path string) error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(dctx, "unix", path)
		return err
	})
	if err != nil {
		return nil, serverFallback, err // no server: a sandbox made before it, or one whose user killed it
	}
	uc := conn.(*net.UnixConn)
	run = &serverRun{conn: uc, pidfd: -1, gone: make(chan struct{})}
	fallback := func(err error) (*serverRun, serverOutcome, error) {
		run.close()
		return nil, serverFallback, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fallback(err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "token")
	tokenFile := os.NewFile(uintptr(pair[0]), "token")
	err = unix.SetsockoptInt(pair[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	var token net.Conn
	if err == nil {
		token, err = net.FileConn(tokenFile)
	}
	_ = tokenFile.Close()
	if err != nil {
		_ = theirs.Close()
		return fallback(err)
	}
	defer func() { _ = token.Close() }()
	files := []*os.File{stdout, stderr, theirs}
	selfJoin := false
	if m.ServerFDs >= requestFDs {
		// The shell moves itself into the exec's group (serverScript); a
		// file that cannot be had only means Adopt moves it below.
		if join, _ := group.OpenSelfJoin(); join != nil {
			defer func() { _ = join.Close() }()
			files, selfJoin = append(files, join), true
		}
	}
	err = sendRequest(uc, p.serverRequest(m, req), files, time.Now().Add(serverDial))
	_ = theirs.Close() // the server holds it now, or no one does
	if err != nil {
		return fallback(err)
	}
	pid, err := readToken(ctx, token.(*net.UnixConn))
	if err != nil {
		// No shell said its pid: the server is stopped, or could not
		// fork, which it says.
		var reply serverReply
		_ = uc.SetReadDeadline(time.Now().Add(serverReplyWait))
		if readFrame(uc, maxReply, &reply) == nil && syscall.Errno(reply.Errno) == syscall.EAGAIN {
			run.close()
			return nil, serverAtLimit, nil
		}
		return fallback(err)
	}
	run.pid = pid
	if run.pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
		return fallback(fmt.Errorf("the command's shell %d: %w", pid, err))
	}
	// Checked after the pidfd holds the process: a pid of the sandbox's,
	// not one reused since.
	if !sameNamespace(pid, m.InitPID, "pid") {
		return fallback(fmt.Errorf("process %d, which answered the token, is not in the sandbox", pid))
	}
	// In the exec's group already where the shell moved itself there;
	// else moved into it now (which may wait for a grace period).
	if !selfJoin || !group.Holds(pid) {
		p.moved.Add(1)
		if err := group.Adopt(pid); err != nil {
			return fallback(err)
		}
	}
	_ = token.SetWriteDeadline(time.Now().Add(serverDial))
	if _, err := token.Write([]byte("\n")); err != nil {
		// The shell is gone (killed in the sandbox) and ran nothing.
		return fallback(err)
	}
	_ = uc.SetDeadline(time.Time{})
	return run, serverStarted, nil
}

// startServerIn is startThroughServer unless the sandbox is frozen, and
// never while it is being frozen (as startIn for nsenter).
func (p *Provider) startServerIn(ctx context.Context, m meta, req provider.ExecRequest, stdout, stderr *os.File, group cgroup.ExecGroup) (*serverRun, serverOutcome, error) {
	if p.cg != nil {
		unlock := p.starts.lock(m.SandboxID)
		defer unlock()
		if p.cg.Frozen(m.SandboxID) {
			return nil, serverPaused, pausedConflict(m.SandboxID)
		}
	}
	return p.startThroughServer(ctx, m, req, stdout, stderr, group)
}

// serverRequest is the request that starts req's command: the sandbox's
// sh running serverScript, with the sandbox's environment and the
// request's, and nothing else.
func (p *Provider) serverRequest(m meta, req provider.ExecRequest) serverRequest {
	env := baseEnv()
	maps.Copy(env, m.Env)
	maps.Copy(env, req.Env)
	list := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}
	return serverRequest{
		Argv: []string{"/bin/sh", "-c", serverScript, "sh", strconv.Itoa(m.Limits.OpenFiles), req.WorkDir, req.Command},
		Env:  list,
	}
}

// sendRequest sends req to the server, files along with its first bytes.
func sendRequest(conn *net.UnixConn, req serverRequest, files []*os.File, deadline time.Time) error {
	_ = conn.SetWriteDeadline(deadline)
	var frame frameBuffer
	if err := writeFrame(&frame, req); err != nil {
		return err
	}
	if len(frame) > 4+maxRequest {
		return fmt.Errorf("a request of %d bytes exceeds %d", len(frame)-4, maxRequest)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, _, err := conn.WriteMsgUnix(frame[:4], unix.UnixRights(fds...), nil)
	if err != nil {
		return err
	}
	_, err = conn.Write(frame[n:])
	return err
}

// frameBuffer collects a frame that writeFrame writes.
type frameBuffer []byte

func (b *frameBuffer) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}

// readToken reads the byte the command's shell writes to the token and
// returns the pid the kernel says wrote it. Descriptors passed along are
// closed; anything but one byte with its sender's credentials fails.
func readToken(ctx context.Context, token *net.UnixConn) (int, error) {
	deadline := time.Now().Add(serverToken)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = token.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = token.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(8*4))
	n, oobn, _, _, err := token.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, fmt.Errorf("waiting for the command's shell: %w", err)
	}
	msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
	pid := 0
	for _, msg := range msgs {
		if fds, err := unix.ParseUnixRights(&msg); err == nil {
			for _, fd := range fds {
				_ = unix.Close(fd)
			}
			continue
		}
		if cred, err := unix.ParseUnixCredentials(&msg); err == nil {
			pid = int(cred.Pid)
		}
	}
	if n != 1 || perr != nil || pid <= 0 {
		return 0, errors.New("the token carried no pid of the command's shell")
	}
	return pid, nil
}

// sameNamespace reports whether processes a and b are in the same
// namespace of kind (a name under /proc/PID/ns).
func sameNamespace(a, b int, kind string) bool {
	na, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(a), "ns", kind))
	if err != nil {
		return false
	}
	nb, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(b), "ns", kind))
	return err == nil && na == nb
}

// wait waits for the command to end and returns what ended it: nil, an
// *exitCode, or errServerLost once the command ended after the server did
// (its status then unknown).
func (r *serverRun) wait() error {
	var reply serverReply
	if err := readFrame(r.conn, maxReply, &reply); err == nil {
		switch {
		case reply.Signal > 0:
			return &exitCode{128 + reply.Signal}
		case reply.Exit != 0:
			return &exitCode{reply.Exit}
		}
		return nil
	}
	// The server is gone (or aborted): the command's end is its pidfd's.
	for {
		select {
		case <-r.gone:
			return errServerLost
		default:
		}
		fds := []unix.PollFd{{Fd: int32(r.pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 50); n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return errServerLost
		}
	}
}

// stop kills the command and all it started (its exec group, else its
// process group) and returns what waited (its wait) says, waiting at most
// serverReplyWait for it: a frozen server cannot answer.
func (r *serverRun) stop(group cgroup.ExecGroup, waited <-chan error) error {
	if len(group.Dirs()) > 0 {
		group.Kill()
	} else {
		killGroup(r.pid)
	}
	select {
	case err := <-waited:
		return err
	case <-time.After(serverReplyWait):
		r.abort()
		return <-waited
	}
}

// abort stops wait: the connection closes, and wait no longer waits for
// the command.
func (r *serverRun) abort() {
	r.goneOnce.Do(func() { close(r.gone) })
	_ = r.conn.Close()
}

// close releases the run once its wait returned (or it never started).
func (r *serverRun) close() {
	r.abort()
	if r.pidfd >= 0 {
		_ = unix.Close(r.pidfd)
		r.pidfd = -1
	}
}

// exitCode is a command's exit code as the server reported it (128 plus
// the signal's number for one killed by a signal).
type exitCode struct{ code int }

func (e *exitCode) Error() string { return "exit status " + strconv.Itoa(e.code) }
