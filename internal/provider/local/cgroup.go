package local

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits are the kernel-enforced resource limits of one sandbox. The
// control groups below enforce Pids and MemoryMB; a file system of its own
// WorkspaceMB (workspace.go).
type Limits struct {
	// Pids caps the processes and threads alive in the sandbox at once.
	Pids int `json:"pids"`
	// MemoryMB caps the sandbox's memory, its /tmp (a tmpfs, charged to
	// the same account) included, in MiB.
	MemoryMB int `json:"memory_mb"`
	// WorkspaceMB caps the size of the sandbox's /workspace, in MiB; 0 is
	// no limit (workspace.go).
	WorkspaceMB int `json:"workspace_mb,omitempty"`
	// OpenFiles caps the files each process of the sandbox may hold open
	// (RLIMIT_NOFILE, soft and hard, set by the sandbox's own shell before
	// it runs anything); 0 leaves what the process inherits.
	OpenFiles int `json:"open_files,omitempty"`
}

// cgroupCPUShares is every sandbox's CPU share (cgroup v1; v2 weight 50):
// half a default process group's, so that Tether and the host keep ahead
// of any one sandbox, and sandboxes share the rest evenly.
const (
	cgroupCPUSharesV1 = "512"
	cgroupCPUWeightV2 = "50"
)

// cgroups places sandboxes in control groups of their own: one per
// controller under cgroup v1, one under v2. Tether runs as root on the host
// to manage them.
type cgroups struct {
	// v2 is set on a cgroup v2 (unified) host.
	v2 bool
	// bases are the folders under which each sandbox gets its group: one
	// per controller (pids, memory, cpu) under v1, one under v2.
	bases []string
}

// errNoCgroups says that the host offers no control groups Tether can
// manage.
var errNoCgroups = errors.New("no writable cgroup v1 (pids, memory, cpu) or v2 hierarchy")

// detectCgroups finds where this host lets Tether make sandbox groups, in
// a group named parent: under its own group of each v1 controller, or at
// the root of a v2 hierarchy with the pids, memory and cpu controllers.
func detectCgroups(parent string) (*cgroups, error) {
	const root = "/sys/fs/cgroup"
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		for _, want := range []string{"pids", "memory", "cpu"} {
			if !contains(have, want) {
				return nil, fmt.Errorf("cgroup v2 lacks the %s controller", want)
			}
		}
		base := filepath.Join(root, parent)
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		for _, dir := range []string{root, base} {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids +memory +cpu"), 0o644); err != nil {
				return nil, fmt.Errorf("cgroup v2: enabling controllers in %s: %w", dir, err)
			}
		}
		return &cgroups{v2: true, bases: []string{base}}, nil
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	cg := &cgroups{}
	for _, ctrl := range []string{"pids", "memory", "cpu"} {
		mount := filepath.Join(root, ctrl)
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
			return nil, errNoCgroups
		}
		base := filepath.Join(mount, own[ctrl], parent)
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", ctrl, err)
		}
		cg.bases = append(cg.bases, base)
	}
	return cg, nil
}

// ownCgroups returns, per v1 controller, the group this process is in.
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-id:controller[,controller]:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for ctrl := range strings.SplitSeq(parts[1], ",") {
			out[ctrl] = parts[2]
		}
	}
	return out, sc.Err()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// keepersGroup is the group, beside the sandboxes' in the parent, that
// holds every sandbox's keeper (keeper.go): counted in the host share, not
// in its sandbox's limits.
const keepersGroup = "keepers"

