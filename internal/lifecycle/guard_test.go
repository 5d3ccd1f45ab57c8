package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// panicky is the sim provider, except that its first create and its first
// destroy panic.
type panicky struct {
	*sim.Provider
	creates, destroys atomic.Int32
}

func (p *panicky) Create(ctx context.Context, spec domain.CreateSpec) (domain.Resource, error) {
	if p.creates.Add(1) == 1 {
		panic("create went wrong")
	}
	return p.Provider.Create(ctx, spec)
}

func (p *panicky) Destroy(ctx context.Context, id string) error {
	if p.destroys.Add(1) == 1 {
		panic("destroy went wrong")
	}
	return p.Provider.Destroy(ctx, id)
}

// TestProviderPanicIsARetryableFailure: a provider call that panics does
// not take the process down; it is counted, and the work is retried like
// any transient failure.
func TestProviderPanicIsARetryableFailure(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := &panicky{Provider: e.sim}
	metrics := lifecycle.NewMetrics(prometheus.NewRegistry())
	ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{PollInterval: 50 * time.Millisecond, RetryBackoff: 20 * time.Millisecond}, e.st, e.notifier, []domain.Provider{p}, e.log, metrics)
	ex.Start(e.ctx)
	t.Cleanup(func() { ex.Stop(context.Background()) })

	sb := e.create("")
	ready := e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	if ready.Attempts != 2 {
		t.Errorf("attempts = %d, want 2 (a panic, then success)", ready.Attempts)
	}
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, "released", isReleased)
	if e.holds(sb.ID) {
		t.Error("resource still held after release")
	}
	for _, op := range []string{"create", "destroy"} {
		if got := testutil.ToFloat64(metrics.ProviderPanics.WithLabelValues("sim", op)); got != 1 {
			t.Errorf("tether_provider_panics_total{op=%q} = %v, want 1", op, got)
		}
	}
}
