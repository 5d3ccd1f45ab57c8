// Package cgroup makes and removes the control groups of sandboxes: under
// a parent group capped at the host's share, one group per sandbox with its
// pids, memory and CPU limits (Create: the one place a sandbox's group is
// made), a group per exec inside it that a timeout kills whole, and a
// group for the sandboxes' keepers. It handles cgroup v1 (a group per
// controller) and v2 (one unified group), and owns nothing else.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// cgroupCPUShares is every sandbox's CPU share (cgroup v1; v2 weight 50):
// half a default process group's, so that Tether and the host keep ahead
// of any one sandbox, and sandboxes share the rest evenly.
const (
	cgroupCPUSharesV1 = "512"
	cgroupCPUWeightV2 = "50"
)

// Groups places sandboxes in control groups of their own: one per
// controller under cgroup v1, one under v2. Tether runs as root on the host
// to manage them.
type Groups struct {
	// v2 is set on a cgroup v2 (unified) host.
	v2 bool
	// bases are the folders under which each sandbox gets its group: one
	// per controller (pids, memory, cpu) under v1, one under v2.
	bases []string
	// freezer is, under v1, the folder in the freezer hierarchy under
	// which each sandbox gets its freezer group ("" where the host has no
	// freezer hierarchy: sandboxes then cannot be paused). It is not one
	// of bases: nothing enters it at a fork (Freeze moves a sandbox's
	// processes in), so that no thread of Tether's is ever frozen.
	freezer string
}

// V2 reports whether the host's groups are cgroup v2 (unified).
func (cg *Groups) V2() bool { return cg.v2 }

// errNone says that the host offers no control groups Tether can
// manage.
var errNone = errors.New("no writable cgroup v1 (pids, memory, cpu) or v2 hierarchy")

