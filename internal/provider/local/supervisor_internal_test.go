package local

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// supervisorClient speaks the supervisor's wire to an exec server.
type supervisorClient struct {
	t    *testing.T
	sock string
}

// call sends op and reads the answer's frames: one, or a stream's until
// its end (until stop says so, for a watch).
func (c supervisorClient) call(op string, r procRequest, stop func(procReply) bool) []procReply {
	c.t.Helper()
	conn, err := net.Dial("unix", c.sock)
	if err != nil {
		c.t.Error(err)
		return []procReply{{Code: "dial"}}
	}
	defer func() { _ = conn.Close() }()
	if err := writeFrame(conn, serverRequest{Op: op, Proc: &r}); err != nil {
		c.t.Error(err)
		return []procReply{{Code: "write"}}
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var out []procReply
	for {
		var rep procReply
		if err := readFrame(conn, maxProcFrame, &rep); err != nil {
			c.t.Errorf("%s: reading the answer after %d frames: %v", op, len(out), err)
			return append(out, procReply{Code: "read"})
		}
		out = append(out, rep)
		streaming := op == opList || op == opAttach || op == opWatch
		end := rep.Done || rep.Code != "" || (rep.Event != nil && rep.Event.Kind == "end")
		if !streaming || end || (stop != nil && stop(rep)) {
			return out
		}
	}
}

// TestSupervisorOnItsOwn runs the exec server as a process of the host
// (as the sandbox's init would start it, on a listening socket it is
// handed) and drives every operation of its supervisor at once, several
// attaches to one process among them. Under -race the server is built
// with the race detector too, and a race there fails the test (it writes
// the report to its stderr, which the test reads).
func TestSupervisorOnItsOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "exec.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	server := exec.Command(os.Args[0], serverArg, "3")
	server.ExtraFiles, server.Stderr = []*os.File{lf}, &stderr
	server.Env = []string{"GOMAXPROCS=1", "PATH=/usr/bin:/bin"}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	_ = lf.Close()
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	defer func() {
		_ = server.Process.Kill()
		_ = server.Wait()
		if strings.Contains(stderr.String(), "DATA RACE") {
			t.Errorf("the exec server raced:\n%s", stderr.String())
		}
	}()
	c := supervisorClient{t: t, sock: sock}
	lim := procLimits{Max: 8, Output: 64 << 10, KeepMS: 60_000}
	env := []string{"PATH=/usr/bin:/bin"}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { exerciseProcess(c, lim, env) })
	}
	wg.Go(func() { exerciseTerminal(c, lim, env) })
	wg.Go(func() { exerciseWatch(c, t.TempDir()) })
	wg.Wait()
	if list := c.call(opList, procRequest{}, nil); len(list) != 5 || !list[len(list)-1].Done {
		t.Errorf("the list after 3 processes and a terminal: %d frames, want the 4 kept and its end", len(list))
	}
}

// exerciseProcess starts a process that writes past its window, and
// attaches to it three times at once while writing to its stdin.
func exerciseProcess(c supervisorClient, lim procLimits, env []string) {
	t := c.t
	st := c.call(opStart, procRequest{Spec: &procSpec{Argv: []string{"sh", "-c", "seq 1 100000; cat"}, Env: env, Dir: "/", Stdin: true}, Limits: lim}, nil)
	if len(st) != 1 || st[0].Info == nil {
		t.Errorf("start: %+v", st)
		return
	}
	pid := st[0].Info.PID
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			events := c.call(opAttach, procRequest{PID: pid, FromStart: true}, nil)
			last := events[len(events)-1].Event
			if last == nil || events[0].Event == nil {
				t.Errorf("an attach: %+v", events)
				return
			}
			if events[0].Event == nil || events[0].Event.Kind != "start" || last == nil || last.Kind != "end" || last.Exit.Code != 0 {
				t.Errorf("an attach: %d frames, first %+v, last %+v", len(events), events[0], last)
			}
		})
	}
	for _, op := range []string{opInput, opCloseStdin} {
		if rep := c.call(op, procRequest{PID: pid, Data: []byte("abc\n")}, nil); rep[0].Code != "" {
			t.Errorf("%s: %+v", op, rep[0])
		}
	}
	wg.Wait()
}

// exerciseTerminal starts a shell in a terminal, resizes it and ends it.
func exerciseTerminal(c supervisorClient, lim procLimits, env []string) {
	st := c.call(opStart, procRequest{Spec: &procSpec{Argv: []string{"sh"}, Env: env, Dir: "/", Rows: 5, Cols: 5}, Limits: lim}, nil)
	if len(st) != 1 || st[0].Info == nil {
		c.t.Errorf("start with a terminal: %+v", st)
		return
	}
	pid := st[0].Info.PID
	for _, r := range []procRequest{{PID: pid, Rows: 9, Cols: 9}, {PID: pid, Data: []byte("stty size; exit 4\n")}} {
		op := map[bool]string{true: opResize, false: opInput}[r.Rows > 0]
		if rep := c.call(op, r, nil); rep[0].Code != "" {
			c.t.Errorf("%s: %+v", op, rep[0])
		}
	}
	events := c.call(opAttach, procRequest{PID: pid, FromStart: true}, nil)
	var out strings.Builder
	for _, e := range events {
		if e.Event == nil {
			c.t.Errorf("the terminal's attach: %+v", e)
			return
		}
		out.Write(e.Event.Data)
	}
	if last := events[len(events)-1].Event; last.Kind != "end" || last.Exit.Code != 4 || !strings.Contains(out.String(), "9 9") {
		c.t.Errorf("the terminal's shell: %q, ended %+v", out.String(), last.Exit)
	}
}

// exerciseWatch watches dir while a tree is made in it, once the watch
// said it is armed (a tree made before is no change).
func exerciseWatch(c supervisorClient, dir string) {
	var made sync.WaitGroup
	defer made.Wait()
	events := c.call(opWatch, procRequest{Path: dir, Recursive: true}, func(r procReply) bool {
		if r.File != nil && r.File.Kind == "start" {
			made.Go(func() {
				_ = os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
				_ = os.WriteFile(filepath.Join(dir, "a", "b", "c"), []byte("x"), 0o644)
			})
		}
		return r.File != nil && r.File.Path == "a/b/c" // made, or written: b may be watched only after c was made
	})
	if len(events) < 2 || events[0].File == nil || events[0].File.Kind != "start" {
		c.t.Errorf("the watch: %+v", events)
	}
}
