// Command reaper is pid 1 of a simulated host's pid namespace (see
// harness.NewHosts). It does what a host's init does for the processes the
// tests care about: it reaps every orphan that the namespace hands it, so
// that sandboxes left behind by a Tether killed with SIGKILL, once they end,
// do not pile up as zombies (this machine's own pid 1 does not reap).
//
// Usage: reaper HOSTNAME. It sets the (UTS namespace's) hostname, drops
// the host's copies of this machine's loop-device mounts (see
// dropLoopMounts), prints "ready" on standard output, and then reaps until
// it is killed; its death ends every process of its pid namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: reaper HOSTNAME")
		os.Exit(2)
	}
	if err := syscall.Sethostname([]byte(os.Args[1])); err != nil {
		fmt.Fprintf(os.Stderr, "reaper: sethostname: %v\n", err)
		os.Exit(1)
	}
	if err := dropLoopMounts(); err != nil {
		fmt.Fprintf(os.Stderr, "reaper: %v\n", err)
		os.Exit(1)
	}
	// Signals are buffered so that a burst of SIGCHLD is not lost between
	// two reaps; a lost one would only delay the next reap anyway.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready")
	for {
		reap()
		if s := <-sigs; s != syscall.SIGCHLD {
			// pid 1 ignores signals it has no handler for; these end it,
			// and with it the namespace.
			os.Exit(0)
		}
	}
}

// reap collects every child that has ended, without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// dropLoopMounts detaches, in the host's mount namespace (new, a private
// copy of this machine's), every file system on a loop device. Those are
// copies of mounts that existed when the host was made: the local
// provider's /workspace images of sandboxes of other hosts and of other
// tests on this machine. A copy here keeps its loop device busy, so that
// sandbox's release waits for this host's end (for a whole test run; it
// made the Python client's owner-death test flaky). The host's own
// sandboxes mount theirs later.
func dropLoopMounts() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	for _, mp := range loopMounts(string(b)) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return nil
}

// loopMounts returns the mount points, in a mountinfo table (proc(5)), of
// the file systems whose source is a loop device.
func loopMounts(mountinfo string) []string {
	var out []string
	for line := range strings.SplitSeq(mountinfo, "\n") {
		mine, theirs, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields, rest := strings.Fields(mine), strings.Fields(theirs)
		if len(fields) < 5 || len(rest) < 2 || !strings.HasPrefix(rest[1], "/dev/loop") {
			continue
		}
		out = append(out, unescapeMount(fields[4]))
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
