package local

// The exec server's process supervisor: the processes of the provider's
// processes capability (processes.go is Tether's side). The exec server
// (execserver.go) forks them, in the sandbox, as its user, and keeps
// them: their output in a bounded ring each (outring.go), read from pipes
// or a terminal as it comes so that no process ever waits on a full
// pipe; their stdin; how each ended, for a while after. Several
// connections may attach to one process, each reading the ring at its own
// pace: a slow one only falls behind, and is told what it missed. What it
// keeps counts against the sandbox's memory and process limits, being the
// sandbox's own process; the limits Tether sets come with every start.
//
// Its answers are the sandbox's data to Tether (processes.go bounds every
// frame it reads), as everything the exec server says is.

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// serverMemory is the exec server's soft memory limit without processes;
// each process's window adds twice its size.
const serverMemory = 16 << 20

// supervisor keeps the processes the server started for Tether.
type supervisor struct {
	mu    sync.Mutex
	procs map[int]*proc
	// seq orders the processes by start.
	seq uint64
	// windows is the sum of the kept processes' windows.
	windows int64
}

func (s *supervisor) init() { s.procs = map[int]*proc{} }

// serveProc answers a request for the supervisor (serverRequest.Op).
func (s *execServer) serveProc(conn *net.UnixConn, req serverRequest) {
	_ = conn.SetDeadline(time.Time{})
	r := req.Proc
	var err error
	switch req.Op {
	case opStart:
		var info *procInfo
		if info, err = s.startProc(r); err == nil {
			replyProc(conn, procReply{Info: info})
			return
		}
	case opList:
		s.sup.list(conn)
		return
	case opAttach:
		if err = s.sup.attach(conn, r); err == nil {
			return // it ended the stream
		}
	case opWatch:
		if err = serveWatch(conn, r); err == nil {
			return
		}
	case opInput, opCloseStdin, opSignal, opResize:
		var p *proc
		if p, err = s.sup.find(r.PID, r.Tag); err == nil {
			err = p.control(req.Op, r)
		}
	default:
		err = supErr(errInvalid, fmt.Sprintf("unknown operation %q", req.Op))
	}
	if err == nil {
		replyProc(conn, procReply{Done: true})
		return
	}
	replyErr(conn, err)
}

// replyErr answers with err, as a supervisor's error.
func replyErr(conn *net.UnixConn, err error) {
	var se *supervisorError
	if !errors.As(err, &se) {
		se = &supervisorError{code: errInternalProc, msg: err.Error()}
	}
	replyProc(conn, procReply{Code: se.code, Error: se.msg})
}

// replyProc writes one frame of an answer, with a deadline.
func replyProc(conn *net.UnixConn, r procReply) {
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = writeFrame(conn, r)
}

// startProc starts r.Spec and keeps it; under the supervisor's lock, so
// that two starts never pass its limit together.
func (s *execServer) startProc(r *procRequest) (*procInfo, error) {
	spec := r.Spec
	if spec == nil || len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, supErr(errInvalid, "the process has no command")
	}
	lim := r.Limits
	lim.Max, lim.Output = max(lim.Max, 1), max(lim.Output, 1)
	if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
		return nil, supErr(errInvalid, fmt.Sprintf("the working folder %s does not exist or is not a folder", spec.Dir))
	}
	argv0, err := lookPathIn(spec.Argv[0], spec.Env, spec.Dir)
	if err != nil {
		return nil, err
	}
	s.sup.mu.Lock()
	defer s.sup.mu.Unlock()
	if err := s.sup.makeRoom(lim.Max); err != nil {
		return nil, err
	}
	pio, err := newProcIO(spec)
	if err != nil {
		return nil, fmt.Errorf("making the process's stdio: %w", err)
	}
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: spec.Env, Files: pio.childFDs(), Sys: &syscall.SysProcAttr{Setpgid: true}}
	if spec.pty() {
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	pid, done, err := s.spawn(argv0, spec.Argv, attr)
	pio.closeChildEnds()
	if err != nil {
		pio.closeAll()
		return nil, forkError(err)
	}
	s.sup.seq++
	p := newProc(pid, s.sup.seq, *spec, lim.Output, pio)
	if old := s.sup.procs[pid]; old != nil { // an ended process whose pid came round again
		s.sup.windows -= old.out.limit
	}
	s.sup.procs[pid] = p
	s.sup.windows += lim.Output
	debug.SetMemoryLimit(serverMemory + 2*s.sup.windows)
	p.run(done, time.Duration(spec.TimeoutMS)*time.Millisecond, func() {
		time.AfterFunc(time.Duration(lim.KeepMS)*time.Millisecond, func() { s.sup.forget(p) })
	})
	info := p.info()
	return &info, nil
}

