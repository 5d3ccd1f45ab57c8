package lifecycle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/sandbox"
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
func (e *env) waitPool(name, what string, cond func(sandbox.Pool) bool) sandbox.Pool {
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
	if _, err := e.st.CreatePool(e.ctx, sandbox.Pool{Tenant: "acme", Name: "py", Provider: "sim", MinReady: 3, MaxSize: 3,
		Params: []byte(`{"create_delay_ms":20}`)}); err != nil {
		t.Fatal(err)
	}
	e.waitPool("py", "filled", func(p sandbox.Pool) bool { return p.Ready == 3 })

	start := time.Now()
	c, err := e.st.ClaimFromPool(e.ctx, sandbox.ClaimParams{Tenant: "acme", Pool: "py", Owner: "agent", TTL: time.Hour, Explicit: true,
		OwnerTTL: time.Minute, MaxLifetime: 24 * time.Hour})
	if err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if took := time.Since(start); c.Sandbox.State != sandbox.StateReady || took > time.Second {
		t.Fatalf("claimed %s in %s; want ready at once", c.Sandbox.State, took)
	}
	if !e.holds(c.Sandbox.ID) {
		t.Fatalf("the claimed sandbox %s has no sim resource", c.Sandbox.ID)
	}
	p := e.waitPool("py", "refilled", func(p sandbox.Pool) bool { return p.Ready == 3 })
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
	ended, err := e.st.DeletePool(e.ctx, "acme", "py", sandbox.Caller{})
	if err != nil || len(ended) != 3 {
		t.Fatalf("DeletePool: %d ended, %v; want 3", len(ended), err)
	}
	for _, sb := range ended {
		e.waitFor(sb.ID, "released", isReleased)
	}
	if sb, _ := e.st.Sandbox(e.ctx, c.Sandbox.ID); sb.State != sandbox.StateReady {
		t.Fatalf("claimed member %s after the delete; want ready", sb.State)
	}
}

// TestPoolReplacesFailedMembers: members whose create fails stop counting
// and are replaced; the pool never exceeds max_size meanwhile.
func TestPoolReplacesFailedMembers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	e.refiller(nil)
	if _, err := e.st.CreatePool(e.ctx, sandbox.Pool{Tenant: "acme", Name: "bad", Provider: "sim", MinReady: 2, MaxSize: 2,
		Params: []byte(`{"fail":"create"}`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var failed int
		if err := e.st.Pool().QueryRow(e.ctx, `SELECT count(*) FROM sandboxes WHERE owner = 'pool:bad' AND state = 'failed'`).Scan(&failed); err != nil {
			t.Fatal(err)
		}
		if p, _ := e.st.GetPool(e.ctx, "acme", "bad"); p.Size > 2 {
			t.Fatalf("pool above max_size: %+v", p)
		}
		if failed >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d failed members replaced", failed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
