package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// refiller starts a refiller with test-friendly timings, stopped when the
// test ends.
func (e *env) refiller(reg prometheus.Registerer) *lifecycle.Refiller {
	e.t.Helper()
	r := lifecycle.NewRefiller(lifecycle.RefillerConfig{Interval: 20 * time.Millisecond, Lease: 30 * time.Second,
		MaxLifetime: 24 * time.Hour, CreateTimeout: time.Minute}, e.st, e.log, reg)
	r.Start(e.ctx)
	e.t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

// waitPool polls the pool until cond holds, failing after a deadline.
func (e *env) waitPool(name, what string, cond func(domain.Pool) bool) domain.Pool {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := e.st.GetPool(e.ctx, "acme", name)
		if err != nil {
			e.t.Fatalf("GetPool: %v", err)
		}
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pool %s never %s; last: %+v", name, what, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPoolFillsClaimsAndRefills: with a refiller and an executor, a pool
// fills to min_ready; a claim returns a ready sandbox at once, which lives
// on as its owner's; the pool refills; a failing member is replaced; the
// metrics count it all.
func TestPoolFillsClaimsAndRefills(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(lifecycle.NewPoolCollector(e.st))
	e.refiller(reg)
	if _, err := e.st.CreatePool(e.ctx, domain.Pool{Tenant: "acme", Name: "py", Provider: "sim", MinReady: 3, MaxSize: 3,
		Params: []byte(`{"create_delay_ms":20}`)}); err != nil {
		t.Fatal(err)
	}
	e.waitPool("py", "filled", func(p domain.Pool) bool { return p.Ready == 3 })

	start := time.Now()
	c, err := e.st.ClaimFromPool(e.ctx, domain.ClaimParams{Tenant: "acme", Pool: "py", Owner: "agent", TTL: time.Hour, Explicit: true,
		OwnerTTL: time.Minute, MaxLifetime: 24 * time.Hour})
	if err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if took := time.Since(start); c.Sandbox.State != domain.StateReady || took > time.Second {
		t.Fatalf("claimed %s in %s; want ready at once", c.Sandbox.State, took)
	}
	if !e.holds(c.Sandbox.ID) {
		t.Fatalf("the claimed sandbox %s has no sim resource", c.Sandbox.ID)
	}
	p := e.waitPool("py", "refilled", func(p domain.Pool) bool { return p.Ready == 3 })
	if p.Size != 3 {
		t.Fatalf("refilled pool %+v; want size 3", p)
	}
	if got := e.history(c.Sandbox.ID); got != "requested>creating>ready>ready" {
		t.Errorf("claimed member's history %s; want its creation, then the transfer", got)
	}
	// Each sandbox was created once: three members, the claimed one and
	// its replacement.
	if n := len(e.creates()); n != 4 {
		t.Errorf("%d sandboxes created at the sim; want 4", n)
	}
	m, err := testutil.GatherAndCount(reg, "tether_pool_refills_total")
	if err != nil || m != 1 {
		t.Fatalf("tether_pool_refills_total: %d series, %v", m, err)
	}
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, mf := range out {
		text.WriteString(mf.String())
	}
	for _, want := range []string{`name:"tether_pool_ready"`, `name:"tether_pool_size"`, `value:4`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, text.String())
		}
	}

	// Deleting the pool ends the unclaimed members; the claimed one lives.
	ended, err := e.st.DeletePool(e.ctx, "acme", "py", domain.Caller{})
	if err != nil || len(ended) != 3 {
		t.Fatalf("DeletePool: %d ended, %v; want 3", len(ended), err)
	}
	for _, sb := range ended {
		e.waitFor(sb.ID, "released", isReleased)
	}
	if sb, _ := e.st.Sandbox(e.ctx, c.Sandbox.ID); sb.State != domain.StateReady {
		t.Fatalf("claimed member %s after the delete; want ready", sb.State)
	}
}

// downSim is the sim provider with a switch: while down, every create
// fails as a provider that is down would.
type downSim struct {
	*sim.Provider
	down    atomic.Bool
	creates atomic.Int64
}

