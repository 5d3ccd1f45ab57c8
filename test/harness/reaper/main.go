// Command reaper is pid 1 of a simulated host's pid namespace (see
// harness.NewHosts). It does what a host's init does for the processes the
// tests care about: it reaps every orphan that the namespace hands it, so
// that sandboxes left behind by a Tether killed with SIGKILL, once they end,
// do not pile up as zombies (this machine's own pid 1 does not reap).
//
// Usage: reaper HOSTNAME. It sets the (UTS namespace's) hostname, prints
// "ready" on standard output, and then reaps until it is killed; its death
// ends every process of its pid namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
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
