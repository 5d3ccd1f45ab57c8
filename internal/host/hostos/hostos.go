// Package hostos holds what the host packages share of the operating
// system: exclusive file locks, host tools run with an environment of
// their own, OS threads of their own, whether other users can reach a
// folder, the free space of a file system, and the processes /proc lists
// (Processes: the local provider and the bench find bwrap by it). It owns
// no kernel object.
package hostos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultPath is PATH for every process started on the host for a
// sandbox, unless the sandbox's env sets another inside it.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Lock takes an exclusive flock on path (made if need be), waiting for it;
// the returned function releases it.
func Lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// RunTool runs a host tool (mkfs.ext4, mount, ip, nft) with stdin as its
// input and a minimal environment of its own, never the caller's, which
// holds Tether's secrets. A failure carries the tool's output.
func RunTool(ctx context.Context, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=" + DefaultPath, "LANG=C"}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s %s: %s", filepath.Base(name), strings.Join(args, " "), msg)
	}
	return nil
}

// OnOwnThread runs fn on an OS thread locked to it that ends when fn
// returns: what fn sets on the thread (its control groups, network
// namespace, no_new_privs, a seccomp filter) goes to the processes it
// forks (os/exec forks from the calling thread) and to nothing else of
// the caller's. The runtime makes no other thread from a locked one (those
// come from its template thread). Never the process's main thread, which
// the runtime keeps, locked and idle, with what fn set: the work moves to
// another goroutine, and so another thread, until it runs elsewhere.
func OnOwnThread(fn func() error) error {
	done := make(chan error, 1)
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			runtime.UnlockOSThread()
			go run()
			return
		}
		done <- fn()
	}
	go run()
	return <-done
}

// Untraversable returns the first folder on the way to dir (dir included)
// that users who own none of them cannot enter (no o+x), or "".
func Untraversable(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		if err != nil || info.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// FreeMB is three quarters of the space free in dir's file system, in
// MiB: the most a sandbox's files may ask of it. 0 if unknown.
func FreeMB(dir string) int {
	return int(FreeBytes(dir) / 4 * 3 >> 20)
}

// FreeBytes is the space free in dir's file system for an unprivileged
// user (the blocks reserved for root left out), in bytes. 0 if unknown.
func FreeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * st.Bsize //nolint:gosec // sizes of a real file system
}

// RealPath is path with its symbolic links resolved, or path if it cannot
// be.
func RealPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// RandomSuffix returns a short random hex string, for names that must not
// clash with another process's.
func RandomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Tool is a host tool a mechanism needs: where LookPath found it ("" if
// nowhere) and what to install for it.
type Tool struct{ Path, What string }

// Missing says which of tools the host lacks ("missing on this host: ..."),
// or "".
func Missing(tools ...Tool) string {
	var missing []string
	for _, t := range tools {
		if t.Path == "" {
			missing = append(missing, t.What)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "missing on this host: " + strings.Join(missing, ", ")
}
