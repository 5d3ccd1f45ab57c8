package local

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetherhq/tether/provider"
)

// Pausing a sandbox freezes its processes with the cgroup freezer
// (cgroup.Groups.Freeze): they stop where they are and keep their memory,
// their open files and pipes, the workspace and /tmp; resuming thaws them.
// The init, its keeper's place in the pid namespace and the network stay as
// they are, so a paused sandbox survives Tether's restart like a running
// one, and List finds it the same.
//
// A frozen process cannot be entered: a command forked into a frozen
// sandbox would freeze before it ran. So commands are refused on a frozen
// sandbox (a state conflict, as the API's for a paused one), and starting
// one is serialised with freezing (starts): Freeze moves in the process of
// a command started just before, and none starts after. A command that
// was running when the sandbox froze freezes with it; its timeout, or its
// caller going away, still ends it (cgroup.ExecGroup.Kill,
// KillProcessGroup). Under cgroup v1 a frozen process does not die of
// SIGKILL until thawed: Destroy kills a frozen sandbox's processes and
// thaws them (cgroup.Groups.KillFrozen) before it waits for them to go.

// The local provider implements provider.Pauser.
var _ provider.Pauser = (*Provider)(nil)

// Pause implements provider.Pauser: it freezes every process of the
// sandbox and waits until all are frozen. Pausing a paused sandbox is
// success. If ctx ends first, the sandbox is thawed again and the error
// is retryable.
func (p *Provider) Pause(ctx context.Context, sandboxID string) error {
	if err := p.freezable(sandboxID, "pause"); err != nil {
		return err
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	if _, err := p.running(sandboxID); err != nil {
		return err
	}
	unlockStarts := p.starts.lock(sandboxID)
	defer unlockStarts()
	if err := p.cg.Freeze(ctx, sandboxID); err != nil {
		// As it was before the call: running.
		if terr := p.cg.Thaw(context.WithoutCancel(ctx), sandboxID); terr != nil {
			return fmt.Errorf("local: pause: %w", errors.Join(err, terr))
		}
		return provider.Retryable(fmt.Errorf("local: pause: %w", err))
	}
	return nil
}

// Resume implements provider.Pauser: it thaws the sandbox's processes.
// Resuming a running sandbox is success.
func (p *Provider) Resume(ctx context.Context, sandboxID string) error {
	if err := p.freezable(sandboxID, "resume"); err != nil {
		return err
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	if _, err := p.running(sandboxID); err != nil {
		return err
	}
	if err := p.cg.Thaw(ctx, sandboxID); err != nil {
		return provider.Retryable(fmt.Errorf("local: resume: %w", err))
	}
	return nil
}

// freezable checks that sandbox id can be paused on this host: it has a
// freezer group (sandboxes made before Tether gave them one, or on a host
// without the freezer, have none).
func (p *Provider) freezable(id, op string) error {
	if !provider.ValidSandboxID(id) {
		return fmt.Errorf("local: %s: invalid sandbox id %q", op, id)
	}
	if p.problem != "" {
		return provider.Errorf(provider.CodeProviderUnavailable, "the local provider is unavailable: %s", p.problem)
	}
	if p.cg == nil || !p.cg.CanFreeze(id) {
		return provider.Errorf(provider.CodeNotSupported,
			"sandbox %s cannot be paused on this host: it has no freezer control group (the host's cgroup freezer is missing, or the sandbox was made before Tether gave sandboxes one)", id)
	}
	return nil
}

// enterable returns the metadata of a sandbox whose init runs and which
// is not paused: one commands may enter.
func (p *Provider) enterable(id string) (meta, error) {
	m, err := p.running(id)
	if err != nil {
		return m, err
	}
	if p.frozen(id) {
		return meta{}, pausedConflict(id)
	}
	return m, nil
}

func (p *Provider) frozen(id string) bool { return p.cg != nil && p.cg.Frozen(id) }

// pausedConflict is the error for a command on a frozen sandbox: the
// API's for a paused one.
func pausedConflict(id string) error {
	return provider.Paused(id, "run commands or move files in it; resume it first")
}

// startIn starts cmd (startCommand) unless its sandbox is frozen, and
// never while it is being frozen.
func (p *Provider) startIn(cmd *sandboxCmd) error {
	if cmd.sandbox == "" || p.cg == nil {
		return p.startCommand(cmd.Cmd, cmd.groups)
	}
	unlock := p.starts.lock(cmd.sandbox)
	defer unlock()
	if p.cg.Frozen(cmd.sandbox) {
		return pausedConflict(cmd.sandbox)
	}
	return p.startCommand(cmd.Cmd, cmd.groups)
}

// pauseNote says how pausing works here, for Info.
func (p *Provider) pauseNote() string {
	switch {
	case p.cg == nil:
		return "pause: not on this host (no control groups); pauses are refused"
	case p.cg.V2():
		return "pause: the sandbox's processes are frozen (cgroup v2 cgroup.freeze), keeping their memory, files and network; exec and files are refused while paused"
	case !p.cg.HasFreezer():
		return "pause: not on this host (no cgroup v1 freezer hierarchy mounted); pauses are refused"
	}
	return "pause: the sandbox's processes are frozen (cgroup v1 freezer), keeping their memory, files and network; exec and files are refused while paused"
}
