package seccomp

import "golang.org/x/sys/unix"

// seccompArch is x86-64's part of the filter: x32 system calls (same audit
// value, numbers with bit 30 set) kill, as do i386 ones (another audit
// value); I/O port access is refused.
func seccompArch() (archFilter, bool) {
	return archFilter{
		audit:      unix.AUDIT_ARCH_X86_64,
		foreignBit: 0x40000000, // __X32_SYSCALL_BIT
		denied:     []uint32{unix.SYS_IOPL, unix.SYS_IOPERM},
	}, true
}
