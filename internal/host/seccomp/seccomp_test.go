package seccomp

import (
	"encoding/binary"
	"io"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// runBPF evaluates a seccomp program the way the kernel does, for the
// instructions the filter uses.
func runBPF(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64) // struct seccomp_data
	binary.NativeEndian.PutUint32(data[offNR:], nr)
	binary.NativeEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(data[offArg0+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		jump := func(taken bool) {
			if taken {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		}
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.NativeEndian.Uint32(data[ins.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			jump(acc == ins.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			jump(acc&ins.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		default:
			t.Fatalf("instruction %d: unknown code %#x", pc, ins.Code)
		}
	}
	t.Fatal("the program fell off its end")
	return 0
}

// TestSeccompProgram: the filter lets ordinary system calls through,
// refuses the listed ones with EPERM (setns only in the sandbox's filter),
// clone and unshare only with namespace flags, clone3 with ENOSYS, and
// kills calls of another ABI.
func TestSeccompProgram(t *testing.T) {
	t.Parallel()
	arch, ok := seccompArch()
	if !ok {
		t.Skipf("no seccomp filter on %s", runtime.GOARCH)
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill   = unix.SECCOMP_RET_KILL_PROCESS
	)
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	type call struct {
		name string
		nr   uint32
		args []uint64
	}
	cases := []struct {
		call
		sandbox, exec uint32
	}{
		{call{"getpid", unix.SYS_GETPID, nil}, allow, allow},
		{call{"read", unix.SYS_READ, []uint64{0, 0, 0}}, allow, allow},
		{call{"execve", unix.SYS_EXECVE, nil}, allow, allow},
		{call{"fork-like clone", unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}}, allow, allow},
		{call{"thread clone", unix.SYS_CLONE, []uint64{thread}}, allow, allow},
		{call{"clone with a high word", unix.SYS_CLONE, []uint64{1<<40 | uint64(unix.SIGCHLD)}}, allow, allow},
		{call{"clone new user", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}}, eperm, eperm},
		{call{"clone new net", unix.SYS_CLONE, []uint64{unix.CLONE_NEWNET}}, eperm, eperm},
		{call{"clone3", unix.SYS_CLONE3, nil}, enosys, enosys},
		{call{"unshare files", unix.SYS_UNSHARE, []uint64{unix.CLONE_FILES | unix.CLONE_FS}}, allow, allow},
		{call{"unshare mount", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNS}}, eperm, eperm},
		{call{"unshare time", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWTIME}}, eperm, eperm},
		{call{"setns", unix.SYS_SETNS, nil}, eperm, allow},
		{call{"ioctl TCGETS", unix.SYS_IOCTL, []uint64{0, unix.TCGETS}}, allow, allow},
		{call{"ioctl TIOCSTI", unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}}, eperm, eperm},
		{call{"io_uring_setup", unix.SYS_IO_URING_SETUP, []uint64{8, 0}}, enosys, enosys},
		{call{"io_uring_enter", unix.SYS_IO_URING_ENTER, nil}, enosys, enosys},
		{call{"io_uring_register", unix.SYS_IO_URING_REGISTER, nil}, enosys, enosys},
		{call{"socket unix", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}}, allow, allow},
		{call{"socket inet", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}}, allow, allow},
		{call{"socket inet6", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM}}, allow, allow},
		{call{"socket netlink", unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW}}, allow, allow},
		{call{"socket vsock", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}}, eperm, eperm},
		{call{"socket packet", unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_RAW}}, eperm, eperm},
		{call{"socket bluetooth", unix.SYS_SOCKET, []uint64{unix.AF_BLUETOOTH, unix.SOCK_RAW}}, eperm, eperm},
		{call{"socket vsock, high word set", unix.SYS_SOCKET, []uint64{1<<32 | unix.AF_VSOCK, unix.SOCK_STREAM}}, eperm, eperm},
		{call{"socketpair unix", unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}}, allow, allow},
		{call{"socketpair vsock", unix.SYS_SOCKETPAIR, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}}, eperm, eperm},
		{call{"personality query", unix.SYS_PERSONALITY, []uint64{0xffffffff}}, allow, allow},
		{call{"personality linux", unix.SYS_PERSONALITY, []uint64{0}}, allow, allow},
		{call{"personality linux32", unix.SYS_PERSONALITY, []uint64{8}}, allow, allow},
		{call{"personality read implies exec", unix.SYS_PERSONALITY, []uint64{0x0400000}}, eperm, eperm},
		{call{"personality no randomize", unix.SYS_PERSONALITY, []uint64{0x0040000}}, eperm, eperm},
	}
	for _, nr := range append(append([]uint32{}, deniedSyscalls...), arch.denied...) {
		cases = append(cases, struct {
			call
			sandbox, exec uint32
		}{call{"denied", nr, nil}, eperm, eperm})
	}
	sandboxProg, execProg := Filter(false), Filter(true)
	for _, tc := range cases {
		if got := runBPF(t, sandboxProg, arch.audit, tc.nr, tc.args...); got != tc.sandbox {
			t.Errorf("sandbox filter, %s (%d %v): %#x, want %#x", tc.name, tc.nr, tc.args, got, tc.sandbox)
		}
		if got := runBPF(t, execProg, arch.audit, tc.nr, tc.args...); got != tc.exec {
			t.Errorf("exec filter, %s (%d %v): %#x, want %#x", tc.name, tc.nr, tc.args, got, tc.exec)
		}
	}
	if got := runBPF(t, sandboxProg, unix.AUDIT_ARCH_I386, unix.SYS_GETPID); got != kill {
		t.Errorf("a call of another ABI: %#x, want kill", got)
	}
	if arch.foreignBit != 0 {
		if got := runBPF(t, sandboxProg, arch.audit, arch.foreignBit|unix.SYS_GETPID); got != kill {
			t.Errorf("an x32 call: %#x, want kill", got)
		}
	}
	if b := programBytes(sandboxProg); len(b) != 8*len(sandboxProg) || len(sandboxProg) > 4096 {
		t.Errorf("program of %d instructions, %d bytes", len(sandboxProg), len(b))
	}
}

