package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// failAll fails every requested sim sandbox's create, as an executor
// whose provider refuses them would; it returns how many.
func failAll(t *testing.T, b bundle, msg string) int {
	t.Helper()
	claims, err := b.st.ClaimCreates(b.ctx, "sim", "", "w", 10000, time.Minute, store.Share{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if _, err := b.st.MarkFailed(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.ActorExecutor, msg); err != nil {
			t.Fatal(err)
		}
	}
	return len(claims)
}

// TestPoolRefillBackoff: a refill round whose members all failed backs
// the pool off: no member is requested before the backoff's next step,
// then one at a time (a probe), the wait doubling per failed round up to
// its cap; the pool shows the last error and the next attempt. A probe
// that becomes ready ends the backoff, and the next refill fills the pool.
func TestPoolRefillBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mustPool(t, b.st, "py", 4, 4)
	l := refillLimits
	l.Backoff, l.MaxBackoff = time.Second, 4*time.Second
	refill := func(what string) store.Refill {
		t.Helper()
		r, err := b.st.RefillPool(b.ctx, "acme", "py", l)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return r
	}
	if r := refill("first"); len(r.Created) != 4 {
		t.Fatalf("first refill created %d; want 4", len(r.Created))
	}
	if n := failAll(t, b, "provider down: connection refused"); n != 4 {
		t.Fatalf("%d failed; want 4", n)
	}
	b.clock.Advance(10 * time.Millisecond)
	r := refill("after the failures")
	if r.Failed != 4 || r.Readied || !r.Deferred || len(r.Created) != 0 {
		t.Fatalf("refill after 4 failed members: %+v; want 4 failed, deferred, none created", r)
	}
	p, err := b.st.GetPool(b.ctx, "acme", "py")
	if err != nil {
		t.Fatal(err)
	}
	if p.Refill.Failures != 1 || !p.Refill.NextAt.Equal(b.st.Now().Add(time.Second)) ||
		!strings.Contains(p.Refill.Error, "connection refused") || p.Refill.ErrorAt.IsZero() || p.Refill.Pending != 0 {
		t.Fatalf("pool after a failed round: %+v; want failures 1, next attempt in 1s, the member's error", p.Refill)
	}

	// Each step: nothing before it is due, then one probe, which fails.
	// The waits double to the cap.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		b.clock.Advance(wait - 20*time.Millisecond)
		if r := refill("before the step"); len(r.Created) != 0 || !r.Deferred {
			t.Fatalf("step %d: refill before the backoff's end: %+v; want none created", i, r)
		}
		b.clock.Advance(20 * time.Millisecond)
		r := refill("at the step")
		if len(r.Created) != 1 || r.Pool.Refill.Pending != 1 {
			t.Fatalf("step %d: refill at the backoff's end: created %d, %+v; want one probe", i, len(r.Created), r.Pool.Refill)
		}
		// While the probe is on its way, nothing more is requested.
		if r := refill("probe on its way"); len(r.Created) != 0 {
			t.Fatalf("step %d: a refill with the probe on its way created %d", i, len(r.Created))
		}
		if n := failAll(t, b, "provider down: connection refused"); n != 1 {
			t.Fatalf("step %d: %d failed; want the probe", i, n)
		}
		r = refill("after the probe failed")
		want := min(wait*2, 4*time.Second)
		if r.Failed != 1 || r.Pool.Refill.Failures != i+2 || !r.Pool.Refill.NextAt.Equal(b.st.Now().Add(want)) {
			t.Fatalf("step %d: after the probe failed: %+v; want failures %d, next attempt in %s", i, r.Pool.Refill, i+2, want)
		}
	}
	var failed int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM sandboxes WHERE owner = 'pool:py' AND state = 'failed'`).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if failed != 8 {
		t.Fatalf("%d failed members over 5 failed rounds; want 8 (4, then a probe a round)", failed)
	}

	// The cause is fixed: the next probe becomes ready, and the refill
	// after it ends the backoff and fills the pool.
	b.clock.Advance(4 * time.Second)
	if r := refill("the recovering probe"); len(r.Created) != 1 {
		t.Fatalf("probe: created %d", len(r.Created))
	}
	if n := readyAll(t, b.st); n != 1 {
		t.Fatalf("%d ready; want the probe", n)
	}
	r = refill("after the probe was ready")
	if !r.Readied || len(r.Created) != 3 || r.Pool.Refill.Failures != 0 || !r.Pool.Refill.NextAt.IsZero() {
		t.Fatalf("refill after a ready probe: %+v, created %d; want the backoff ended and 3 created", r.Pool.Refill, len(r.Created))
	}
	if !strings.Contains(r.Pool.Refill.Error, "connection refused") {
		t.Fatalf("the last error is kept after the recovery: %+v", r.Pool.Refill)
	}
}

// TestPoolRefillQuotaError: a refill the tenant's live cap stops shows it
// as the pool's last error, without backing the pool off (nothing
// failed: the pool refills as soon as the tenant has room).
func TestPoolRefillQuotaError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t)
	mustPool(t, b.st, "py", 2, 2)
	l := refillLimits
	l.TenantMaxLive = 1
	r, err := b.st.RefillPool(b.ctx, "acme", "py", l)
	if err != nil || len(r.Created) != 0 || r.Deferred {
		t.Fatalf("refill at the cap: %+v, %v; want nothing created, not deferred", r, err)
	}
	if p := r.Pool.Refill; p.Failures != 0 || !p.NextAt.IsZero() || !strings.HasPrefix(p.Error, "QUOTA_EXCEEDED") {
		t.Fatalf("pool at the tenant's cap: %+v; want a QUOTA_EXCEEDED error and no backoff", p)
	}
	l.TenantMaxLive = 3
	if r, err := b.st.RefillPool(b.ctx, "acme", "py", l); err != nil || len(r.Created) != 2 {
		t.Fatalf("refill with room: %+v, %v; want 2 created", r, err)
	}
}
