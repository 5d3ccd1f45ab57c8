package local_test

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// throughServer reports whether a command of sandbox id runs as a child of
// its exec server (the sandbox's pid 2) rather than of nsenter (outside the
// sandbox's pid namespace: parent 0).
func throughServer(t *testing.T, p *local.Provider, id string) bool {
	t.Helper()
	r := run(t, p, id, `echo "$PPID"`)
	switch r.Output {
	case "2\n":
		return true
	case "0\n":
		return false
	}
	t.Fatalf("the command's parent = %+v", r)
	return false
}

// TestExecThroughServer: a new sandbox's commands start from its exec
// server, which the sandbox cannot read, with nothing of it or of Tether
// in their environment; a provider with the server off enters through
// nsenter.
func TestExecThroughServer(t *testing.T) {
	sentinel := "tether-sentinel-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Setenv("TETHER_SENTINEL", sentinel)
	// Tether started with a signal ignored (nohup, a shell's background
	// job): the server inherits that, and must not hand it on. (Not
	// parallel: no other test's sandbox starts meanwhile.)
	signal.Ignore(syscall.SIGHUP)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	p, _ := newProvider(t)
	id := create(t, p, provider.CreateSpec{Env: map[string]string{"GREETING": "hi"}}).SandboxID
	if !throughServer(t, p, id) {
		t.Fatal("the command did not start from the exec server")
	}
	res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: `env | sort`, Env: map[string]string{"ASKED": "yes"}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := "ASKED=yes\nGREETING=hi\nHOME=/workspace\nLANG=C.UTF-8\nPATH="
	if !strings.HasPrefix(res.Output, want) || strings.Contains(res.Output, sentinel) || strings.Contains(res.Output, "GOMAXPROCS") {
		t.Errorf("the command's environment = %q; want only the sandbox's and the request's", res.Output)
	}
	// The server's memory, environment and descriptors are not the
	// sandbox's to read.
	if r := run(t, p, id, `cat /proc/2/environ >/dev/null 2>&1 && echo environ; ls /proc/2/fd >/dev/null 2>&1 && echo fd; echo checked`); r.Output != "checked\n" {
		t.Errorf("the exec server's /proc entries are readable in the sandbox: %q", r.Output)
	}
	// Nor its signal dispositions and mask: nothing ignored or blocked.
	if r := run(t, p, id, `grep -E '^Sig(Ign|Blk)' /proc/self/status; yes | head -1`); r.Output != "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\ny\n" {
		t.Errorf("a command's signals = %q; want none ignored or blocked", r.Output)
	}
	// Its descriptors reach no command.
	if r := run(t, p, id, `ls /proc/self/fd | sort -n | tr '\n' ' '`); r.Output != "0 1 2 3 " { // 3: ls's own
		t.Errorf("a command's descriptors = %q; want 0 1 2 only", r.Output)
	}
	off, _ := newProvider(t, local.WithExecServer(false))
	oid := create(t, off, provider.CreateSpec{}).SandboxID
	if throughServer(t, off, oid) {
		t.Error("with the exec server off, a command started from one")
	}
}

