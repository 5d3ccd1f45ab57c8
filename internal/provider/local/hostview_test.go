package local_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// hostCgroupPaths are the control groups the test process is in, as the
// host names them (say /process_api/<hash>): no sandbox may see them.
func hostCgroupPaths(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] != "/" {
			out = append(out, parts[2])
		}
	}
	return out
}

// TestNoHostDetailsInside: what a sandbox's processes can read names
// nothing of the host's layout: no process's command line (its init's,
// bwrap's, the keeper's, an exec's) or open file, no cgroup path and no
// mount names the
// state folder, the sandbox's folder or id, or the host's own control
// groups; /proc/meminfo says the sandbox's memory limit, not the host's
// memory, and /proc/stat counts none of the host's forks. free, ps and
// top still work.
func TestNoHostDetailsInside(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	params, _ := json.Marshal(map[string]any{"memory_mb": 300})
	id := create(t, p, provider.CreateSpec{Params: params}).SandboxID
	forbidden := append([]string{dir, id, "/tether/"}, hostCgroupPaths(t)...)
	for _, command := range []string{
		`ps -eo args`,
		`for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f"; echo; done`,
		`cat /proc/self/cgroup /proc/1/cgroup`,
		`cat /proc/[0-9]*/cgroup`,
		`cat /proc/self/mountinfo`,
		`cat /proc/1/mountinfo`,
		`ls -l /proc/[0-9]*/fd/ /proc/[0-9]*/cwd /proc/[0-9]*/exe 2>/dev/null`,
	} {
		out := run(t, p, id, command).Output
		for _, f := range forbidden {
			if strings.Contains(out, f) {
				t.Errorf("%s shows %q, of the host:\n%s", command, f, out)
			}
		}
	}
	if out := run(t, p, id, `grep -E '^(MemTotal|MemAvailable):' /proc/meminfo`).Output; out != "MemTotal:         307200 kB\nMemAvailable:     307200 kB\n" {
		t.Errorf("/proc/meminfo says\n%s\nwant the sandbox's 300 MiB", out)
	}
	if got := run(t, p, id, `free -m | awk '/^Mem:/ { print $2 }'`); strings.TrimSpace(got.Output) != "300" || got.ExitCode != 0 {
		t.Errorf("free -m: total %q (exit %d); want 300", got.Output, got.ExitCode)
	}
	host, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, p, id, `grep '^processes ' /proc/stat`).Output; got != "processes 0\n" || !strings.Contains(string(host), "\nprocesses ") {
		t.Errorf("/proc/stat inside: %q; want no count of the host's forks", got)
	}
	for _, command := range []string{`ps aux`, `top -bn1`, `nproc`, `uptime`} {
		if got := run(t, p, id, command); got.ExitCode != 0 || got.Output == "" {
			t.Errorf("%s: exit %d, output %q", command, got.ExitCode, got.Output)
		}
	}
	if got := run(t, p, id, `getconf _NPROCESSORS_ONLN`); strings.TrimSpace(got.Output) == "" || got.ExitCode != 0 {
		t.Errorf("getconf _NPROCESSORS_ONLN (glibc counts /proc/stat's cpu lines without /sys): %q", got.Output)
	} else if n, _ := strconv.Atoi(strings.TrimSpace(got.Output)); n < 1 {
		t.Errorf("the sandbox counts %d processors", n)
	}
}
