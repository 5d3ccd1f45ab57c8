package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/host/uidpool"
	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
)

// Destroy implements provider.Provider.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !provider.ValidSandboxID(sandboxID) {
		return fmt.Errorf("local: destroy: invalid sandbox id %q", sandboxID)
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	return p.destroyLocked(ctx, sandboxID)
}

// destroyLocked kills the sandbox's init, which takes every process of its
// pid namespace with it (a paused sandbox's thawed first, pause.go), waits
// for it to go, removes its network and
// control groups, unmounts its workspace and removes the sandbox's folder.
// Nothing to destroy is success.
func (p *Provider) destroyLocked(ctx context.Context, id string) error {
	dir := p.sandboxDir(id)
	m, metaErr := p.readMeta(id)
	if err := p.killSandbox(ctx, id, m, metaErr == nil); err != nil {
		return err
	}
	p.mu.Lock()
	done := p.waiters[id]
	delete(p.waiters, id)
	p.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("local: destroy: waiting for bwrap to exit: %w", ctx.Err())
		}
	}
	if err := p.teardownEgress(ctx, id); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	if p.cg != nil {
		if err := p.cg.Remove(id); err != nil {
			return fmt.Errorf("local: destroy: %w", err)
		}
	}
	// Unmounted first: removing the folder would otherwise empty the
	// workspace file by file and then fail on its mount point.
	if err := workspace.Clear(ctx, dir); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	// Only now, with nothing of it left, may another sandbox take its uid.
	// Without meta.json (a create cut short between its claim and its
	// record, or a destroy cut short after removing the folder), every
	// claim the folder holds is freed.
	release := func() error { return uidpool.ReleaseHolder(dir) }
	if metaErr == nil && m.UID != 0 {
		release = func() error { return uidpool.Release(m.UID, dir) }
	}
	if err := release(); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	p.unreserve(id)
	return nil
}

// killSandbox kills the processes of sandbox id (those found by their
// command line, and its init as m records it, if recorded) and waits for
// them to go.
func (p *Provider) killSandbox(ctx context.Context, id string, m meta, recorded bool) error {
	if p.cg != nil {
		// A paused sandbox's processes would not die of SIGKILL (cgroup
		// v1) until thawed: they are killed and thawed first.
		if err := p.cg.KillFrozen(ctx, id); err != nil {
			return fmt.Errorf("local: destroy: %w", err)
		}
	}
	procs, err := p.sandboxProcesses()
	if err != nil {
		return fmt.Errorf("local: destroy: finding the sandbox's processes: %w", err)
	}
	pids := procs[id] // its init first
	if recorded && m.alive() {
		pids = append([]int{m.InitPID}, pids...)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("local: destroy: kill: %w", err)
		}
	}
	for _, pid := range pids {
		for processRunning(pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("local: destroy: waiting for the sandbox to exit: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// List implements provider.Provider.
func (p *Provider) List(context.Context) ([]provider.Resource, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("local: list: %w", err)
	}
	procs, err := p.sandboxProcesses()
	if err != nil {
		return nil, fmt.Errorf("local: list: %w", err)
	}
	out := make([]provider.Resource, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() || !provider.ValidSandboxID(e.Name()) {
			continue
		}
		delete(procs, e.Name())
		m, err := p.readMeta(e.Name())
		if err != nil {
			// A folder without metadata is the start of a create, or its
			// remains: it is held, not running.
			m = meta{SandboxID: e.Name()}
			if info, err := e.Info(); err == nil {
				m.CreatedAt = info.ModTime().UTC()
			}
		}
		out = append(out, p.resource(m))
	}
	// Sandboxes that run without a folder: started by a Tether that died
	// before recording them, their folder since removed; and workspaces
	// whose loop device outlived their folder. Never a live sandbox's, so
	// the janitor destroys them.
	for id := range workspace.Leftovers(p.dir) {
		if !provider.ValidSandboxID(id) {
			continue
		}
		if _, err := os.Lstat(p.sandboxDir(id)); errors.Is(err, fs.ErrNotExist) {
			procs[id] = nil
		}
	}
	for id := range procs {
		out = append(out, provider.Resource{SandboxID: id, ProviderID: "local-orphan"})
	}
	return out, nil
}
