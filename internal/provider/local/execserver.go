package local

// The exec server: the sandbox's first process (its pid 2, under bwrap's
// init), when the sandbox has one. It is this very binary, which the
// sandbox's init script execs through /proc/self/fd (nothing of the host
// is bound into the sandbox for it) as the sandbox's user, in its
// namespaces, control groups, seccomp filter and open-files limit, once
// the script has said the sandbox runs. It accepts connections on a listening socket that Tether made at a path
// only root on the host reaches (execsock.go) and, for each, starts the
// one command asked for, with the descriptors passed along with the
// request, and reports how it ended. It trusts nothing of the request
// beyond starting it as given: the command's own shell hands Tether its
// kernel-verified pid and waits for Tether's go-ahead before it runs
// anything (execsock.go), so what the server says is never needed to
// hold a command to its limits.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// serverArg is the first argument of the binary in its server mode.
const serverArg = "__tether-sandbox-exec-server"

// Bounds of the protocol, on both sides.
const (
	// maxRequest is the most a request frame may hold (the command, its
	// environment).
	maxRequest = 4 << 20
	// maxReply is the most a reply frame may hold.
	maxReply = 4 << 10
	// requestFDs is how many descriptors come with a request: the
	// command's stdout, stderr, its token socket and, from Tethers that
	// send it, the file through which the command's shell moves itself
	// into its exec group (its descriptor 4; execsock.go). A request of
	// an older Tether has the first three only.
	requestFDs, olderRequestFDs = 4, 3
)

// serverRequest asks the server to start one command, or, with Op, for
// an operation of its process supervisor (procwire.go), which Proc
// details.
type serverRequest struct {
	Argv []string     `json:"argv"`
	Env  []string     `json:"env"`
	Op   string       `json:"op,omitempty"`
	Proc *procRequest `json:"proc,omitempty"`
}

