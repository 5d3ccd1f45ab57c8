package local_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/provider"
)

// syscallProbe is a python3 script that makes each system call given as
// "name:nr:arg,arg,..." and prints "name=0" on success or "name=<errno>".
// An argument "buf" is a pointer to 256 zeroed bytes (io_uring_setup's
// parameters, socketpair's descriptors). A clone that succeeds returns in
// the child too, which exits at once.
const syscallProbe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for spec in sys.argv[1:]:
    name, nr, args = spec.split(":")
    args = [ctypes.create_string_buffer(256) if a == "buf" else ctypes.c_long(int(a)) for a in args.split(",") if a]
    r = libc.syscall(ctypes.c_long(int(nr)), *args)
    if r == 0 and name.startswith("clone"):
        os._exit(0)
    if r > 0 and name.startswith("clone"):
        os.waitpid(r, 0)
    print("%s=%d" % (name, 0 if r >= 0 else ctypes.get_errno()), flush=True)
`

// TestSeccompInsideSandbox: commands in a sandbox, and its init, run under
// the filter: no new namespaces, no ptrace, no keyring, no performance
// counters, no faked terminal input, clone3 falls back to clone; the tools
// agents use still work.
func TestSeccompInsideSandbox(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	if notes := strings.Join(p.Info(t.Context()).Notes, " "); !strings.Contains(notes, "seccomp") {
		t.Errorf("the notes do not mention the seccomp filter: %s", notes)
	}
	id := create(t, p, provider.CreateSpec{}).SandboxID
	denied := func(cmd string) string { return cmd + ` >/dev/null 2>&1 && echo allowed || echo denied` }
	for _, tc := range []struct{ command, want string }{
		{`grep '^Seccomp:' /proc/self/status /proc/1/status | tr -d '\t'`, "/proc/self/status:Seccomp:2\n/proc/1/status:Seccomp:2\n"},
		{denied(`unshare -Ur true`), "denied\n"},
		{denied(`unshare -U true`), "denied\n"},
		{denied(`unshare -m true`), "denied\n"},
		{denied(`unshare -n true`), "denied\n"},
		{denied(`strace -p 1`), "denied\n"},
		{denied(`strace true`), "denied\n"},
		{denied(`mount -t tmpfs none /tmp`), "denied\n"},
		// setns passes the exec filter (nsenter needs it) but the kernel
		// refuses it: no capability in any namespace.
		{denied(`nsenter --net=/proc/1/ns/net true`), "denied\n"},
	} {
		if got := run(t, p, id, tc.command); got.Output != tc.want {
			t.Errorf("%s: got %q (exit %d), want %q", tc.command, got.Output, got.ExitCode, tc.want)
		}
	}

	// System calls that an unfiltered sandbox user could make.
	eperm, enosys := int(unix.EPERM), int(unix.ENOSYS)
	const buf = -1 << 40 // an argument that is a pointer to a zeroed buffer
	calls := []struct {
		name string
		nr   int
		args []int64
		want int
	}{
		{"getpid", unix.SYS_GETPID, nil, 0},
		{"clone_fork", unix.SYS_CLONE, []int64{int64(unix.SIGCHLD), 0, 0, 0, 0}, 0},
		{"clone_newuser", unix.SYS_CLONE, []int64{int64(unix.CLONE_NEWUSER | unix.SIGCHLD), 0, 0, 0, 0}, eperm},
		{"clone3", unix.SYS_CLONE3, []int64{0, 0}, enosys},
		{"unshare_newuser", unix.SYS_UNSHARE, []int64{unix.CLONE_NEWUSER}, eperm},
		{"keyctl", unix.SYS_KEYCTL, []int64{0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 1}, eperm},
		{"add_key", unix.SYS_ADD_KEY, []int64{0, 0, 0, 0, 0}, eperm},
		{"ptrace_traceme", unix.SYS_PTRACE, []int64{0 /* PTRACE_TRACEME */, 0, 0, 0}, eperm},
		{"ptrace_attach_1", unix.SYS_PTRACE, []int64{16 /* PTRACE_ATTACH */, 1, 0, 0}, eperm},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, []int64{1, 0, 0, 0, 0, 0}, eperm},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, []int64{0, 0, -1, -1, 0}, eperm},
		{"bpf", unix.SYS_BPF, []int64{0, 0, 0}, eperm},
		{"userfaultfd", unix.SYS_USERFAULTFD, []int64{0}, eperm},
		{"ioctl_tiocsti", unix.SYS_IOCTL, []int64{0, unix.TIOCSTI, 0}, eperm},
		// io_uring: a ring would run system calls the filter never sees.
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, []int64{8, buf}, enosys},
		{"io_uring_enter", unix.SYS_IO_URING_ENTER, []int64{0, 0, 0, 0, 0, 0}, enosys},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER, []int64{0, 0, 0, 0}, enosys},
		// Socket families: what a sandbox needs, and nothing else (vsock
		// reaches a VM's host agent with no network at all).
		{"socket_vsock", unix.SYS_SOCKET, []int64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, eperm},
		{"socket_vsock_dgram", unix.SYS_SOCKET, []int64{unix.AF_VSOCK, unix.SOCK_DGRAM, 0}, eperm},
		{"socket_packet", unix.SYS_SOCKET, []int64{unix.AF_PACKET, unix.SOCK_RAW, 0}, eperm},
		{"socket_alg", unix.SYS_SOCKET, []int64{unix.AF_ALG, unix.SOCK_SEQPACKET, 0}, eperm},
		{"socketpair_vsock", unix.SYS_SOCKETPAIR, []int64{unix.AF_VSOCK, unix.SOCK_STREAM, 0, buf}, eperm},
		{"socket_unix", unix.SYS_SOCKET, []int64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, 0},
		{"socket_inet", unix.SYS_SOCKET, []int64{unix.AF_INET, unix.SOCK_DGRAM, 0}, 0},
		{"socket_inet6", unix.SYS_SOCKET, []int64{unix.AF_INET6, unix.SOCK_STREAM, 0}, 0},
		{"socket_netlink", unix.SYS_SOCKET, []int64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, 0},
		{"socketpair_unix", unix.SYS_SOCKETPAIR, []int64{unix.AF_UNIX, unix.SOCK_STREAM, 0, buf}, 0},
		// personality: Linux's own, and the query, only.
		{"personality_query", unix.SYS_PERSONALITY, []int64{0xffffffff}, 0},
		{"personality_linux", unix.SYS_PERSONALITY, []int64{0}, 0},
		{"personality_read_implies_exec", unix.SYS_PERSONALITY, []int64{0x0400000}, eperm},
		{"personality_no_aslr", unix.SYS_PERSONALITY, []int64{0x0040000}, eperm},
	}
	var args []string
	for _, c := range calls {
		var a []string
		for _, v := range c.args {
			if v == buf {
				a = append(a, "buf")
				continue
			}
			a = append(a, strconv.FormatInt(v, 10))
		}
		args = append(args, fmt.Sprintf("%s:%d:%s", c.name, c.nr, strings.Join(a, ",")))
	}
	got := run(t, p, id, "python3 -c '"+syscallProbe+"' "+strings.Join(args, " "))
	for _, c := range calls {
		if want := fmt.Sprintf("%s=%d\n", c.name, c.want); !strings.Contains(got.Output, want) {
			t.Errorf("%s: want %q in %q", c.name, want, got.Output)
		}
	}
	if runtime.GOARCH == "amd64" {
		// An x32 getpid kills the process (SIGSYS, 31).
		r := run(t, p, id, fmt.Sprintf(`python3 -c 'import ctypes; ctypes.CDLL(None).syscall(%d)'; echo rc=$?`, 0x40000000|unix.SYS_GETPID))
		if !strings.HasSuffix(r.Output, "rc=159\n") {
			t.Errorf("an x32 system call: %q, want the process killed (159)", r.Output)
		}
	}

	// The tools agents use.
	for _, tc := range []struct{ command, want string }{
		{`ls / >/dev/null && echo ok`, "ok\n"},
		{`python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=("thread",)); t.start(); t.join(); print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout, end="")'`, "thread\nchild\n"},
		{`git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m && git log --format=%s`, "m\n"},
		{`mkdir -p t/a && echo x > t/a/f && tar -cf t.tar t && rm -r t && tar -xf t.tar && cat t/a/f`, "x\n"},
		{`(sleep 0.1 &) ; wait; echo ok`, "ok\n"},
		{`command -v node >/dev/null && node -e 'require("child_process").execSync("true"); console.log("ok")' || echo ok`, "ok\n"},
	} {
		if got := run(t, p, id, tc.command); got.Output != tc.want || got.ExitCode != 0 {
			t.Errorf("%s: got %q (exit %d), want %q", tc.command, got.Output, got.ExitCode, tc.want)
		}
	}
	// File operations enter under the filter too.
	if err := p.WriteFile(t.Context(), id, "/workspace/f.txt", strings.NewReader("hi"), 10); err != nil {
		t.Fatalf("WriteFile under the filter: %v", err)
	}
	if r := run(t, p, id, `cat f.txt`); r.Output != "hi" {
		t.Errorf("after WriteFile: %q", r.Output)
	}
}

// TestSandboxInitCannotBeStopped: nothing in a sandbox can stop its init
// (signals from inside do not reach it; ptrace is refused), so orphans are
// still reaped: no zombies pile up.
func TestSandboxInitCannotBeStopped(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	id := create(t, p, provider.CreateSpec{})
	sid := id.SandboxID
	if r := run(t, p, sid, `kill -STOP 1; kill -TSTP 1; strace -p 1 >/dev/null 2>&1; sed -n 's/^State:\t\(.\).*/\1/p' /proc/1/status`); r.Output != "S\n" {
		t.Errorf("pid 1 after kill -STOP and strace: state %q, want S", r.Output)
	}
	// Orphans: each sh leaves a child behind, which pid 1 must reap.
	if r := run(t, p, sid, `for i in $(seq 100); do sh -c 'sleep 0.05 & exit 0'; done; echo done`); r.Output != "done\n" {
		t.Fatalf("fork loop = %+v", r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := run(t, p, sid, `ps -eo stat= | grep -c '^Z'`)
		if strings.TrimSpace(r.Output) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s zombies in the sandbox: its init does not reap", strings.TrimSpace(r.Output))
		}
	}
}
