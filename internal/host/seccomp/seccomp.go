// Package seccomp builds and installs the system call filter of every
// sandbox process: a classic BPF program of its own assembler, handed to
// bwrap through a pipe (Pipe) or installed on the calling OS thread
// (Install). It owns the list of what a sandbox may not call.
package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter of every sandbox process: a classic BPF program (an
// array of struct sock_filter) that the kernel runs on each system call.
// It lets through everything agent tools use and refuses, with EPERM, what
// only serves to leave or attack the sandbox or the host: new namespaces
// (unshare, clone with namespace flags; clone3, whose flags a filter cannot
// read, is ENOSYS so that the C library falls back to clone), mounts, the
// kernel keyring, BPF, ptrace and reading other processes' memory,
// performance counters, modules, kexec, userfaultfd, file handles, swap,
// reboot, I/O ports, process accounting, setting the clock, and faking
// terminal input (TIOCSTI). io_uring, whose rings run system calls the
// filter never sees, is ENOSYS (as on a kernel without it, so that
// libraries fall back to ordinary calls). Sockets may be of the families a
// sandbox needs (unix, IPv4, IPv6, netlink) and no others: not vsock,
// which reaches a VM's host agent whatever the sandbox's network, nor the
// rarely used families whose kernel code is the usual way in. personality
// takes only the harmless values (socketFamilies, personalities). A system
// call of another ABI than the host's (x32, i386 on x86-64) kills the
// process.
//
// bwrap installs it on the sandbox's init and the first process before they
// run anything of the sandbox's (Pipe); exec and file commands, which enter
// the sandbox from Tether through nsenter, get it from the thread that
// forks them (Install).

// seccompData offsets (struct seccomp_data): the system call number, the
// ABI, and the low 32 bits of the arguments (little-endian hosts).
const (
	offNR   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
)

// namespaceFlags are the clone and unshare flags that make new namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// deniedSyscalls are refused with EPERM on every architecture.
var deniedSyscalls = []uint32{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_PIDFD_GETFD,
	unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_USERFAULTFD,
	unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_ACCT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_ADJTIMEX, unix.SYS_CLOCK_ADJTIME,
}

// enosysSyscalls are refused with ENOSYS: clone3, whose flags a filter
// cannot read (the C library then falls back to clone), and io_uring,
// whose submissions bypass the filter.
var enosysSyscalls = []uint32{
	unix.SYS_CLONE3,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}

// socketFamilies are the address families socket and socketpair accept;
// any other is EPERM.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// personalities are the execution domains personality accepts, as Docker's
// default profile does: Linux, its 32-bit flavour and the 2.6 uname
// compatibility flag (which some build tools set), and the query
// 0xffffffff; anything else (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, other
// ABIs) is EPERM.
var personalities = []uint32{
	0x0,        // PER_LINUX
	0x8,        // PER_LINUX32
	0x20000,    // UNAME26
	0x20008,    // UNAME26 | PER_LINUX32
	0xffffffff, // query
}

// Filter builds the filter; allowSetns lets setns through (the exec
// filter: nsenter, which runs under it, needs it to enter the sandbox).
// It returns nil where the host's architecture has no filter (see
// seccompArch).
func Filter(allowSetns bool) []unix.SockFilter {
	arch, ok := seccompArch()
	if !ok {
		return nil
	}
	denied := append(append([]uint32{}, deniedSyscalls...), arch.denied...)
	if !allowSetns {
		denied = append(denied, unix.SYS_SETNS)
	}
	var a bpfAsm
	a.load(offArch)
	a.jumpUnless(unix.BPF_JEQ, arch.audit, "kill")
	a.load(offNR)
	if arch.foreignBit != 0 {
		a.jumpIf(unix.BPF_JSET, arch.foreignBit, "kill")
	}
	for _, nr := range denied {
		a.jumpIf(unix.BPF_JEQ, nr, "eperm")
	}
	for _, nr := range enosysSyscalls {
		a.jumpIf(unix.BPF_JEQ, nr, "enosys")
	}
	a.jumpIf(unix.BPF_JEQ, unix.SYS_CLONE, "clone")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_UNSHARE, "unshare")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_IOCTL, "ioctl")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_SOCKET, "socket")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_SOCKETPAIR, "socket")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_PERSONALITY, "personality")
	a.ret(unix.SECCOMP_RET_ALLOW)

	a.label("clone") // flags are clone's first argument on x86-64 and arm64
	a.load(offArg0)
	a.jumpIf(unix.BPF_JSET, namespaceFlags, "eperm")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("unshare")
	a.load(offArg0)
	a.jumpIf(unix.BPF_JSET, namespaceFlags|unix.CLONE_NEWTIME, "eperm")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("ioctl")
	a.load(offArg1)
	a.jumpIf(unix.BPF_JEQ, unix.TIOCSTI, "eperm")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("socket") // the family (domain) is the first argument of both
	a.load(offArg0)
	for _, f := range socketFamilies {
		a.jumpIf(unix.BPF_JEQ, f, "accept")
	}
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	a.label("personality")
	a.load(offArg0)
	for _, v := range personalities {
		a.jumpIf(unix.BPF_JEQ, v, "accept")
	}
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	a.label("accept")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("eperm")
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	a.label("enosys")
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	a.label("kill")
	a.ret(unix.SECCOMP_RET_KILL_PROCESS)
	return a.assemble()
}

