package http_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
)

// endsMidCall is a provider whose data-plane calls end their sandbox in
// the registry, as a concurrent DELETE does, and then fail without a code,
// as a call does whose resources the destroy took from under it (the
// local provider's exec found its control group gone).
type endsMidCall struct {
	*sim.Provider
	st *store.Store
}

func (*endsMidCall) Name() string { return "endsmidcall" }

func (p *endsMidCall) end(ctx context.Context, id string) error {
	if _, _, err := p.st.EndSandbox(ctx, tenantA, id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "ended mid-call"); err != nil {
		return err
	}
	return errors.New("open /sys/fs/cgroup/pids/tether/sbx/exec-1/tasks: no such file or directory")
}

func (p *endsMidCall) Exec(ctx context.Context, id string, _ domain.ExecRequest) (domain.ExecResult, error) {
	return domain.ExecResult{}, p.end(ctx, id)
}

func (p *endsMidCall) ExecStream(ctx context.Context, id string, _ domain.ExecRequest, _ func(string, []byte) error) (domain.ExecResult, error) {
	return domain.ExecResult{}, p.end(ctx, id)
}

func (p *endsMidCall) WriteFile(ctx context.Context, id, _ string, _ io.Reader, _ int64) error {
	return p.end(ctx, id)
}

func (p *endsMidCall) ReadFile(ctx context.Context, id, _ string, _ io.Writer, _ int64) error {
	return p.end(ctx, id)
}

// TestCallsOnASandboxEndedMidway: a data-plane call that fails because its
// sandbox ended while it ran answers 409 SANDBOX_STATE_CONFLICT with the
// state, not 500: the destroy took what the call was using.
func TestCallsOnASandboxEndedMidway(t *testing.T) {
	t.Parallel()
	simP, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &endsMidCall{Provider: simP}
	b := setup(t, withExecutor(), withProvider(p))
	p.st = b.Store // read only by the data-plane calls below
	for _, call := range []struct {
		method, path string
		body         any
		opts         []reqOpt
	}{
		{http.MethodPost, "/exec", map[string]any{"command": "true"}, nil},
		{http.MethodPost, "/exec", map[string]any{"command": "true"}, []reqOpt{header("Accept", "text/event-stream")}},
		{http.MethodPut, "/files?path=/workspace/a", "data", nil},
		{http.MethodGet, "/files?path=/workspace/a", nil, nil},
	} {
		sb := b.create(t, keyA, map[string]any{"provider": "endsmidcall"})
		if got := b.get(t, keyA, sb.ID+"?wait=20s"); got.State != "ready" {
			t.Fatalf("sandbox %s", got.State)
		}
		r := b.do(t, call.method, "/v1/sandboxes/"+sb.ID+call.path, call.body, append(call.opts, as(keyA))...)
		if p := wantProblem(t, r, http.StatusConflict, "SANDBOX_STATE_CONFLICT"); p.State != "terminated" {
			t.Errorf("%s %s: state %q; want terminated", call.method, call.path, p.State)
		}
	}
}
