package local

// One process of the supervisor (supervisor.go): its stdio, its output
// ring, how it ended, and the attaches that read it.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exitGrace is how long, once a process is reaped, its output is still
// read: what it wrote is in its pipes by then, and what processes it left
// behind write later is not its own.
const exitGrace = 20 * time.Millisecond

// Output streams of a process.
const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	streamPTY    = "pty"
)

// procIO is a process's stdio: the child's ends (closed once it
// started) and the supervisor's.
type procIO struct {
	child []*os.File
	// stdin is the pipe to the process's stdin, or its terminal's master;
	// nil: it reads /dev/null.
	stdin *os.File
	// outputs are what the supervisor reads, by stream.
	outputs map[string]*os.File
	pty     bool
}

// newProcIO makes spec's stdio: a terminal, or pipes for stdout and
// stderr and, with Stdin, for stdin.
func newProcIO(spec *procSpec) (*procIO, error) {
	if spec.pty() {
		master, slave, err := openPTY(spec.Rows, spec.Cols)
		if err != nil {
			return nil, err
		}
		return &procIO{child: []*os.File{slave, slave, slave}, stdin: master,
			outputs: map[string]*os.File{streamPTY: master}, pty: true}, nil
	}
	pio := &procIO{outputs: map[string]*os.File{}}
	if spec.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		pio.child, pio.stdin = append(pio.child, r), w
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		pio.child = append(pio.child, null)
	}
	for _, stream := range []string{streamStdout, streamStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			pio.closeChildEnds()
			pio.closeAll()
			return nil, err
		}
		pio.child, pio.outputs[stream] = append(pio.child, w), r
	}
	return pio, nil
}

// childFDs are the child's descriptors 0, 1 and 2, in blocking mode (Fd).
func (pio *procIO) childFDs() []uintptr {
	fds := make([]uintptr, len(pio.child))
	for i, f := range pio.child {
		fds[i] = f.Fd()
	}
	return fds
}

func (pio *procIO) closeChildEnds() { closeAll(pio.child) }

// closeAll closes the supervisor's ends.
func (pio *procIO) closeAll() {
	if pio.stdin != nil {
		_ = pio.stdin.Close()
	}
	for _, f := range pio.outputs {
		_ = f.Close()
	}
}

// openPTY opens a new terminal of the sandbox's (its /dev/pts) of the
// given size: its master, which the supervisor reads and writes, and its
// slave, the process's.
func openPTY(rows, cols int) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	rc, err := master.SyscallConn()
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	sfd, ierr := -1, error(nil)
	err = rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr != nil {
			return
		}
		if ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); ierr != nil {
			return
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
		if errno != 0 {
			ierr = fmt.Errorf("opening the terminal's slave: %w", errno)
			return
		}
		sfd = int(r)
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return master, os.NewFile(uintptr(sfd), "pty"), nil
}

// proc is a process the supervisor keeps.
type proc struct {
	pid int
	seq uint64
	// spec is what the process was started with; a resize changes its
	// Rows and Cols, under mu.
	spec    procSpec
	started time.Time

	// mu guards what follows; wake is closed (and made anew) whenever
	// the ring or exit changes.
	mu          sync.Mutex
	out         outputRing
	exit        *procExit
	ended       time.Time
	wake        chan struct{}
	stdin       *os.File
	stdinClosed bool
	pty         bool
	// stdinMu serialises writes to stdin, which may block.
	stdinMu sync.Mutex
	outputs map[string]*os.File
}

func newProc(pid int, seq uint64, spec procSpec, window int64, pio *procIO) *proc {
	return &proc{pid: pid, seq: seq, spec: spec, started: time.Now().UTC(), out: newOutputRing(window),
		wake: make(chan struct{}), stdin: pio.stdin, pty: pio.pty, outputs: pio.outputs}
}