// serverReply is the server's one answer: why the command did not start
// (Error, with Errno), or how it ended (Exit, or Signal).
type serverReply struct {
	Error  string `json:"error,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	Exit   int    `json:"exit"`
	Signal int    `json:"signal,omitempty"`
}

func init() {
	if len(os.Args) == 3 && os.Args[1] == serverArg {
		os.Exit(serveExec(os.Args[2]))
	}
}

// serveExec runs the server on the listening socket at descriptor fd (a
// decimal string); it returns only if the server cannot start.
func serveExec(fd string) int {
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return 125
	}
	// Few threads (each counts against the sandbox's process limit) and
	// little memory (against its memory limit).
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(16 << 20)
	// Nothing the server inherited (the binary, the listener, the init
	// script's pipes) may reach a command; the sandbox's other processes
	// may not read its memory or descriptors through /proc.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 125
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// No signal is ignored here: a command would inherit that (SIGPIPE
	// ignored, and `yes | head -1` would never end). The server ignores
	// none itself, but it may have inherited some that Go leaves as they
	// were (SIGHUP and SIGINT under nohup or a shell's background job,
	// signals 32 and 33): back to their defaults.
	defaultIgnoredSignals()
	// Closed through its os.File, never by number: the File's finalizer
	// would close the number again when the collector ran, by then another
	// connection's descriptor (replies then failed with EBADF).
	lf := os.NewFile(uintptr(n), "exec.sock")
	ln, err := net.FileListener(lf)
	_ = lf.Close() // FileListener holds a copy
	if err != nil {
		return 125
	}
	s := &execServer{waits: map[int]chan syscall.WaitStatus{}}
	s.sup.init()
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	go s.reap(chld)
	// The init script said ready and left stdin, stdout and stderr on
	// /dev/null.
	for {
		conn, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: try again
			continue
		}
		go s.serve(conn.(*net.UnixConn))
	}
}

// execServer tracks the commands it started until it reaped them, and
// the processes its supervisor keeps (supervisor.go).
type execServer struct {
	mu    sync.Mutex
	waits map[int]chan syscall.WaitStatus
	sup   supervisor
}

// spawn forks argv0 with attr and registers the child for the reaper,
// under mu, so that it is registered before it can be reaped; its wait
// status comes on the returned channel.
func (s *execServer) spawn(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	done := make(chan syscall.WaitStatus, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	s.waits[pid] = done
	return pid, done, nil
}

// reap reaps every child at each SIGCHLD and hands its status to the
// connection that started it. Starting holds mu too, so a child is always
// registered before it is reaped.
func (s *execServer) reap(chld <-chan os.Signal) {
	for range chld {
		s.mu.Lock()
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if c, ok := s.waits[pid]; ok {
				c <- ws
				delete(s.waits, pid)
			}
		}
		s.mu.Unlock()
	}
}

// serve starts the command conn asks for and reports its end.
func (s *execServer) serve(conn *net.UnixConn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, files, err := readRequest(conn)
	defer closeAll(files)
	if err != nil {
		_ = writeFrame(conn, serverReply{Error: err.Error()})
		return
	}
	if req.Op != "" {
		s.serveProc(conn, req)
		return
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		_ = writeFrame(conn, serverReply{Error: err.Error()})
		return
	}
	defer func() { _ = null.Close() }()
	fds := []uintptr{null.Fd()}
	for _, f := range files {
		fds = append(fds, f.Fd())
	}
	_, done, err := s.spawn(req.Argv[0], req.Argv, &syscall.ProcAttr{
		Env:   req.Env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	closeAll(files) // the command holds its own copies
	if err != nil {
		var errno syscall.Errno
		_ = errors.As(err, &errno)
		_ = writeFrame(conn, serverReply{Error: err.Error(), Errno: int(errno)})
		return
	}
	ws := <-done
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	reply := serverReply{Exit: ws.ExitStatus()}
	if ws.Signaled() {
		reply.Signal = int(ws.Signal())
	}
	_ = writeFrame(conn, reply)
}

// readRequest reads one request frame and the descriptors that come with
// it; on an error it still returns the descriptors, for the caller to
// close.
func readRequest(conn *net.UnixConn) (serverRequest, []*os.File, error) {
	var req serverRequest
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(requestFDs*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(head, oob)
	files := rightsIn(oob[:oobn])
	switch {
	case err != nil:
		return req, files, fmt.Errorf("reading the request: %w", err)
	case flags&unix.MSG_CTRUNC != 0:
		return req, files, fmt.Errorf("the request came with more than %d descriptors", requestFDs)
	}
	if _, err := io.ReadFull(conn, head[n:]); err != nil {
		return req, files, fmt.Errorf("reading the request: %w", err)
	}
	size := binary.BigEndian.Uint32(head)
	if size > maxRequest {
		return req, files, fmt.Errorf("a request of %d bytes exceeds %d", size, maxRequest)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil {
		return req, files, fmt.Errorf("reading the request: %w", err)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, files, fmt.Errorf("decoding the request: %w", err)
	}
	switch {
	case req.Op != "" && (len(files) != 0 || req.Proc == nil):
		return req, files, fmt.Errorf("a supervisor request came with %d descriptors, or without its details", len(files))
	case req.Op != "":
		return req, files, nil
	case len(files) != requestFDs && len(files) != olderRequestFDs:
		return req, files, fmt.Errorf("the request came with %d descriptors, want %d", len(files), requestFDs)
	case len(req.Argv) == 0:
		return req, files, errors.New("the request names no command")
	}
	return req, files, nil
}

// rightsIn returns the descriptors that the control messages in oob
// carry (any others are closed); a message that is not SCM_RIGHTS is
// skipped.
func rightsIn(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, msg := range msgs {
		fds, err := unix.ParseUnixRights(&msg)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files
}

// writeFrame writes v as one frame: its JSON's length (4 bytes, big
// endian), then the JSON.
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	_, err = w.Write(append(frame, body...))
	return err
}

// readFrame reads one frame of at most limit bytes into v.
func readFrame(r io.Reader, limit uint32, v any) error {
	head := make([]byte, 4)
	if _, err := io.ReadFull(r, head); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(head)
	if size > limit {
		return fmt.Errorf("a frame of %d bytes exceeds %d", size, limit)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// kernelSigaction is the kernel's struct sigaction for rt_sigaction(2) on
// linux/amd64 and linux/arm64: handler, flags, restorer, mask.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// sigIgn is SIG_IGN's handler value.
const sigIgn = 1

// defaultIgnoredSignals sets every signal the process inherited as ignored
// back to its default action. Signals the Go runtime handles are not
// ignored (it installed its handlers over them), so only those it leaves
// alone change.
func defaultIgnoredSignals() {
	for sig := 1; sig <= 64; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		//nolint:gosec // rt_sigaction reads the kernel struct through the pointer
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&old)), unsafe.Sizeof(old.mask), 0, 0); errno != 0 || old.handler != sigIgn {
			continue
		}
		dfl := kernelSigaction{} // SIG_DFL, no flags, nothing masked
		//nolint:gosec // as above
		_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&dfl)), 0, unsafe.Sizeof(dfl.mask), 0, 0)
	}
}
