package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
)

func newSim(t *testing.T) *sim.Provider {
	t.Helper()
	p, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func create(t *testing.T, p *sim.Provider, params string) string {
	t.Helper()
	id := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Tenant: "acme", Params: json.RawMessage(params)}); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	p := newSim(t)
	ctx := t.Context()
	if _, ok := any(p).(provider.Pauser); !ok {
		t.Fatal("sim does not pause")
	}
	id := create(t, p, `{}`)
	for range 3 { // idempotent
		if err := p.Pause(ctx, id); err != nil || !p.Paused(id) {
			t.Fatalf("Pause = %v, paused %v", err, p.Paused(id))
		}
	}
	// The marker is no resource of its own.
	if res, err := p.List(ctx); err != nil || len(res) != 1 || res[0].SandboxID != id {
		t.Fatalf("List of a paused sandbox = %+v, %v", res, err)
	}
	for range 2 {
		if err := p.Resume(ctx, id); err != nil || p.Paused(id) {
			t.Fatalf("Resume = %v, paused %v", err, p.Paused(id))
		}
	}
	if err := p.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, id); err != nil || p.Paused(id) {
		t.Fatalf("Destroy of a paused sandbox = %v, still paused %v", err, p.Paused(id))
	}
	if err := p.Pause(ctx, id); err == nil {
		t.Error("Pause of a destroyed sandbox succeeded")
	}
	if err := p.Resume(ctx, provider.NewSandboxID()); err == nil {
		t.Error("Resume of an unknown sandbox succeeded")
	}
}

func TestPauseFailuresAndDelay(t *testing.T) {
	t.Parallel()
	p := newSim(t)
	ctx := t.Context()

	refused := create(t, p, `{"fail":"pause"}`)
	if err := p.Pause(ctx, refused); err == nil || provider.IsRetryable(err) || p.Paused(refused) {
		t.Errorf("fail=pause: %v (retryable %v), paused %v", err, provider.IsRetryable(err), p.Paused(refused))
	}
	once := create(t, p, `{"fail":"resume_once"}`)
	if err := p.Pause(ctx, once); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx, once); !provider.IsRetryable(err) || !p.Paused(once) {
		t.Errorf("first resume of fail=resume_once: %v, paused %v; want retryable, still paused", err, p.Paused(once))
	}
	if err := p.Resume(ctx, once); err != nil || p.Paused(once) {
		t.Errorf("second resume: %v", err)
	}

	slow := create(t, p, `{"pause_delay_ms":300}`)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Pause(short, slow); !errors.Is(err, context.DeadlineExceeded) || p.Paused(slow) {
		t.Errorf("a pause cut short = %v, paused %v", err, p.Paused(slow))
	}
	if err := p.Pause(ctx, slow); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("a slow pause = %v after %s", err, time.Since(start))
	}
	if err := p.ValidateParams(json.RawMessage(`{"fail":"freeze"}`)); err == nil {
		t.Error("fail=freeze accepted")
	}
	if err := p.ValidateParams(json.RawMessage(`{"pause_delay_ms":-1}`)); err == nil {
		t.Error("a negative pause delay accepted")
	}
}
