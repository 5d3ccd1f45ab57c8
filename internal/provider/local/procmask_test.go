package local_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// TestProcMasksHostFiles: the files of /proc that show the host's kernel
// command line, disks, locks, interrupts and pressure stalls are empty in
// a sandbox, and cannot be written; what programs need of /proc works.
func TestProcMasksHostFiles(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	id := create(t, p, provider.CreateSpec{}).SandboxID
	for _, name := range []string{"cmdline", "diskstats", "locks", "partitions", "interrupts", "softirqs", "swaps", "kallsyms"} {
		host, err := os.ReadFile("/proc/" + name)
		if err != nil || len(host) == 0 {
			continue // nothing to hide here
		}
		r := run(t, p, id, `wc -c < /proc/`+name+`; { echo x > /proc/`+name+`; } 2>/dev/null && echo written`)
		if r.Output != "0\n" {
			t.Errorf("/proc/%s in a sandbox: %q; want it empty and read-only (the host's has %d bytes)", name, r.Output, len(host))
		}
	}
	if _, err := os.Stat("/proc/pressure"); err == nil {
		if r := run(t, p, id, `ls -A /proc/pressure | wc -l; { touch /proc/pressure/x; } 2>/dev/null && echo written`); r.Output != "0\n" {
			t.Errorf("/proc/pressure in a sandbox: %q; want an empty, read-only folder", r.Output)
		}
	}
	// What tools read still works.
	r := run(t, p, id, `grep -c '^cpu' /proc/stat >/dev/null && grep -q MemTotal /proc/meminfo && cat /proc/uptime >/dev/null && ps -e >/dev/null && nproc >/dev/null && echo ok`)
	if r.Output != "ok\n" {
		t.Errorf("/proc for tools: %+v", r)
	}
	// Nor does the mount table name the state folder: the sandbox's own
	// /etc files are copied in, and a size-limited workspace is a file
	// system of its own.
	mounts := run(t, p, id, `cat /proc/self/mountinfo`).Output
	if !strings.Contains(mounts, " /workspace ") || !strings.Contains(mounts, "/dev/loop") {
		t.Logf("no size-limited workspace here; its folder shows in the mount table")
	} else if strings.Contains(mounts, dir) {
		t.Errorf("the sandbox's mount table names the state folder %s:\n%s", dir, mounts)
	}
	if r := run(t, p, id, `grep -c '^sandbox:' /etc/passwd; { echo x >> /etc/passwd; } 2>/dev/null && echo written`); r.Output != "1\n" {
		t.Errorf("the sandbox's /etc/passwd: %q; want its user, read-only", r.Output)
	}
}