// forkError is the supervisor's error for a fork that failed.
func forkError(err error) error {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno) && errno == syscall.EAGAIN:
		return supErr(errQuota, "cannot start the process: the sandbox is at its process limit")
	case errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.EACCES || errno == syscall.ENOEXEC || errno == syscall.ENOTDIR):
		return supErr(errInvalid, "cannot start the process: "+err.Error())
	}
	return fmt.Errorf("starting the process: %w", err)
}

// makeRoom makes room for one more process, forgetting the ended process
// that ended first if the supervisor keeps max already; with every one of
// them running, there is none. The caller holds mu.
func (s *supervisor) makeRoom(limit int) error {
	for len(s.procs) >= limit {
		var oldest *proc
		for _, p := range s.procs {
			if e := p.endedAt(); !e.IsZero() && (oldest == nil || e.Before(oldest.endedAt())) {
				oldest = p
			}
		}
		if oldest == nil {
			return supErr(errQuota, fmt.Sprintf("the sandbox runs %d processes already, the most it may keep", len(s.procs)))
		}
		s.drop(oldest)
	}
	return nil
}

// forget drops p once it has been kept long enough after its end.
func (s *supervisor) forget(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs[p.pid] == p {
		s.drop(p)
	}
}

// drop removes p; the caller holds mu.
func (s *supervisor) drop(p *proc) {
	delete(s.procs, p.pid)
	s.windows -= p.out.limit
	debug.SetMemoryLimit(serverMemory + 2*s.windows)
}

// find returns the process pid names, or, pid 0, the latest with tag (a
// running one first).
func (s *supervisor) find(pid int, tag string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pid != 0 {
		if p := s.procs[pid]; p != nil {
			return p, nil
		}
		return nil, supErr(errNotFound, fmt.Sprintf("no process %d", pid))
	}
	var best *proc
	for _, p := range s.procs {
		if p.spec.Tag != tag || tag == "" {
			continue
		}
		if best == nil || (!p.isEnded() && best.isEnded()) || (p.isEnded() == best.isEnded() && p.seq > best.seq) {
			best = p
		}
	}
	if best == nil {
		return nil, supErr(errNotFound, fmt.Sprintf("no process tagged %q", tag))
	}
	return best, nil
}

// list writes every process kept, oldest first, a frame each, then Done.
func (s *supervisor) list(conn *net.UnixConn) {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return cmp.Compare(a.seq, b.seq) })
	for _, p := range procs {
		info := p.info()
		replyProc(conn, procReply{Info: &info})
	}
	replyProc(conn, procReply{Done: true})
}

// lookPathIn finds argv0 as a shell would for a process of env in dir:
// a name with a slash as it is (from dir if relative), one without in the
// folders of env's PATH.
func lookPathIn(argv0 string, env []string, dir string) (string, error) {
	if strings.Contains(argv0, "/") {
		path := argv0
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if !executable(path) {
			return "", supErr(errInvalid, fmt.Sprintf("%s is not an executable file", argv0))
		}
		return path, nil
	}
	path := hostos.DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if full := filepath.Join(d, argv0); executable(full) {
			return full, nil
		}
	}
	return "", supErr(errInvalid, fmt.Sprintf("%s: command not found in PATH", argv0))
}

// executable reports whether path is a file this process may execute.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && unix.Access(path, unix.X_OK) == nil
}
