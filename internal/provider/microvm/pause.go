package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

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
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("connecting to QEMU's monitor: %w", err)
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // the greeting
		return fmt.Errorf("reading QEMU's greeting: %w", err)
	}
	for _, c := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(conn, `{"execute":%q}`+"\n", c); err != nil {
			return fmt.Errorf("sending %s: %w", c, err)
		}
		if err := qmpAnswer(r); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

// qmpAnswer reads the monitor's lines up to the answer, skipping events.
func qmpAnswer(r *bufio.Reader) error {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("reading QEMU's answer: %w", err)
		}
		var msg struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &msg) != nil {
			continue
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Desc)
		}
		if msg.Return != nil {
			return nil
		}
	}
}