// archFilter is what the filter knows of one architecture.
type archFilter struct {
	// audit is the AUDIT_ARCH_ value of the host's native ABI.
	audit uint32
	// foreignBit, if set, marks system call numbers of another ABI under
	// the same audit value (x32 on x86-64).
	foreignBit uint32
	// denied are the architecture's own system calls to refuse.
	denied []uint32
}

// bpfAsm assembles a BPF program whose jumps go forward to labels.
type bpfAsm struct {
	prog   []unix.SockFilter
	jumps  []bpfJump
	labels map[string]int
}

type bpfJump struct {
	at     int
	target string
	onTrue bool
}

func (a *bpfAsm) load(off uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off})
}

// jumpIf goes to target when the test holds, else on.
func (a *bpfAsm) jumpIf(test uint16, k uint32, target string) {
	a.jumps = append(a.jumps, bpfJump{at: len(a.prog), target: target, onTrue: true})
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_JMP | test | unix.BPF_K, K: k})
}

// jumpUnless goes to target when the test fails, else on.
func (a *bpfAsm) jumpUnless(test uint16, k uint32, target string) {
	a.jumps = append(a.jumps, bpfJump{at: len(a.prog), target: target})
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_JMP | test | unix.BPF_K, K: k})
}

func (a *bpfAsm) ret(k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k})
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

// assemble resolves the jumps. A jump that cannot be encoded (a label
// behind it, or more than 255 instructions ahead) is a bug in the program
// above, caught by its tests.
func (a *bpfAsm) assemble() []unix.SockFilter {
	for _, j := range a.jumps {
		to, ok := a.labels[j.target]
		off := to - j.at - 1
		if !ok || off < 0 || off > 255 {
			panic(fmt.Sprintf("seccomp: jump from %d to %q (%d) cannot be encoded", j.at, j.target, to))
		}
		if j.onTrue {
			a.prog[j.at].Jt = uint8(off)
		} else {
			a.prog[j.at].Jf = uint8(off)
		}
	}
	return a.prog
}

// programBytes is prog as bwrap reads it from --seccomp: the instructions'
// bytes, in the host's byte order.
func programBytes(prog []unix.SockFilter) []byte {
	out := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		out = binary.NativeEndian.AppendUint16(out, ins.Code)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out
}

// Pipe returns the read end of a pipe holding prog for bwrap's
// --seccomp, the write end already closed (the program is far smaller than
// a pipe's buffer).
func Pipe(prog []unix.SockFilter) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	_, err = w.Write(programBytes(prog))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("seccomp: writing the filter: %w", err)
	}
	return r, nil
}

// Install installs prog on the calling OS thread only (no TSYNC).
func Install(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
	if errors.Is(err, unix.EACCES) {
		// Without CAP_SYS_ADMIN the kernel wants no_new_privs first.
		if err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err == nil {
			err = unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
		}
	}
	runtime.KeepAlive(prog)
	if err != nil {
		return fmt.Errorf("seccomp: installing the filter: %w", err)
	}
	return nil
}

// Note says which system call filter is in force, for a provider's Info.
func Note() string {
	if _, ok := seccompArch(); !ok {
		return "seccomp: no system call filter on this architecture (" + runtime.GOARCH + "): nested namespaces, ptrace and the kernel keyring are open inside sandboxes"
	}
	return "seccomp: a system call filter on every sandbox process refuses (EPERM) new namespaces (unshare, clone with namespace flags; clone3 is ENOSYS), mount calls, ptrace and process_vm_*, keyctl and add_key, bpf, perf_event_open, userfaultfd, modules, kexec, open_by_handle_at, swap, reboot, I/O ports, acct, setting the clock and TIOCSTI; sockets other than unix, IPv4, IPv6 and netlink (no vsock); personality other than Linux's own; io_uring is ENOSYS; system calls of another ABI (x32, 32-bit) kill the process"
}