// keeperDirs returns the keepers' group folders, made if need be.
func (cg *cgroups) keeperDirs() ([]string, error) {
	out := make([]string, len(cg.bases))
	for i, base := range cg.bases {
		out[i] = filepath.Join(base, keepersGroup)
		if err := os.Mkdir(out[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return out, nil
}

// dirs returns the sandbox's group folders.
func (cg *cgroups) dirs(id string) []string {
	out := make([]string, len(cg.bases))
	for i, base := range cg.bases {
		out[i] = filepath.Join(base, id)
	}
	return out
}

// create makes the sandbox's groups with its limits.
func (cg *cgroups) create(id string, lim Limits) error {
	memory := strconv.FormatInt(int64(lim.MemoryMB)<<20, 10)
	pids := strconv.Itoa(lim.Pids)
	for _, dir := range cg.dirs(id) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		settings := map[string]string{}
		switch {
		case cg.v2:
			settings = map[string]string{"pids.max": pids, "memory.max": memory, "memory.swap.max": "0", "cpu.weight": cgroupCPUWeightV2}
		case strings.Contains(dir, "/pids/"):
			settings["pids.max"] = pids
		case strings.Contains(dir, "/memory/"):
			settings["memory.limit_in_bytes"] = memory
		case strings.Contains(dir, "/cpu/"):
			settings["cpu.shares"] = cgroupCPUSharesV1
		}
		if err := writeLimits(dir, settings); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// writeLimits writes each control file of settings in the group folder dir.
// memory.swap.max is absent where swap accounting is off: then it is skipped.
func writeLimits(dir string, settings map[string]string) error {
	for file, value := range settings {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			if file == "memory.swap.max" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

// enter moves the calling OS thread, which must be locked to its goroutine
// and end with it (onOwnThread), into the groups whose folders are dirs, so
// that the process it forks next starts in them and is counted against
// their limits from its first instruction: under v1 by the thread writing
// itself ("0") to each group's tasks file (the thread alone moves, not
// Tether); under v2 by setting attr to fork straight into the one group
// (CLONE_INTO_CGROUP), through a descriptor that the returned func closes.
//
// Under v1 the thread counts in the groups until it ends, a moment after
// the fork: as one more process of the sandbox's, and in its exec group's
// cgroup.procs as Tether's pid, which execGroup.kill therefore skips. The
// memory limit's OOM killer walks a group's processes by their leading
// threads, so it never picks Tether, whose leading (main) thread
// onOwnThread never uses.
func (cg *cgroups) enter(dirs []string, attr *syscall.SysProcAttr) (func(), error) {
	if cg.v2 {
		f, err := os.Open(dirs[0])
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
		return func() { _ = f.Close() }, nil
	}
	for _, dir := range dirs {
		// "0" is the writing thread. The kernel moves a thread that moves
		// itself without the lock that makes moving a process wait for an
		// RCU grace period (milliseconds on a busy host).
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte("0"), 0o644); err != nil {
			return nil, fmt.Errorf("cgroup: joining %s: %w", dir, err)
		}
	}
	return func() {}, nil
}

// execGroup is the group of one exec's processes, inside its sandbox's: a
// timeout kills every process in it, however the command detached them
// (setsid, double forks), and nothing else of the sandbox's.
type execGroup struct {
	// dir is the exec's own group (in the pids hierarchy under v1).
	dir string
	// dirs are the groups the command starts in (enter): the exec's own
	// and, under v1, the sandbox's memory and cpu groups.
	dirs []string
}

// newExecGroup makes a group for one exec in the sandbox's.
func (cg *cgroups) newExecGroup(id string) (execGroup, error) {
	dirs := cg.dirs(id)
	g := execGroup{dir: filepath.Join(dirs[0], "exec-"+randomSuffix())}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return g, fmt.Errorf("cgroup: %w", err)
	}
	g.dirs = append([]string{g.dir}, dirs[1:]...)
	return g, nil
}

// kill kills every process in the exec's group until none is left (a
// bounded while).
func (g execGroup) kill() { g.killBut(0) }

// killBut is kill but for the process keep, which it leaves running.
func (g execGroup) killBut(keep int) {
	for range 200 {
		b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		if err != nil {
			return
		}
		left := false
		for f := range strings.FieldsSeq(string(b)) {
			// Tether's own pid is the thread that forked the command, not
			// yet gone (enter).
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() && pid != keep {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				left = true
			}
		}
		if !left {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// release removes the exec's group if nothing runs in it any more;
// background processes keep it (and the sandbox's removal takes it).
func (g execGroup) release() { _ = os.Remove(g.dir) }

// remove deletes the sandbox's groups once their processes are gone (the
// kernel frees a group's last process a moment after it died).
func (cg *cgroups) remove(id string) error {
	for _, dir := range cg.dirs(id) {
		// Exec groups first: a group with children cannot go.
		subs, _ := os.ReadDir(dir)
		for _, sub := range subs {
			if sub.IsDir() {
				_ = os.Remove(filepath.Join(dir, sub.Name()))
			}
		}
		var err error
		for range 100 {
			if err = os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// oomKills returns how many times the sandbox's memory limit killed a
// process, or -1 where the host does not say.
func (cg *cgroups) oomKills(id string) int {
	for _, dir := range cg.dirs(id) {
		file := "memory.events"
		if !cg.v2 {
			if !strings.Contains(dir, "/memory/") {
				continue
			}
			file = "memory.oom_control"
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return -1
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return -1
}
