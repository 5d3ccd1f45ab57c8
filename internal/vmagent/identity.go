//go:build linux

package vmagent

import (
	"encoding/hex"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/vmwire"
)

// takeIdentity makes a guest restored from a memory snapshot its own
// machine: every copy of one snapshot wakes with the same name, machine
// id, random pool and a clock as old as the snapshot.
func takeIdentity(req vmwire.Request) error {
	if req.Time > 0 {
		tv := unix.NsecToTimeval(req.Time)
		if err := unix.Settimeofday(&tv); err != nil {
			return fmt.Errorf("setting the clock: %w", err)
		}
	}
	if len(req.Entropy) > 0 {
		if err := addEntropy(req.Entropy); err != nil {
			return err
		}
	}
	if req.Hostname != "" {
		if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
			return fmt.Errorf("naming the guest: %w", err)
		}
	}
	return newMachineID()
}

// newMachineID gives the guest a machine id of its own (/etc/machine-id),
// at every boot and every restore.
func newMachineID() error {
	id := make([]byte, 16)
	if _, err := unix.Getrandom(id, 0); err != nil {
		return fmt.Errorf("a machine id: %w", err)
	}
	if err := os.WriteFile("/etc/machine-id", []byte(hex.EncodeToString(id)+"\n"), 0o444); err != nil {
		return fmt.Errorf("writing the machine id: %w", err)
	}
	return nil
}

// addEntropy mixes b into the kernel's pool, credits it (RNDADDENTROPY)
// and reseeds the generator (RNDRESEEDCRNG), so that what the copies
// draw from the kernel from now on differs. (What a process drew before
// the snapshot, and any generator of its own, it keeps: a forked
// process's state is its own affair.)
func addEntropy(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/urandom: %w", err)
	}
	defer func() { _ = f.Close() }()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(b))
	*(*int32)(unsafe.Pointer(&info[0])) = int32(len(b) * 8) //nolint:gosec // bounded by the frame
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(b))     //nolint:gosec // bounded by the frame
	copy(info[8:], b)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("adding entropy: %w", errno)
	}
	// Credited entropy reseeds the kernel's generator only on its next
	// interval (up to a minute): until then every copy would draw the
	// same numbers. Reseed now.
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("reseeding the random generator: %w", errno)
	}
	return nil
}
