package cgroup

import (
	"context"
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

// Freezing a sandbox: every process of its stops where it is, keeping its
// memory, its open files and its place in the sandbox's other groups,
// until it is thawed.
//
// Under v2 the sandbox's one group is frozen whole (cgroup.freeze), exec
// groups with it; its processes are born in it, and a frozen process
// still dies of SIGKILL.
//
// Under v1 the freezer is a hierarchy of its own, and a sandbox's freezer
// group is not one of those a command enters at its fork (Enter): the
// thread of Tether's that forks a command joins its groups for a moment,
// and one joining a frozen freezer group would be frozen itself. So
// Freeze moves the sandbox's processes in, as its pids groups (which every
// one of them is born in) list them, before and while it freezes, until
// every one is in and frozen. And a v1-frozen process does not die of
// SIGKILL until it is thawed (the signal waits): whoever kills one must
// thaw it, or move it out (ExecGroup.Kill does).

// freezePoll is how often Freeze and Thaw look at a group's state.
const freezePoll = 2 * time.Millisecond

// v1Freezer makes, in the v1 freezer hierarchy mounted at mount, the
// parent of the sandboxes' freezer groups beside Tether's own group
// (own), and returns it; "" if the host has no such hierarchy or it
// cannot be written.
func v1Freezer(mount, own, parent string) string {
	if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
		return ""
	}
	base := filepath.Join(mount, own, parent)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return ""
	}
	return base
}

// HasFreezer reports whether the host has a freezer Tether can use: v2's
// cgroup.freeze, or a mounted v1 freezer hierarchy.
func (cg *Groups) HasFreezer() bool { return cg.v2 || cg.freezer != "" }

// CanFreeze reports whether the sandbox id has a group that can be
// frozen: under v1, its freezer group (sandboxes made before Tether made
// one have none); under v2, its group, on a kernel with cgroup.freeze.
func (cg *Groups) CanFreeze(id string) bool {
	if !cg.v2 && cg.freezer == "" {
		return false
	}
	_, err := os.Stat(cg.freezeFile(id))
	return err == nil
}

// FreezerDir is the sandbox's group the freezer acts on: under v1 its
// freezer group, under v2 its one group.
func (cg *Groups) FreezerDir(id string) string {
	if cg.v2 {
		return cg.Dirs(id)[0]
	}
	return filepath.Join(cg.freezer, id)
}

func (cg *Groups) freezeFile(id string) string {
	if cg.v2 {
		return filepath.Join(cg.FreezerDir(id), "cgroup.freeze")
	}
	return filepath.Join(cg.FreezerDir(id), "freezer.state")
}

// Frozen reports whether the sandbox's group is frozen, or on its way
// (frozen or freezing: its processes may not run); false for a sandbox
// without a freezer group.
func (cg *Groups) Frozen(id string) bool {
	b, err := os.ReadFile(cg.freezeFile(id))
	if err != nil {
		return false
	}
	s := strings.TrimSpace(string(b))
	return s == "1" || s == "FROZEN" || s == "FREEZING"
}

// settled reports whether the group's freezer has reached the state asked
// of it: every process frozen (frozen) or none (thawed).
func (cg *Groups) settled(id string, frozen bool) (bool, error) {
	if cg.v2 {
		b, err := os.ReadFile(filepath.Join(cg.FreezerDir(id), "cgroup.events"))
		if err != nil {
			return false, err
		}
		want := "frozen 0"
		if frozen {
			want = "frozen 1"
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.TrimSpace(line) == want {
				return true, nil
			}
		}
		return false, nil
	}
	b, err := os.ReadFile(cg.freezeFile(id))
	if err != nil {
		return false, err
	}
	want := "THAWED"
	if frozen {
		want = "FROZEN"
	}
	return strings.TrimSpace(string(b)) == want, nil
}

