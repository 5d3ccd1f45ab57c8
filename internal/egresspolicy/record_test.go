package egresspolicy_test

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/egresspolicy"
	"github.com/tetherhq/tether/internal/egressproxy"
)

// writer keeps what a Recorder writes.
type writer struct {
	mu      sync.Mutex
	batches [][]domain.Activity
}

func (w *writer) RecordEgress(_ context.Context, records []domain.Activity) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batches = append(w.batches, append([]domain.Activity(nil), records...))
	return nil
}

func (w *writer) records() []domain.Activity {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []domain.Activity
	for _, b := range w.batches {
		out = append(out, b...)
	}
	return out
}

// TestRecorderWritesConnections: connections and refused DNS questions
// are written, in batches, as egress activity; allowed DNS answers are
// not; a sandbox past its rate has the rest of its second dropped and
// counted, without crowding out another sandbox's; what is queued at
// shutdown is written.
func TestRecorderWritesConnections(t *testing.T) {
	w := &writer{}
	r := egresspolicy.NewRecorder(w, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })

	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	addr := netip.MustParseAddrPort("192.0.2.10:443")
	r.Record(egressproxy.ConnRecord{SandboxID: "sbx-a", Proto: egressproxy.ProtoTLS, Host: "pypi.org", Addr: addr, Allowed: true,
		Rule: "pypi.org", Credential: "Authorization", BytesOut: 10, BytesIn: 20, Start: at, End: at.Add(time.Second)})
	r.Record(egressproxy.ConnRecord{SandboxID: "sbx-a", Proto: egressproxy.ProtoDNS, Host: "pypi.org", Allowed: true, Start: at, End: at})
	r.Record(egressproxy.ConnRecord{SandboxID: "sbx-a", Proto: egressproxy.ProtoDNS, Host: "evil.test", Reason: "no rule allows it", Start: at, End: at})
	for range 150 {
		r.Record(egressproxy.ConnRecord{SandboxID: "sbx-noisy", Proto: egressproxy.ProtoTCP, Addr: addr, Reason: "no rule", Start: at, End: at})
	}
	r.Record(egressproxy.ConnRecord{SandboxID: "sbx-b", Proto: egressproxy.ProtoHTTP, Host: "other.test", Addr: addr, Reason: "no rule", Start: at, End: at})
	cancel()
	wg.Wait()

	got := w.records()
	count := map[string]int{}
	for _, a := range got {
		count[a.SandboxID]++
		if a.Kind != domain.ActivityEgress {
			t.Errorf("kind %s", a.Kind)
		}
	}
	if count["sbx-a"] != 2 || count["sbx-noisy"] != 100 || count["sbx-b"] != 1 {
		t.Fatalf("records per sandbox = %v; want sbx-a 2 (the connection and the refused question), sbx-noisy 100, sbx-b 1", count)
	}
	first := got[0]
	if first.Target != "pypi.org" || first.Port != 443 || first.Allowed == nil || !*first.Allowed || first.Rule != "pypi.org" ||
		*first.Bytes != 10 || *first.BytesIn != 20 || first.Duration != time.Second {
		t.Fatalf("the connection's record = %+v", first)
	}
	if n := testutil.ToFloat64(r.Collectors()[2].(prometheus.Counter)); n != 50 {
		t.Errorf("dropped = %v; want 50", n)
	}
}
