//go:build !amd64 && !arm64

package seccomp

// seccompArch: no filter is built for other architectures yet; sandboxes
// there run without one, and the provider's notes say so.
func seccompArch() (archFilter, bool) {
	return archFilter{}, false
}
