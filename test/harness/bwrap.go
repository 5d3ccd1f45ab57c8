package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// BwrapProcess is a bubblewrap process on the host, as /proc shows it: a
// local sandbox's monitor (bwrap outside the sandbox) or its init (bwrap's
// child, the sandbox's pid 1).
type BwrapProcess struct {
	PID, PPID int
	Args      []string
	// Folder is the folder a monitor runs in: the local provider starts
	// each sandbox's bwrap in the sandbox's folder (its command line names
	// nothing of the host, for the sandbox sees it as its pid 1's).
	Folder string
}

// readBwrap reads the process name under the proc folder root (the
// host's /proc, or another pid namespace's seen from the host); false if
// it is not bwrap or is gone.
func readBwrap(root, name string) (BwrapProcess, bool) {
	pid, err := strconv.Atoi(name)
	if err != nil {
		return BwrapProcess{}, false
	}
	dir := root + "/" + name
	b, err := os.ReadFile(dir + "/cmdline")
	if err != nil || len(b) == 0 {
		return BwrapProcess{}, false
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if filepath.Base(args[0]) != "bwrap" {
		return BwrapProcess{}, false
	}
	p := BwrapProcess{PID: pid, Args: args}
	if stat, err := os.ReadFile(dir + "/stat"); err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				p.PPID, _ = strconv.Atoi(f[1])
			}
		}
	}
	if cwd, err := os.Readlink(dir + "/cwd"); err == nil {
		p.Folder = strings.TrimSuffix(cwd, " (deleted)")
	}
	return p, true
}

// bwrapProcesses lists the bwrap processes under the proc folder root.
func bwrapProcesses(root string) []BwrapProcess {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []BwrapProcess
	for _, e := range entries {
		if p, ok := readBwrap(root, e.Name()); ok {
			out = append(out, p)
		}
	}
	return out
}

// sandboxFolderName is the name of the sandbox folder under stateDir that
// p, a monitor, runs in or (a bwrap of an older Tether, monitor or init)
// binds the workspace of; "" for none.
func (p BwrapProcess) sandboxFolderName(stateDir string) string {
	if name, ok := strings.CutPrefix(p.Folder, stateDir+"/"); ok && name != "" && !strings.Contains(name, "/") {
		return name
	}
	return boundWorkspace(p.Args, stateDir+"/")
}

// sandboxBwraps maps each bwrap process under root of a sandbox under
// stateDir to its sandbox folder's name: the monitors by their folder,
// and the inits as their monitor's children.
func sandboxBwraps(root, stateDir string) map[int]string {
	procs := bwrapProcesses(root)
	out := map[int]string{}
	for _, p := range procs {
		if name := p.sandboxFolderName(stateDir); name != "" {
			out[p.PID] = name
		}
	}
	for _, p := range procs {
		if name, ok := out[p.PPID]; ok && out[p.PID] == "" {
			out[p.PID] = name
		}
	}
	return out
}
