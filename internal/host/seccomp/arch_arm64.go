package seccomp

import "golang.org/x/sys/unix"

// seccompArch is arm64's part of the filter: 32-bit (arm) system calls,
// another audit value, kill.
func seccompArch() (archFilter, bool) {
	return archFilter{audit: unix.AUDIT_ARCH_AARCH64}, true
}
