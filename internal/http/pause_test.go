package http_test

import (
	"net/http"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// noPause is a provider without the Pauser capability.
type noPause struct{ domain.Provider }

func (noPause) Name() string { return "nopause" }

func TestPauseAndResumeOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	sb := b.create(t, keyA, map[string]any{"params": map[string]any{"pause_delay_ms": 50}})
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=20s", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)

	r = b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/pause?wait=20s", nil, as(keyA))
	wantStatus(t, r, http.StatusAccepted)
	var got sandboxJSON
	r.decode(t, &got)
	if got.State != "paused" {
		t.Fatalf("pause?wait = %s, want paused", got.State)
	}
	// Idempotent.
	r = b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/pause", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	// Paused: exec and files are state conflicts naming the state (the
	// state is judged before the provider's capability: the sim has none).
	p := wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"command": "true"}, as(keyA)), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "paused" {
		t.Errorf("exec on a paused sandbox: state %q", p.State)
	}
	p = wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/files?path=/x", nil, as(keyA)), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "paused" {
		t.Errorf("files on a paused sandbox: state %q", p.State)
	}
	// Another tenant's sandbox is not found.
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/resume", nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	r = b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/resume?wait=20s", nil, as(keyA))
	wantStatus(t, r, http.StatusAccepted)
	r.decode(t, &got)
	if got.State != "ready" {
		t.Fatalf("resume?wait = %s, want ready", got.State)
	}
	wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/resume", nil, as(keyA)), http.StatusOK)

	// A terminated sandbox cannot resume, and nothing is written.
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil, as(keyA)), http.StatusAccepted)
	before := len(b.events(t, keyA, "/v1/sandboxes/"+sb.ID+"/events").Items)
	p = wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/resume", nil, as(keyA)), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "terminated" {
		t.Errorf("resume of a terminated sandbox: state %q", p.State)
	}
	if n := len(b.events(t, keyA, "/v1/sandboxes/"+sb.ID+"/events").Items); n != before {
		t.Errorf("a refused resume wrote %d events", n-before)
	}
}

func TestPauseBadInput(t *testing.T) {
	t.Parallel()
	simP, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, withProvider(noPause{simP}))
	requested := b.create(t, keyA, map[string]any{})
	p := wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+requested.ID+"/pause", nil, as(keyA)), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "requested" {
		t.Errorf("pause of a requested sandbox: state %q", p.State)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+domain.NewID()+"/pause", nil, as(keyA)), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/nope/resume", nil, as(keyA)), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+requested.ID+"/pause?wait=forever", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+requested.ID+"/pause?force=1", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+requested.ID+"/pause?wait="+(2*testMaxWait).String(), nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")

	other := b.create(t, keyA, map[string]any{"provider": "nopause"})
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+other.ID+"/pause", nil, as(keyA)), http.StatusNotImplemented, "NOT_SUPPORTED")
	if got := b.get(t, keyA, other.ID); got.State != "requested" {
		t.Errorf("a refused pause changed the sandbox: %s", got.State)
	}

	var list struct {
		Items []struct {
			Name         string `json:"name"`
			Capabilities struct {
				Pause bool `json:"pause"`
			} `json:"capabilities"`
		} `json:"items"`
	}
	r := b.do(t, http.MethodGet, "/v1/providers", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &list)
	want := map[string]bool{"sim": true, "sim-b": true, "nopause": false}
	for _, p := range list.Items {
		if p.Capabilities.Pause != want[p.Name] {
			t.Errorf("provider %s: pause = %v", p.Name, p.Capabilities.Pause)
		}
	}
}
