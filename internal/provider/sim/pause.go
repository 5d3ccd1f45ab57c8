package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The sim implements provider.Pauser.
var _ provider.Pauser = (*Provider)(nil)

// Pause implements provider.Pauser: it marks the sandbox paused, after
// params.pause_delay_ms. Pausing a paused sandbox is success; one the sim
// does not hold is an error.
func (p *Provider) Pause(ctx context.Context, sandboxID string) error {
	return p.setPaused(ctx, "pause", sandboxID, true)
}

// Resume implements provider.Pauser: it removes the paused mark, after
// params.pause_delay_ms. Resuming a running sandbox is success.
func (p *Provider) Resume(ctx context.Context, sandboxID string) error {
	return p.setPaused(ctx, "resume", sandboxID, false)
}

// Paused reports whether the sim holds the sandbox paused.
func (p *Provider) Paused(sandboxID string) bool {
	_, err := os.Stat(p.pausedMarker(sandboxID))
	return err == nil
}

func (p *Provider) pausedMarker(id string) string { return filepath.Join(p.dir, ".paused-"+id) }

func (p *Provider) setPaused(ctx context.Context, op, id string, paused bool) error {
	if !validName(id) {
		return fmt.Errorf("sim: %s: invalid sandbox id %q", op, id)
	}
	b, err := os.ReadFile(filepath.Join(p.dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sim: %s: sandbox %s not found", op, id)
	}
	if err != nil {
		return fmt.Errorf("sim: %s: %w", op, err)
	}
	var rec record
	_ = json.Unmarshal(b, &rec) // a damaged record has no params
	params, _ := parseParams(rec.Params)
	switch params.Fail {
	case op:
		return fmt.Errorf("sim: %s: injected failure", op)
	case op + "_once":
		if p.firstFailure(op + "/" + id) {
			return provider.Retryable(fmt.Errorf("sim: %s: injected transient failure", op))
		}
	}
	if err := sleep(ctx, time.Duration(params.PauseDelayMS)*time.Millisecond); err != nil {
		return fmt.Errorf("sim: %s: %w", op, err)
	}
	p.fsMu.Lock()
	defer p.fsMu.Unlock()
	// Under the lock: a destroy that ran meanwhile leaves no marker behind.
	if _, err := os.Stat(filepath.Join(p.dir, id)); err != nil {
		return fmt.Errorf("sim: %s: sandbox %s not found", op, id)
	}
	if paused {
		err = os.WriteFile(p.pausedMarker(id), nil, 0o644)
	} else if err = os.Remove(p.pausedMarker(id)); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("sim: %s: %w", op, err)
	}
	return nil
}