// Freeze freezes every process of the sandbox id and waits until all are
// frozen, or ctx ends (an error; the group is then left freezing, for
// the caller to thaw). Freezing a frozen sandbox is success.
func (cg *Groups) Freeze(ctx context.Context, id string) error {
	if !cg.CanFreeze(id) {
		return fmt.Errorf("cgroup: freeze: sandbox %s has no freezer group", id)
	}
	value := "FROZEN"
	if cg.v2 {
		value = "1"
	}
	for {
		pending := 0
		if !cg.v2 {
			var err error
			if pending, err = cg.gather(id); err != nil {
				return fmt.Errorf("cgroup: freeze: %w", err)
			}
		}
		if err := os.WriteFile(cg.freezeFile(id), []byte(value), 0o644); err != nil {
			return fmt.Errorf("cgroup: freeze: %w", err)
		}
		done, err := cg.settled(id, true)
		if err != nil {
			return fmt.Errorf("cgroup: freeze: %w", err)
		}
		if done && pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup: freeze: waiting for the sandbox's processes to stop: %w", ctx.Err())
		case <-time.After(freezePoll):
		}
	}
}

// Thaw lets every process of the sandbox id run again and waits until
// none is frozen, or ctx ends. Thawing a running sandbox, or one without
// a freezer group, is success.
func (cg *Groups) Thaw(ctx context.Context, id string) error {
	if !cg.CanFreeze(id) {
		return nil
	}
	value := "THAWED"
	if cg.v2 {
		value = "0"
	}
	if err := os.WriteFile(cg.freezeFile(id), []byte(value), 0o644); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cgroup: thaw: %w", err)
	}
	for {
		done, err := cg.settled(id, false)
		if errors.Is(err, fs.ErrNotExist) || done {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroup: thaw: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup: thaw: %w", ctx.Err())
		case <-time.After(freezePoll):
		}
	}
}

// gather moves into the sandbox's v1 freezer group every process its
// pids groups (the sandbox's and its execs') hold that is not in it yet,
// and returns how many it moved, plus one if a thread of Tether's is in
// them (it is forking a command into the sandbox, whose process Freeze
// must then wait for and move in too).
func (cg *Groups) gather(id string) (int, error) {
	dir := cg.FreezerDir(id)
	in := map[int]bool{}
	for _, pid := range readProcs(dir) {
		in[pid] = true
	}
	pending := 0
	self := os.Getpid()
	for _, pid := range cg.Procs(id) {
		switch {
		case pid == self:
			pending++
		case !in[pid]:
			err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
			switch {
			case err == nil:
				pending++
			case errors.Is(err, syscall.ESRCH):
				// It exited meanwhile.
			default:
				return 0, fmt.Errorf("moving process %d into %s: %w", pid, dir, err)
			}
		}
	}
	return pending, nil
}

// Procs returns the processes in the sandbox's group and its exec groups
// (under v1, as its pids hierarchy has them; under v2 Tether's pid may be
// among them for a moment, forking a command into the sandbox).
func (cg *Groups) Procs(id string) []int {
	var out []int
	_ = filepath.WalkDir(cg.Dirs(id)[0], func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // a group that went meanwhile holds nothing
		}
		if d.IsDir() {
			out = append(out, readProcs(path)...)
		}
		return nil
	})
	return out
}

// readProcs lists the processes of the group folder dir.
func readProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// KillFrozen SIGKILLs every process of the sandbox id (but Tether) and,
// if its group is frozen, thaws it so that they die (under v1 they would
// not until then). The processes do not run in between: a thawed process
// with SIGKILL pending dies before it returns to what it was doing. It
// does not wait for them to go.
func (cg *Groups) KillFrozen(ctx context.Context, id string) error {
	if !cg.Frozen(id) {
		return nil
	}
	self := os.Getpid()
	for _, pid := range cg.Procs(id) {
		if pid != self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if !cg.v2 {
		// A process may be in the freezer group but no longer in the pids
		// groups only in a test's setup; kill those too.
		for _, pid := range readProcs(cg.FreezerDir(id)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return cg.Thaw(ctx, id)
}

// KillProcessGroup SIGKILLs the processes of the sandbox id in process
// group pgid (a command that entered it), and under v1 moves them out of
// its freezer group, to one never frozen, so that they die while the
// sandbox is frozen. It does not wait for them to go.
func (cg *Groups) KillProcessGroup(id string, pgid int) {
	for _, pid := range cg.Procs(id) {
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid || pid == os.Getpid() {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !cg.v2 && cg.freezer != "" {
			_ = os.WriteFile(filepath.Join(cg.freezer, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		}
	}
}