// run reads the process's output until it ends and records its end:
// done says when it was reaped; timeout, if not zero, kills it (and its
// process group) at its end; ended is called once the end is recorded.
func (p *proc) run(done <-chan syscall.WaitStatus, timeout time.Duration, ended func()) {
	var readers sync.WaitGroup
	for stream, f := range p.outputs {
		readers.Go(func() { p.read(stream, f) })
	}
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { _ = syscall.Kill(-p.pid, syscall.SIGKILL) })
	}
	go func() {
		ws := <-done
		if timer != nil {
			timer.Stop()
		}
		for _, f := range p.outputs {
			_ = f.SetReadDeadline(time.Now().Add(exitGrace))
		}
		readers.Wait()
		p.finish(ws)
		ended()
	}()
}

// read appends what comes from f to the ring until f ends, or, once the
// process was reaped, its read deadline passes: processes it left behind
// still hold f, which is then drained into nothing until they let go.
func (p *proc) read(stream string, f *os.File) {
	buf := make([]byte, maxChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.out.write(stream, buf[:n])
			p.notify()
			p.mu.Unlock()
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			go func() {
				_ = f.SetReadDeadline(time.Time{})
				_, _ = io.Copy(io.Discard, f)
				_ = f.Close()
			}()
			return
		default: // end of file, or EIO from a terminal nobody holds
			_ = f.Close()
			return
		}
	}
}

// finish records how the process ended and closes its stdin.
func (p *proc) finish(ws syscall.WaitStatus) {
	exit := &procExit{Code: ws.ExitStatus(), Exited: ws.Exited(), Status: fmt.Sprintf("exit status %d", ws.ExitStatus())}
	if ws.Signaled() {
		exit.Code, exit.Signal, exit.Status = -1, int(ws.Signal()), "signal: "+ws.Signal().String()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exit, p.ended = exit, time.Now()
	if p.stdin != nil && !p.pty {
		_ = p.stdin.Close()
	}
	p.stdinClosed = true
	p.notify()
}

// notify wakes the attaches; the caller holds mu.
func (p *proc) notify() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// endedAt is when the process ended (zero: it runs).
func (p *proc) endedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// isEnded reports whether the process ended.
func (p *proc) isEnded() bool { return !p.endedAt().IsZero() }

// info is the process as it is now.
func (p *proc) info() procInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return procInfo{PID: p.pid, Spec: p.spec, StartedAt: p.started, Exit: p.exit, Kept: p.out.kept(), Dropped: p.out.start}
}

// control runs one of the operations on a running process's stdin, its
// signals and its terminal.
func (p *proc) control(op string, r *procRequest) error {
	switch op {
	case opInput:
		return p.input(r.Data)
	case opCloseStdin:
		return p.closeStdin()
	case opSignal:
		if p.isEnded() {
			return p.endedErr()
		}
		if r.Signal < 1 || r.Signal > 64 {
			return supErr(errInvalid, fmt.Sprintf("signal %d is not a signal (1 to 64)", r.Signal))
		}
		if err := syscall.Kill(-p.pid, syscall.Signal(r.Signal)); errors.Is(err, syscall.ESRCH) {
			return p.endedErr()
		} else if err != nil {
			return fmt.Errorf("signalling process %d: %w", p.pid, err)
		}
		return nil
	case opResize:
		return p.resize(r.Rows, r.Cols)
	}
	return supErr(errInvalid, "unknown operation")
}

func (p *proc) endedErr() error {
	return supErr(errEnded, fmt.Sprintf("process %d has ended", p.pid))
}

// input writes data to the process's stdin or terminal, waiting at most
// ten seconds for room in it.
func (p *proc) input(data []byte) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.mu.Lock()
	w, closed, ended := p.stdin, p.stdinClosed, p.exit != nil
	p.mu.Unlock()
	switch {
	case ended:
		return p.endedErr()
	case w == nil:
		return supErr(errInvalid, fmt.Sprintf("process %d has no stdin (start it with stdin)", p.pid))
	case closed:
		return supErr(errInvalid, fmt.Sprintf("process %d's stdin is closed", p.pid))
	}
	_ = w.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := w.Write(data)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return supErr(errQuota, fmt.Sprintf("process %d does not read its stdin: it is full", p.pid))
	case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed):
		return supErr(errInvalid, fmt.Sprintf("process %d no longer reads its stdin", p.pid))
	}
	return fmt.Errorf("writing to process %d's stdin: %w", p.pid, err)
}

