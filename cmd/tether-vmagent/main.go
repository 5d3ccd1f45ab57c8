//go:build linux

// Command tether-vmagent is Tether's agent inside a microVM guest: the
// guest's init (pid 1), and, started by it, the server of the
// virtio-serial port through which Tether runs commands and moves files.
// It is built into the guest's initramfs by scripts/microvm.sh; it is
// not meant to run anywhere else.
package main

import (
	"fmt"
	"os"

	"github.com/tetherhq/tether/internal/vmagent"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == vmagent.ServeArg {
		if err := vmagent.Serve(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "tether-vmagent: this is a microVM guest's init; it runs nowhere else")
		os.Exit(2)
	}
	err := vmagent.Init()
	fmt.Fprintln(os.Stderr, err)
	vmagent.PowerOff()
}
