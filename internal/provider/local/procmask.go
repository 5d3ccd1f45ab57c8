package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A sandbox's /proc is a procfs of its own pid namespace, but some of its
// files are the host's whatever the namespace: its kernel command line,
// every disk's and partition's counters, every file lock on the host (with
// inode numbers and pids), interrupt counts, swap devices, pressure stall
// information. Those a sandbox has no use for are masked: an empty, read-
// only file or folder bound over each (procMaskFiles, procMaskDirs), as
// Docker does for its own list. What programs read to work stays:
// loadavg, uptime, cpuinfo and vmstat show the host's figures; stat and
// meminfo are replaced by views of the sandbox's own (procview.go).
//
// The empty file and folder live in /run, outside the state folder, so
// that the sandbox's mount table names no folder of Tether's for them. (A
// mask cannot be /dev/null: /proc is mounted nodev.)

// procMaskFiles are the files of /proc masked in every sandbox, where the
// host has them.
var procMaskFiles = []string{
	"cmdline", "diskstats", "partitions", "locks", "swaps", "interrupts", "softirqs",
	"kallsyms", "modules", "keys", "key-users", "timer_list", "sched_debug", "latency_stats",
	"buddyinfo", "zoneinfo", "pagetypeinfo", "vmallocinfo", "slabinfo", "iomem", "ioports",
	"kcore", "kmsg", "sysrq-trigger", "mtrr", "dma", "devices", "consoles", "misc", "fb",
}

// procMaskDirs are the folders of /proc masked in every sandbox, where the
// host has them.
var procMaskDirs = []string{"pressure", "scsi", "acpi", "fs/nfsd", "driver", "tty/driver"}

// Where the masks are.
const (
	procMaskFile = "/run/tether-empty"
	procMaskDir  = "/run/tether-empty.d"
)

// prepareProcMasks makes the empty file and folder the masks bind, owned
// by root and read-only, and returns bwrap's options that mask what the
// host's /proc has of the lists.
func prepareProcMasks() ([]string, error) {
	if err := os.WriteFile(procMaskFile, nil, 0o444); err != nil {
		return nil, fmt.Errorf("masking /proc: %w", err)
	}
	if err := os.Chmod(procMaskFile, 0o444); err != nil {
		return nil, fmt.Errorf("masking /proc: %w", err)
	}
	if err := os.Mkdir(procMaskDir, 0o555); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("masking /proc: %w", err)
	}
	if entries, err := os.ReadDir(procMaskDir); err != nil || len(entries) > 0 {
		return nil, fmt.Errorf("masking /proc: %s must be an empty folder", procMaskDir)
	}
	var args []string
	for _, name := range procMaskFiles {
		if info, err := os.Lstat(filepath.Join("/proc", name)); err == nil && info.Mode().IsRegular() {
			args = append(args, "--ro-bind", procMaskFile, "/proc/"+name)
		}
	}
	for _, name := range procMaskDirs {
		if info, err := os.Lstat(filepath.Join("/proc", name)); err == nil && info.IsDir() {
			args = append(args, "--ro-bind", procMaskDir, "/proc/"+name)
		}
	}
	return args, nil
}