func (d *downSim) Create(ctx context.Context, spec domain.CreateSpec) (domain.Resource, error) {
	d.creates.Add(1)
	if d.down.Load() {
		return domain.Resource{}, errors.New("sim is down: connection refused")
	}
	return d.Provider.Create(ctx, spec)
}

// TestPoolRefillBacksOff: a pool whose members keep failing (its provider
// is down) is not refilled in a tight loop: after the first round, the
// refiller requests one member per backoff step, which doubles up to its
// cap; the pool shows the error and the next attempt, and the metrics
// count the failures. Once the provider is back, the next probe is ready,
// the backoff ends and the pool fills; it never exceeds max_size.
func TestPoolRefillBacksOff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ds := &downSim{Provider: e.sim}
	ds.down.Store(true)
	e.executorOf(lifecycle.ExecutorConfig{}, ds)
	reg := prometheus.NewRegistry()
	reg.MustRegister(lifecycle.NewPoolCollector(e.st))
	// A look every 20ms: without a backoff, 3 failed members a look.
	r := lifecycle.NewRefiller(lifecycle.RefillerConfig{Interval: 20 * time.Millisecond, Lease: 30 * time.Second,
		MaxLifetime: 24 * time.Hour, CreateTimeout: time.Minute, Backoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}, e.st, e.log, reg)
	r.Start(e.ctx)
	t.Cleanup(func() { r.Stop(context.Background()) })
	if _, err := e.st.CreatePool(e.ctx, domain.Pool{Tenant: "acme", Name: "bad", Provider: "sim", MinReady: 3, MaxSize: 3}); err != nil {
		t.Fatal(err)
	}
	failed := func() int {
		var n int
		if err := e.st.Pool().QueryRow(e.ctx, `SELECT count(*) FROM sandboxes WHERE owner = 'pool:bad' AND state = 'failed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := time.Now()
	e.waitPool("bad", "backing off", func(p domain.Pool) bool { return p.Refill.Failures >= 3 })
	// Watch it for 2s more: at the cap, a probe every 400ms at most.
	const watch = 2 * time.Second
	before := failed()
	for end := time.Now().Add(watch); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if p, _ := e.st.GetPool(e.ctx, "acme", "bad"); p.Size > 3 {
			t.Fatalf("pool above max_size: %+v", p)
		}
	}
	during := failed() - before
	if during < 1 || during > int(watch/(400*time.Millisecond))+1 {
		t.Fatalf("%d members failed in %s at the backoff's cap of 400ms (after %s); want 1 to %d", during, watch, time.Since(start), int(watch/(400*time.Millisecond))+1)
	}
	total := failed()
	// A look every 20ms for the whole time would have failed hundreds.
	if bound := 3 + int(time.Since(start)/(100*time.Millisecond)) + 1; total > bound {
		t.Fatalf("%d members failed in %s; want at most %d (3, then at most a probe per 100ms)", total, time.Since(start), bound)
	}
	p, err := e.st.GetPool(e.ctx, "acme", "bad")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Refill.Error, "connection refused") || p.Refill.NextAt.IsZero() || p.Refill.ErrorAt.IsZero() {
		t.Fatalf("backing-off pool's refill %+v; want the member's error and the next attempt", p.Refill)
	}
	var text strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		text.WriteString(mf.String())
	}
	for _, want := range []string{`name:"tether_pool_refill_failures"`, `name:"tether_pool_refill_backoff_seconds"`, `name:"tether_pool_members_failed_total"`, `name:"tether_pool_refills_deferred_total"`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, text.String())
		}
	}
	if v := counterValue(mfs, "tether_pool_members_failed_total"); int(v) < total-3 {
		t.Errorf("tether_pool_members_failed_total %v; want about %d", v, total)
	}

	// The provider is back: within the cap and a create, the pool is full
	// and no longer backing off.
	ds.down.Store(false)
	p = e.waitPool("bad", "refilled after the recovery", func(p domain.Pool) bool { return p.Ready == 3 && p.Refill.Failures == 0 })
	if !p.Refill.NextAt.IsZero() || p.Size != 3 {
		t.Fatalf("recovered pool %+v; want 3 members, no backoff", p)
	}
}

// counterValue is the value of the counter named in mfs; -1 if absent.
func counterValue(mfs []*dto.MetricFamily, name string) float64 {
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}