// Detect finds where this host lets Tether make sandbox groups, in
// a group named parent: under its own group of each v1 controller, or at
// the root of a v2 hierarchy with the pids, memory and cpu controllers.
func Detect(parent string) (*Groups, error) {
	const root = "/sys/fs/cgroup"
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		for _, want := range []string{"pids", "memory", "cpu"} {
			if !slices.Contains(have, want) {
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
		return &Groups{v2: true, bases: []string{base}}, nil
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	cg := &Groups{}
	for _, ctrl := range []string{"pids", "memory", "cpu"} {
		mount := filepath.Join(root, ctrl)
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
			return nil, errNone
		}
		base := filepath.Join(mount, own[ctrl], parent)
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", ctrl, err)
		}
		cg.bases = append(cg.bases, base)
	}
	cg.freezer = v1Freezer(filepath.Join(root, "freezer"), own["freezer"], parent)
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

// keepersGroup is the group, beside the sandboxes' in the parent, that
// holds every sandbox's keeper: counted in the host share, not
// in its sandbox's limits.
const keepersGroup = "keepers"

// KeeperDirs returns the keepers' group folders, made if need be.
func (cg *Groups) KeeperDirs() ([]string, error) {
	out := make([]string, len(cg.bases))
	for i, base := range cg.bases {
		out[i] = filepath.Join(base, keepersGroup)
		if err := os.Mkdir(out[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return out, nil
}

// Dirs returns the sandbox's group folders.
func (cg *Groups) Dirs(id string) []string {
	out := make([]string, len(cg.bases))
	for i, base := range cg.bases {
		out[i] = filepath.Join(base, id)
	}
	return out
}

// Create makes the sandbox's groups with its limits: at most pids
// processes and threads, memoryMB MiB of memory (no swap), a fair CPU
// share.
func (cg *Groups) Create(id string, pids, memoryMB int) error {
	memory := strconv.FormatInt(int64(memoryMB)<<20, 10)
	maxPids := strconv.Itoa(pids)
	for _, dir := range cg.Dirs(id) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		settings := map[string]string{}
		switch {
		case cg.v2:
			settings = map[string]string{"pids.max": maxPids, "memory.max": memory, "memory.swap.max": "0", "cpu.weight": cgroupCPUWeightV2}
		case strings.Contains(dir, "/pids/"):
			settings["pids.max"] = maxPids
		case strings.Contains(dir, "/memory/"):
			settings["memory.limit_in_bytes"] = memory
		case strings.Contains(dir, "/cpu/"):
			settings["cpu.shares"] = cgroupCPUSharesV1
		}
		if err := writeLimits(dir, settings); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	if cg.freezer != "" {
		if err := os.Mkdir(cg.FreezerDir(id), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
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

// Enter moves the calling OS thread, which must be locked to its goroutine
// and end with it (hostos.OnOwnThread), into the groups whose folders are dirs, so
// that the process it forks next starts in them and is counted against
// their limits from its first instruction: under v1 by the thread writing
// itself ("0") to each group's tasks file (the thread alone moves, not
// Tether); under v2 by setting attr to fork straight into the one group
// (CLONE_INTO_CGROUP), through a descriptor that the returned func closes.
//
// Under v1 the thread counts in the groups until it ends, a moment after
// the fork: as one more process of the sandbox's, and in its exec group's
// cgroup.procs as Tether's pid, which ExecGroup.Kill therefore skips. The
// memory limit's OOM killer walks a group's processes by their leading
// threads, so it never picks Tether, whose leading (main) thread
// hostos.OnOwnThread never uses.
func (cg *Groups) Enter(dirs []string, attr *syscall.SysProcAttr) (func(), error) {
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

// ExecGroup is the group of one exec's processes, inside its sandbox's: a
// timeout kills every process in it, however the command detached them
// (setsid, double forks), and nothing else of the sandbox's.
type ExecGroup struct {
	// dir is the exec's own group (in the pids hierarchy under v1).
	dir string
	// dirs are the groups the command starts in (Enter): the exec's own
	// and, under v1, the sandbox's memory and cpu groups.
	dirs []string
	// state is, under v1, the sandbox's freezer.state, and thawed the
	// freezer group (the sandboxes' parent, never frozen) its killed
	// processes move to so that they die while it is frozen; both ""
	// under v2, where SIGKILL ends a frozen process.
	state, thawed string
}

// Frozen reports whether the sandbox of the exec is frozen (under v1;
// false under v2, where it makes no difference to Kill).
func (g ExecGroup) Frozen() bool {
	if g.state == "" {
		return false
	}
	b, err := os.ReadFile(g.state)
	if err != nil {
		return false
	}
	s := strings.TrimSpace(string(b))
	return s == "FROZEN" || s == "FREEZING"
}

// Dirs are the groups the exec's command starts in (Enter); none for the
// zero ExecGroup, whose other methods do nothing.
func (g ExecGroup) Dirs() []string { return g.dirs }

// NewExecGroup makes a group for one exec in the sandbox's.
func (cg *Groups) NewExecGroup(id string) (ExecGroup, error) {
	dirs := cg.Dirs(id)
	g := ExecGroup{dir: filepath.Join(dirs[0], "exec-"+hostos.RandomSuffix())}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return g, fmt.Errorf("cgroup: %w", err)
	}
	g.dirs = append([]string{g.dir}, dirs[1:]...)
	if !cg.v2 && cg.freezer != "" {
		g.state, g.thawed = filepath.Join(cg.FreezerDir(id), "freezer.state"), cg.freezer
	}
	return g, nil
}

// Adopt moves the process pid, already in the exec's sandbox's groups,
// into the exec's own, so that Kill takes it and all it starts from then
// on. (Under v1 only the pids hierarchy's group is the exec's own; the
// process stays in the sandbox's memory, cpu and freezer groups.)
func (g ExecGroup) Adopt(pid int) error {
	if g.dir == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("cgroup: moving %d into %s: %w", pid, g.dir, err)
	}
	return nil
}

// Holds reports whether the process pid is in the exec's own group, as
// the kernel says (its cgroup.procs): one that moved itself there
// (OpenSelfJoin) need not be moved.
func (g ExecGroup) Holds(pid int) bool {
	return g.dir != "" && slices.Contains(readProcs(g.dir), pid)
}

// OpenSelfJoin opens, for writing, the file through which a process
// moves its own thread into the exec's group: under v1 the group's
// tasks, to which a single-threaded process writes "0" (it then moves
// whole, and its children are born in the group). Moving another process
// (Adopt) takes the kernel's threadgroup lock, whose first writer after a
// quiet spell waits for an RCU grace period (5–13 ms on a HZ=250 kernel);
// a thread that moves itself takes no such lock. Opened by Tether, the
// file lets a process of the sandbox write it: the kernel checks the
// opener's credentials (Linux 5.16 on; before, the write is refused, and
// the caller moves the process itself). It returns nil, nil where there
// is none: the zero group, and v2, whose cgroup.threads takes only
// threaded groups.
func (g ExecGroup) OpenSelfJoin() (*os.File, error) {
	if g.dir == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(g.dir, "tasks"), os.O_WRONLY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil // v2: no tasks file
	case err != nil:
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return f, nil
}

// Kill kills every process in the exec's group until none is left (a
// bounded while), frozen ones too: under v1 each killed process is moved
// out of the sandbox's freezer group, to one never frozen, where it dies.
func (g ExecGroup) Kill() { g.KillBut(0) }

// KillBut is Kill but for the process keep, which it leaves running.
func (g ExecGroup) KillBut(keep int) {
	if g.dir == "" {
		return
	}
	for range 200 {
		b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		if err != nil {
			return
		}
		left := false
		for f := range strings.FieldsSeq(string(b)) {
			// Tether's own pid is the thread that forked the command, not
			// yet gone (Enter).
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() && pid != keep {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				if g.thawed != "" {
					_ = os.WriteFile(filepath.Join(g.thawed, "cgroup.procs"), []byte(f), 0o644)
				}
				left = true
			}
		}
		if !left {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Release removes the exec's group if nothing runs in it any more;
// background processes keep it (and the sandbox's removal takes it).
func (g ExecGroup) Release() {
	if g.dir != "" {
		_ = os.Remove(g.dir)
	}
}

// Remove deletes the sandbox's groups once their processes are gone (the
// kernel frees a group's last process a moment after it died).
func (cg *Groups) Remove(id string) error {
	dirs := cg.Dirs(id)
	if cg.freezer != "" {
		dirs = append(dirs, cg.FreezerDir(id))
	}
	for _, dir := range dirs {
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

// OOMKills returns how many times the sandbox's memory limit killed a
// process, or -1 where the host does not say.
func (cg *Groups) OOMKills(id string) int {
	for _, dir := range cg.Dirs(id) {
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

// SetCeiling caps the sandboxes' parent groups, and so all sandboxes
// together, at pids processes and memoryMB MiB (the host share).
func (cg *Groups) SetCeiling(pids, memoryMB int) error {
	maxPids := strconv.Itoa(pids)
	memory := strconv.FormatInt(int64(memoryMB)<<20, 10)
	for _, base := range cg.bases {
		settings := map[string]string{}
		switch {
		case cg.v2:
			settings = map[string]string{"pids.max": maxPids, "memory.max": memory, "memory.swap.max": "0"}
		case strings.Contains(base, "/pids/"):
			settings["pids.max"] = maxPids
		case strings.Contains(base, "/memory/"):
			settings["memory.limit_in_bytes"] = memory
		}
		if err := writeLimits(base, settings); err != nil {
			return fmt.Errorf("capping %s at the host share: %w", base, err)
		}
	}
	return nil
}

// HostMemory is the host's memory, or the limit of the memory control
// group Tether runs in (cgroup v1 or v2) if that is lower, in bytes.
func HostMemory() int64 {
	var total int64
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total = kb << 10
			}
		}
		_ = f.Close()
	}
	if own, err := ownCgroups(); err == nil {
		for _, path := range []string{
			filepath.Join("/sys/fs/cgroup/memory", own["memory"], "memory.limit_in_bytes"),
			filepath.Join("/sys/fs/cgroup", own[""], "memory.max"),
		} {
			if limit := ReadInt(path); limit > 0 && (total == 0 || limit < total) {
				total = limit
			}
		}
	}
	return total
}

// ReadInt reads a file holding one integer; 0 if it cannot (or says
// "max").
func ReadInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// Parents are the folders the sandboxes' groups are made in: one per
// controller under v1, one under v2.
func (cg *Groups) Parents() []string { return append([]string(nil), cg.bases...) }

// RemoveParents removes the keepers' group and the parents, which must
// hold no sandbox's group any more (a test's parent, say).
func (cg *Groups) RemoveParents() error {
	var errs []error
	if cg.freezer != "" {
		if err := os.Remove(cg.freezer); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	for _, base := range cg.bases {
		_ = os.Remove(filepath.Join(base, keepersGroup))
		if err := os.Remove(base); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