func (p *proc) closeStdin() error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.exit != nil:
		return p.endedErr()
	case p.pty:
		return supErr(errInvalid, fmt.Sprintf("process %d reads a terminal, which has no stdin to close: write ^D (\\x04) to end its input", p.pid))
	case p.stdin == nil:
		return supErr(errInvalid, fmt.Sprintf("process %d has no stdin (start it with stdin)", p.pid))
	case !p.stdinClosed:
		p.stdinClosed = true
		_ = p.stdin.Close()
	}
	return nil
}

// resize sets the process's terminal's size.
func (p *proc) resize(rows, cols int) error {
	if p.isEnded() {
		return p.endedErr()
	}
	if !p.pty {
		return supErr(errInvalid, fmt.Sprintf("process %d has no terminal", p.pid))
	}
	if rows < 1 || cols < 1 || rows > 65535 || cols > 65535 {
		return supErr(errInvalid, "a terminal's rows and columns are 1 to 65535")
	}
	rc, err := p.stdin.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	}); err != nil {
		return err
	}
	if ierr == nil {
		p.mu.Lock()
		p.spec.Rows, p.spec.Cols = rows, cols
		p.mu.Unlock()
	}
	return ierr
}

// attach streams the process's events to conn (see Processes.AttachProcess)
// until it ended and said so, or conn fails or is closed by Tether.
func (s *supervisor) attach(conn *net.UnixConn, r *procRequest) error {
	p, err := s.find(r.PID, r.Tag)
	if err != nil {
		return err
	}
	gone := make(chan struct{})
	go func() { // the owner is this attach: it ends once conn is closed
		_, _ = io.Copy(io.Discard, conn)
		close(gone)
	}()
	defer func() { _ = conn.Close(); <-gone }()
	if err := writeFrame(conn, procReply{Event: &procEvent{Kind: "start", PID: p.pid}}); err != nil {
		return nil
	}
	p.mu.Lock()
	cursor := p.out.end
	if r.FromStart {
		cursor = 0
	}
	p.mu.Unlock()
	for {
		next, ok := p.sendFrom(conn, cursor, gone)
		if !ok {
			return nil
		}
		cursor = next
	}
}

// sendFrom sends what the ring holds from cursor (or, past it, a dropped
// event), then the end if it came, or waits for more. It returns the new
// cursor, and false once the attach is over.
func (p *proc) sendFrom(conn *net.UnixConn, cursor int64, gone <-chan struct{}) (int64, bool) {
	p.mu.Lock()
	var events []procEvent
	if cursor < p.out.start {
		events = append(events, procEvent{Kind: "dropped", Offset: p.out.start, Dropped: p.out.start - cursor})
		cursor = p.out.start
	}
	for _, c := range p.out.read(cursor, 8*maxChunk) {
		events = append(events, procEvent{Kind: c.stream, Data: c.data, Offset: c.off})
		cursor = c.off + int64(len(c.data))
	}
	if p.exit != nil && cursor == p.out.end {
		events = append(events, procEvent{Kind: "end", Exit: p.exit})
	}
	wake := p.wake
	p.mu.Unlock()
	for i := range events {
		if err := writeFrame(conn, procReply{Event: &events[i]}); err != nil {
			return cursor, false
		}
		if events[i].Kind == "end" {
			return cursor, false
		}
	}
	if len(events) == 0 {
		select {
		case <-wake:
		case <-gone:
			return cursor, false
		}
	}
	return cursor, true
}