// TestExecShellMovesItself: a command's shell moves itself into its exec
// group, through the group's tasks file that Tether opened (no grace
// period: cgroup.ExecGroup.OpenSelfJoin), and the command gets no
// descriptor of it; a sandbox whose server is older (three descriptors a
// request) still runs commands, its shells moved by Tether.
func TestExecShellMovesItself(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	before := local.Moved(p)
	r := run(t, p, id, `grep pids /proc/self/cgroup; ls /proc/self/fd | sort -n | tr '\n' ' '`)
	// Its own cgroup namespace is rooted at the sandbox's groups: the exec
	// group shows as /exec-….
	if !strings.Contains(r.Output, ":/exec-") || !strings.HasSuffix(r.Output, "\n0 1 2 3 ") {
		t.Fatalf("the command's group and descriptors = %q; want its exec group, and 0 1 2 only (3: ls's own)", r.Output)
	}
	moved := local.Moved(p) - before
	if v1 := strings.Contains(r.Output, ":pids:"); v1 && moved != 0 {
		t.Errorf("Tether moved %d shells; want them to move themselves", moved)
	}
	// The same sandbox as an older Tether made it: three descriptors.
	metaPath := filepath.Join(dir, id, "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "server_fds")
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(metaPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	before = local.Moved(p)
	if !throughServer(t, p, id) {
		t.Fatal("with three descriptors, the command did not start from the exec server")
	}
	if r := run(t, p, id, `ls /proc/self/fd | sort -n | tr '\n' ' '`); r.Output != "0 1 2 3 " {
		t.Errorf("with three descriptors, the command's descriptors = %q", r.Output)
	}
	if local.Moved(p) == before {
		t.Error("with three descriptors, no shell was moved into its exec group")
	}
}

// TestExecServerKilledBySandbox: the sandbox's user may kill its exec
// server, mid-command too; the exec that did says so, the sandbox lives,
// and exec goes on through nsenter, its timeout kept.
func TestExecServerKilledBySandbox(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	if !throughServer(t, p, id) {
		t.Fatal("the command did not start from the exec server")
	}
	res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: `kill -9 2; sleep 0.2; echo done`, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("the exec that killed its server: %v", err)
	}
	if res.ExitCode != 137 || !strings.Contains(res.Output, "exec server was killed") {
		t.Errorf("the exec that killed its server = %+v; want 137 and why", res)
	}
	if throughServer(t, p, id) {
		t.Fatal("a command started from a killed exec server")
	}
	if r := run(t, p, id, `echo alive`); r.Output != "alive\n" {
		t.Errorf("after the kill: %+v", r)
	}
	start := time.Now()
	res, err = p.Exec(t.Context(), id, provider.ExecRequest{Command: `sleep 30`, Timeout: time.Second})
	if err != nil || !res.TimedOut || time.Since(start) > 5*time.Second {
		t.Errorf("a timeout after the kill = %+v, %v in %s", res, err, time.Since(start))
	}
}

// TestExecServerAfterRestart: a new provider on the same state folder (a
// restarted Tether) execs through the servers of the sandboxes it finds.
func TestExecServerAfterRestart(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	again, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !throughServer(t, again, id) {
		t.Error("after the restart, the command did not start from the exec server")
	}
	if r := run(t, again, id, `echo again`); r.Output != "again\n" {
		t.Errorf("after the restart: %+v", r)
	}
}

// TestExecServerThatMisbehaves: whatever answers on a sandbox's exec
// socket (here a fake that the test puts in its place), Tether neither
// hangs nor panics nor trusts it: each exec still runs, through nsenter,
// within the server's deadlines.
func TestExecServerThatMisbehaves(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	sock := filepath.Join(dir, id, "exec.sock")
	for name, behave := range map[string]func(c *net.UnixConn){
		"closes": func(*net.UnixConn) {},
		"garbage": func(c *net.UnixConn) {
			_, _ = c.Write([]byte("\xff\xff\xff\xffnot a frame at all"))
		},
		"huge frame": func(c *net.UnixConn) {
			_, _ = c.Write(binary.BigEndian.AppendUint32(nil, 1<<31))
		},
		// The server writes the token itself: the kernel says the test's
		// pid, not one of the sandbox's.
		"forged token": func(c *net.UnixConn) {
			buf, oob := make([]byte, 4), make([]byte, 256)
			_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			files := local.RightsIn(oob[:oobn])
			if len(files) == 3 {
				_, _ = files[2].Write([]byte("\n")) // the token
			}
			for _, f := range files {
				_ = f.Close()
			}
			_, _ = c.Write([]byte(`{"exit":0}`))
		},
		"silent": func(c *net.UnixConn) { time.Sleep(15 * time.Second) },
	} {
		t.Run(name, func(t *testing.T) {
			_ = os.Remove(sock)
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				t.Skipf("the socket's path: %v", err)
			}
			var served sync.WaitGroup
			defer served.Wait()
			defer func() { _ = ln.Close() }()
			served.Go(func() {
				for {
					c, err := ln.AcceptUnix()
					if err != nil {
						return
					}
					served.Go(func() {
						defer func() { _ = c.Close() }()
						behave(c)
					})
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			res, err := p.Exec(ctx, id, provider.ExecRequest{Command: `echo "ok $PPID"`, Timeout: 20 * time.Second})
			if err != nil || res.Output != "ok 0\n" {
				t.Errorf("exec beside a server that %s = %+v, %v; want it run through nsenter", name, res, err)
			}
			t.Logf("%s: %s", name, time.Since(start))
		})
	}
}

// TestExecServerInImage: a sandbox of an image (its root holds /bin/sh and
// nothing else) gets an exec server where this binary is static (go test
// with CGO_ENABLED=0, as Tether's image is built), and commands through
// nsenter where it needs a C library that the image need not have.
func TestExecServerInImage(t *testing.T) {
	t.Parallel()
	folder := harness.BuildImage(t) // /bin/sh alone
	p, err := local.New(harness.ReachableTempDir(t), local.WithImages(local.Image{Name: "tiny", Path: folder}))
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(t.Context()); !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	id := create(t, p, provider.CreateSpec{Params: []byte(`{"image":"tiny"}`)}).SandboxID
	exe, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = exe.Close() }()
	static := !slices.ContainsFunc(exe.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	if got := throughServer(t, p, id); got != static {
		t.Errorf("in an image, through the exec server: %v; want %v (this binary static: %v)", got, static, static)
	}
	if r := run(t, p, id, `echo "in $PWD"`); r.Output != "in /workspace\n" {
		t.Errorf("exec in the image: %+v", r)
	}
}
