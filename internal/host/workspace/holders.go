package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxHolders bounds the holders a busy loop device's error names.
const maxHolders = 5

// holders says which processes keep the loop devices busy: those that
// have one open or hold a file of a file system on one, and those in whose
// mount namespace such a file system is still mounted (a namespace outlives the unmount in the host's). It
// reads /proc, and is only for the error of a destroy that could not
// detach them: cheap enough there, too slow for every destroy.
func holders(devs []string) string {
	want := map[string]string{}  // "major:minor" -> loopN
	paths := map[string]string{} // "/dev/loopN" -> loopN
	for _, name := range devs {
		b, err := os.ReadFile(filepath.Join("/sys/block", name, "dev"))
		if err != nil {
			continue
		}
		want[strings.TrimSpace(string(b))] = name
		paths["/dev/"+name] = name
	}
	procs, _ := os.ReadDir("/proc")
	var out []string
	seenNS := map[string]bool{}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || len(out) >= maxHolders {
			continue
		}
		how := openLoops(pid, paths, want)
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && !seenNS[ns] {
			seenNS[ns] = true
			how = append(how, mountedLoops(pid, want)...)
		}
		if len(how) > 0 {
			out = append(out, fmt.Sprintf("pid %d (%s): %s", pid, command(pid), strings.Join(how, ", ")))
		}
	}
	if len(out) == 0 {
		return "no process holds them open or mounted: the kernel has yet to let go"
	}
	return "held by " + strings.Join(out, "; ")
}

// openLoops returns "loopN open" for each of the devices that pid has
// open, and "a file of loopN open" (or its folder, or root) for each whose
// file system pid holds a file of: a file system unmounted lazily stays
// until those are let go.
func openLoops(pid int, paths, want map[string]string) []string {
	var how []string
	add := func(h string) {
		if !slices.Contains(how, h) {
			how = append(how, h)
		}
	}
	dir := fmt.Sprintf("/proc/%d/", pid)
	fds, _ := os.ReadDir(dir + "fd")
	links := []string{"cwd", "root"}
	for _, fd := range fds {
		links = append(links, "fd/"+fd.Name())
	}
	for _, link := range links {
		if target, err := os.Readlink(dir + link); err == nil && paths[target] != "" {
			add(paths[target] + " open")
			continue
		}
		var st unix.Stat_t
		if unix.Stat(dir+link, &st) != nil {
			continue
		}
		if name, ok := want[fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))]; ok {
			what := "a file"
			if link == "cwd" || link == "root" {
				what = "its " + link
			}
			add(what + " on " + name)
		}
	}
	return how
}

// mountedLoops returns "loopN mounted on P" for each device of want that
// pid's mount namespace has a mount of.
func mountedLoops(pid int, want map[string]string) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil
	}
	var how []string
	for line := range strings.SplitSeq(string(b), "\n") {
		// id parent major:minor root mount-point ...
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if name, ok := want[f[2]]; ok {
			if h := name + " mounted on " + f[4] + " in its mount namespace"; !slices.Contains(how, h) {
				how = append(how, h)
			}
		}
	}
	return how
}

// command is pid's command name, or "?".
func command(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