// TestInstallStaysWithTheThread: a command forked from a thread that
// installed the filter has it, and the rest of the process does not:
// commands started afterwards, from any thread, may still make namespaces.
func TestInstallStaysWithTheThread(t *testing.T) {
	t.Parallel()
	if _, ok := seccompArch(); !ok {
		t.Skipf("no seccomp filter on %s", runtime.GOARCH)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare on this host")
	}
	prog := Filter(true)
	for range 5 {
		//nolint:noctx // ends at once
		filtered := exec.Command(unshare, "--user", "true")
		if err := hostos.OnOwnThread(func() error {
			if err := Install(prog); err != nil {
				return err
			}
			return filtered.Start()
		}); err != nil {
			t.Fatal(err)
		}
		if err := filtered.Wait(); err == nil {
			t.Fatal("unshare --user succeeded under the filter")
		}
		//nolint:noctx // ends at once
		if out, err := exec.Command(unshare, "--user", "true").CombinedOutput(); err != nil {
			t.Fatalf("unshare --user outside the filter: %v: %s", err, out)
		}
	}
}

// TestPipeHoldsTheProgram: the pipe bwrap reads holds the program's
// instructions, eight bytes each, and then ends.
func TestPipeHoldsTheProgram(t *testing.T) {
	t.Parallel()
	prog := Filter(false)
	if prog == nil {
		t.Skipf("no seccomp filter on %s", runtime.GOARCH)
	}
	r, err := Pipe(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8*len(prog) || binary.NativeEndian.Uint32(b[4:]) != prog[0].K {
		t.Errorf("the pipe holds %d bytes; want %d, starting with the program's first instruction", len(b), 8*len(prog))
	}
}
