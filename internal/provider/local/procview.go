package local

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Two files of a sandbox's /proc are the host's whatever the namespaces,
// and tell it about the host: /proc/meminfo (the host's memory and what
// is free of it) and /proc/stat (the host's CPU time, interrupts, context
// switches, and "processes", every fork on the host since boot). Each is
// replaced by a file of the sandbox's own, made at create, read-only
// (bound like its /etc/passwd, from a descriptor, so that its mount names
// no folder of the host):
//
//   - meminfo, for a sandbox with a memory limit, says the limit: it is
//     MemTotal, MemFree and MemAvailable; swap and caches are 0. free, top
//     and ps (%MEM) read it, and so do programs that size themselves by
//     MemAvailable. The figures do not move: what the sandbox uses shows
//     in its processes' own /proc entries, not here. Without a memory
//     limit the host's meminfo stays: the host's memory is the sandbox's.
//   - stat keeps the host's boot time (btime, which ps needs for start
//     times and /proc/uptime tells anyway) and its CPUs' names (glibc
//     counts them there for sysconf(_SC_NPROCESSORS_ONLN) when /sys is
//     not mounted, as in a sandbox), with every counter 0: top's summary
//     line shows no CPU use, while per-process figures (from
//     /proc/PID/stat) stay real.
//
// sysinfo(2), which answers Node's os.totalmem and glibc's
// sysconf(_SC_PHYS_PAGES), still reports the host's memory: it is a
// system call, not a file.

// procViewFiles are the files, in a sandbox's etc folder (writeSandboxEtc),
// of its /proc views, by where they are bound.
var procViewFiles = map[string]string{"/proc/meminfo": "proc-meminfo", "/proc/stat": "proc-stat"}

// procViews returns the files (under etc) and their destinations of the
// /proc views a sandbox with limits lim gets: stat always, meminfo with a
// memory limit.
func procViews(etc string, lim Limits) (files, dests []string) {
	if lim.MemoryMB > 0 {
		files, dests = append(files, filepath.Join(etc, procViewFiles["/proc/meminfo"])), append(dests, "/proc/meminfo")
	}
	return append(files, filepath.Join(etc, procViewFiles["/proc/stat"])), append(dests, "/proc/stat")
}

// writeProcViews writes in etc the /proc views of a sandbox with limits
// lim, the stat view from the host's /proc/stat.
func writeProcViews(etc string, lim Limits) error {
	host, err := os.ReadFile("/proc/stat")
	if err != nil {
		return fmt.Errorf("reading /proc/stat: %w", err)
	}
	if err := os.WriteFile(filepath.Join(etc, procViewFiles["/proc/stat"]), statView(host), 0o644); err != nil {
		return err
	}
	if lim.MemoryMB > 0 {
		return os.WriteFile(filepath.Join(etc, procViewFiles["/proc/meminfo"]), meminfoView(lim.MemoryMB), 0o644)
	}
	return nil
}

// meminfoView is a /proc/meminfo that says memoryMB is all there is and
// all of it is free, in the kernel's layout.
func meminfoView(memoryMB int) []byte {
	kb := int64(memoryMB) << 10
	var b bytes.Buffer
	for _, f := range []struct {
		name string
		kb   int64
	}{
		{"MemTotal", kb}, {"MemFree", kb}, {"MemAvailable", kb}, {"Buffers", 0}, {"Cached", 0},
		{"SwapCached", 0}, {"Active", 0}, {"Inactive", 0}, {"SwapTotal", 0}, {"SwapFree", 0},
		{"Dirty", 0}, {"Writeback", 0}, {"Shmem", 0}, {"Slab", 0}, {"SReclaimable", 0}, {"SUnreclaim", 0},
	} {
		fmt.Fprintf(&b, "%-16s%8d kB\n", f.name+":", f.kb)
	}
	return b.Bytes()
}

// statView is a /proc/stat with the host's CPU lines and boot
// time, and every counter 0.
func statView(host []byte) []byte {
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(host))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // the intr line is long
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case strings.HasPrefix(fields[0], "cpu"):
			fmt.Fprintf(&b, "%s %s\n", fields[0], strings.TrimSpace(strings.Repeat(" 0", len(fields)-1)))
		case fields[0] == "btime":
			fmt.Fprintf(&b, "%s\n", strings.Join(fields, " "))
		}
	}
	b.WriteString("intr 0\nctxt 0\nprocesses 0\nprocs_running 1\nprocs_blocked 0\nsoftirq 0\n")
	return b.Bytes()
}
