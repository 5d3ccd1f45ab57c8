package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tetherhq/tether/provider"
)

// Pause implements provider.Pauser: the VM's vCPUs stop, its memory and
// devices stay as they are (QMP "stop"). A paused sandbox's exec, files
// and ports fail at once (CodeStateConflict) rather than wait on a guest
// that does not run.
func (p *Provider) Pause(ctx context.Context, sandboxID string) error {
	return p.setPaused(ctx, sandboxID, true)
}

// Resume implements provider.Pauser (QMP "cont").
func (p *Provider) Resume(ctx context.Context, sandboxID string) error {
	return p.setPaused(ctx, sandboxID, false)
}

func (p *Provider) setPaused(ctx context.Context, id string, paused bool) error {
	unlock := p.lock(id)
	defer unlock()
	if _, alive := p.running(id); !alive {
		return provider.Errorf(provider.CodeProviderUnavailable, "microvm: sandbox %s no longer runs", id)
	}
	marker := filepath.Join(p.vmDir(id), pausedFile)
	command := "cont"
	if paused {
		command = "stop"
		// The marker first: no exec starts on a guest about to stop.
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			return fmt.Errorf("microvm: pause: %w", err)
		}
	}
	socket, err := p.socket(id, qmpSocket)
	if err == nil {
		err = qmp(ctx, socket, command)
	}
	if err != nil {
		if paused {
			_ = os.Remove(marker)
		}
		return provider.Retryable(fmt.Errorf("microvm: %s: %w", command, err))
	}
	if !paused {
		if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("microvm: resume: %w", err)
		}
	}
	return nil
}

// qmp runs one command on QEMU's monitor.
func qmp(ctx context.Context, socket, command string) error {
	m, err := dialQMP(ctx, socket)
	if err != nil {
		return err
	}
	defer m.close()
	_, err = m.run(command, nil, nil)
	return err
}
