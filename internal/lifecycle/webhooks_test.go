package lifecycle_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/webhook"
	"github.com/tetherhq/tether/internal/webhook/webhooktest"
)

// endpoint registers a webhook endpoint for acme delivering to the
// receiver, which checks signatures with its secret.
func (e *env) endpoint(rcv *webhooktest.Receiver, f webhook.Filter) webhook.Endpoint {
	e.t.Helper()
	key, err := e.st.RegisterAPIKey(e.ctx, "acme", "test", "k")
	if err != nil {
		e.t.Fatal(err)
	}
	w, secret, err := e.st.CreateWebhook(e.ctx, webhook.NewEndpoint{Tenant: "acme", URL: rcv.URL + "/hook", Filter: f, By: key.ID})
	if err != nil {
		e.t.Fatal(err)
	}
	rcv.SetSecret(secret)
	return w
}

// webhooks starts a delivery worker with a quick retry schedule, stopped
// when the test ends.
func (e *env) webhooks(cfg lifecycle.WebhookConfig, reg prometheus.Registerer) *lifecycle.Webhooks {
	e.t.Helper()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.MinBackoff, cfg.MaxBackoff = cmpOr(cfg.MinBackoff, 10*time.Millisecond), cmpOr(cfg.MaxBackoff, 100*time.Millisecond)
	cfg.Timeout = cmpOr(cfg.Timeout, 2*time.Second)
	w := lifecycle.NewWebhooks(cfg, e.st, e.notifier, e.log, reg)
	w.Start(e.ctx)
	e.t.Cleanup(func() { w.Stop(context.Background()) })
	return w
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// waitDelivered waits until the receiver has had every one of the
// tenant's events answered 2xx, and returns the deliveries.
func (e *env) waitDelivered(rcv *webhooktest.Receiver, want int) []webhook.Payload {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := rcv.Delivered()
		if err != nil {
			e.t.Fatal(err)
		}
		if n := len(webhooktest.Events(ps)); n >= want || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tenantEvents is every event of acme that webhooks deliver: its state
// changes and its releases, by id.
func (e *env) tenantEvents() []domain.Event {
	e.t.Helper()
	evs, err := e.st.TenantEvents(e.ctx, "acme", 0, 10000)
	if err != nil {
		e.t.Fatal(err)
	}
	rels, err := e.st.TenantReleases(e.ctx, "acme", 0, 10000)
	if err != nil {
		e.t.Fatal(err)
	}
	evs = append(evs, rels...)
	slices.SortFunc(evs, func(a, b domain.Event) int { return cmp.Compare(a.ID, b.ID) })
	return evs
}

// checkExactlyOnce: every event was delivered in exactly one delivery (one
// idempotency key), each sandbox's in the order of its history.
func checkExactlyOnce(t *testing.T, ps []webhook.Payload, all []domain.Event) {
	t.Helper()
	got := map[int64]int{}
	last := map[string]int64{}
	for _, e := range webhooktest.Events(ps) {
		got[e.ID]++
		if e.ID <= last[e.SandboxID] {
			t.Errorf("sandbox %s: event %d delivered after %d", e.SandboxID, e.ID, last[e.SandboxID])
		}
		last[e.SandboxID] = e.ID
	}
	for _, e := range all {
		if got[e.ID] != 1 {
			t.Errorf("event %d (%s %s) delivered in %d deliveries; want 1", e.ID, e.SandboxID, e.To, got[e.ID])
		}
	}
	if len(got) != len(all) {
		t.Errorf("delivered %d distinct events; the tenant has %d", len(got), len(all))
	}
}

// TestWebhooksDeliverLifecyclesThroughAnOutage: many sandboxes go through
// their lifecycles, run by the real executor over the sim provider, while
// the receiver is down for a while; once it is back, every event has
// been delivered in exactly one delivery (retries resend the same body
// under the same id), in order per sandbox, every request signed.
func TestWebhooksDeliverLifecyclesThroughAnOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := webhooktest.New(t)
	e.endpoint(rcv, webhook.Filter{})
	e.executor(lifecycle.ExecutorConfig{})
	reg := prometheus.NewRegistry()
	e.webhooks(lifecycle.WebhookConfig{AllowPrivate: true, BatchSize: 7}, reg)

	rcv.SetDown(true)
	const n = 40
	var sbs []domain.Sandbox
	for i := range n {
		sbs = append(sbs, e.create("", func(p *domain.CreateParams) {
			if i%4 == 0 {
				p.Params = []byte(`{"create_delay_ms":30}`)
			}
		}))
	}
	for i, sb := range sbs {
		e.waitFor(sb.ID, "ready", isState(domain.StateReady))
		if i%2 == 0 {
			if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, sb := range sbs {
		if i%2 == 0 {
			e.waitFor(sb.ID, "released", isReleased)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(rcv.Attempts()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rcv.SetDown(false)

	all := e.tenantEvents()
	if len(all) != n*3+n/2+n/2 { // and a release for each end
		t.Fatalf("tenant has %d events; want %d", len(all), n*3+n)
	}
	ps := e.waitDelivered(rcv, len(all))
	checkExactlyOnce(t, ps, all)
	retried := 0
	for _, a := range rcv.Attempts() {
		if a.Answered == 503 {
			retried++
		}
		if !strings.HasPrefix(a.UserAgent, "tether-webhooks/") {
			t.Errorf("User-Agent %q", a.UserAgent)
		}
	}
	if retried == 0 {
		t.Error("no attempt met the receiver down: the outage was not tested")
	}
	for _, p := range ps {
		if len(p.Events) > 7 {
			t.Errorf("delivery %s has %d events; the batch size is 7", p.ID, len(p.Events))
		}
	}
	if got := outcome(t, reg, "retry"); got < 1 {
		t.Errorf("retry outcomes counted: %v", got)
	}
}

// outcome is the count of tether_webhook_deliveries_total with the
// outcome in reg.
func outcome(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "tether_webhook_deliveries_total" && l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestWebhooksFailingEndpointAndReplay: retries end after RetryFor, the
// endpoint becomes failing and is sent nothing more; a replay re-enables
// it and what it missed arrives, under a new delivery id.
func TestWebhooksFailingEndpointAndReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := webhooktest.New(t)
	rcv.SetDown(true)
	w := e.endpoint(rcv, webhook.Filter{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(lifecycle.NewWebhookCollector(e.st))
	e.webhooks(lifecycle.WebhookConfig{AllowPrivate: true, RetryFor: 300 * time.Millisecond}, reg)
	e.create("")

	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := e.st.Webhook(e.ctx, "acme", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == webhook.StateFailing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the endpoint never became failing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The worker counts the outcome once the attempt's record (which made
	// the endpoint failing) has committed: a moment after the read above.
	for outcome(t, reg, "failed") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := outcome(t, reg, "failed"); got != 1 {
		t.Errorf("failed outcomes = %v; want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "tether_webhook_endpoints_failing"); err != nil || n != 1 {
		t.Errorf("failing gauge: %d series, %v", n, err)
	}
	tried := len(rcv.Attempts())
	rcv.SetDown(false)
	e.create("")
	time.Sleep(300 * time.Millisecond) // a failing endpoint gets nothing: there is no event to wait for
	if got := len(rcv.Attempts()); got != tried {
		t.Fatalf("a failing endpoint got %d more requests", got-tried)
	}
	key, _ := e.st.RegisterAPIKey(e.ctx, "acme", "test", "k")
	if _, err := e.st.ReplayWebhook(e.ctx, "acme", w.ID, key.ID, webhook.ReplayFrom{}); err != nil {
		t.Fatal(err)
	}
	all := e.tenantEvents()
	ps := e.waitDelivered(rcv, len(all))
	checkExactlyOnce(t, ps, all)
	if ps[0].ID == rcv.Attempts()[0].Delivery {
		t.Error("the replay reused the failed delivery's id")
	}
}

// TestWebhooksRefusePrivateAddressesWhenDialling: an endpoint whose address
// is loopback (as a host that resolved elsewhere at create time could be
// by now) is never reached unless the operator allows private addresses:
// the dialler checks the address it connects to.
func TestWebhooksRefusePrivateAddressesWhenDialling(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := webhooktest.New(t)
	w := e.endpoint(rcv, webhook.Filter{})
	e.webhooks(lifecycle.WebhookConfig{}, nil)
	e.create("")
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := e.st.WebhookDeliveries(e.ctx, w.ID, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].Attempts >= 2 {
			if !strings.Contains(ds[0].Error, "forbidden address") || ds[0].ResponseStatus != 0 {
				t.Fatalf("delivery error = %q, status %d; want a refused dial", ds[0].Error, ds[0].ResponseStatus)
			}
			// The tenant reads the error: it says what was refused, not
			// the address its host resolved to.
			if strings.Contains(ds[0].Error, "127.0.0.1") {
				t.Fatalf("delivery error = %q; it names the address dialled", ds[0].Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries = %+v", ds)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(rcv.Attempts()); n != 0 {
		t.Fatalf("the receiver on loopback was reached %d times", n)
	}
}

// TestWebhooksDeliverReleases: a sandbox ended by a delete, by its TTL or
// by its owner's lapse (the janitor), then released by the executor's
// release worker, and one never claimed, released by its delete itself,
// each get exactly one sandbox.released event, delivered after their
// terminal event and carrying when the release was recorded; a sandbox
// still ready gets none.
func TestWebhooksDeliverReleases(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	rcv := webhooktest.New(t)
	e.endpoint(rcv, webhook.Filter{})
	deleted := e.ready()
	expiring := e.ready(func(p *domain.CreateParams) { p.TTL = 5 * time.Second })
	lapsing := e.ready(owned("lapsing", 5*time.Second))
	kept := e.ready(func(p *domain.CreateParams) { p.TTL = time.Hour })
	queued := e.create("")
	for _, sb := range []domain.Sandbox{deleted, queued} {
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(6 * time.Second)
	if rep := e.sweep(); rep.Expired != 1 || rep.OwnerExpired != 1 {
		t.Fatalf("sweep: %+v; want one expired, one owner expired", rep)
	}
	e.executor(lifecycle.ExecutorConfig{})
	e.webhooks(lifecycle.WebhookConfig{AllowPrivate: true}, nil)
	ended := map[string]domain.Reason{deleted.ID: domain.ReasonRequested, queued.ID: domain.ReasonRequested,
		expiring.ID: domain.ReasonExpired, lapsing.ID: domain.ReasonOwnerExpired}
	releasedAt := map[string]time.Time{}
	for id := range ended {
		releasedAt[id] = *e.waitFor(id, "released", isReleased).ReleasedAt
	}
	all := e.tenantEvents()
	ps := e.waitDelivered(rcv, len(all))
	checkExactlyOnce(t, ps, all)

	bySandbox := map[string][]webhook.Event{}
	for _, ev := range webhooktest.Events(ps) {
		bySandbox[ev.SandboxID] = append(bySandbox[ev.SandboxID], ev)
	}
	for id, reason := range ended {
		evs := bySandbox[id]
		releases := 0
		for _, ev := range evs {
			if ev.Type == string(domain.EventReleased) {
				releases++
			}
		}
		n := len(evs)
		if releases != 1 || n < 2 {
			t.Errorf("%s: %d releases in %d events; want 1", id, releases, n)
			continue
		}
		rel, end := evs[n-1], evs[n-2]
		if rel.Type != string(domain.EventReleased) || end.Type != string(domain.EventStateChanged) || !domain.State(end.To).Terminal() {
			t.Errorf("%s: last events %+v, %+v; want the terminal state change, then the release", id, end, rel)
		}
		if rel.To != end.To || deref(rel.Reason) != string(reason) || !rel.At.Equal(releasedAt[id]) || rel.ID <= end.ID {
			t.Errorf("%s: release %+v; want %s/%s at %v after event %d", id, rel, end.To, reason, releasedAt[id], end.ID)
		}
	}
	for _, ev := range bySandbox[kept.ID] {
		if ev.Type != string(domain.EventStateChanged) {
			t.Errorf("the ready sandbox got a %s event", ev.Type)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// slowReceiver answers every delivery 204 after delay, and counts the
// requests in flight: in all and per path (one path per endpoint).
type slowReceiver struct {
	*httptest.Server
	delay time.Duration

	mu                 sync.Mutex
	now, most, perPath int
	paths              map[string]int
	// release ends the requests under way (letGo).
	release     chan struct{}
	releaseOnce sync.Once
}

// letGo answers every request under way and every later one at once.
func (r *slowReceiver) letGo() { r.releaseOnce.Do(func() { close(r.release) }) }

func newSlowReceiver(t *testing.T, delay time.Duration) *slowReceiver {
	r := &slowReceiver{delay: delay, paths: map[string]int{}, release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.now++
		r.paths[req.URL.Path]++
		r.most, r.perPath = max(r.most, r.now), max(r.perPath, r.paths[req.URL.Path])
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.now--
			r.paths[req.URL.Path]--
			r.mu.Unlock()
		}()
		_, _ = io.Copy(io.Discard, req.Body)
		select {
		case <-time.After(r.delay):
		case <-req.Context().Done():
		case <-r.release:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() {
		r.letGo() // Close waits for the requests under way
		r.Close()
	})
	return r
}

func (r *slowReceiver) inFlight() (now, most, perPath int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now, r.most, r.perPath
}

// TestWebhooksShareTheSlots: one tenant with ten endpoints whose receiver
// never answers while the test runs (never failing, so never backing off),
// kept busy with new events, holds at most its share of the delivery
// slots (one delivery per endpoint at a time), and another tenant's
// deliveries still arrive: they once waited for the slow ones' round to
// end, and behind slots the slow tenant held all of. The receiver holds
// every request past the attempts' timeout, so that an unfair worker
// cannot deliver the other tenant's events within the test's deadline
// however fast the machine, and a fair one does however slow.
func TestWebhooksShareTheSlots(t *testing.T) {
	t.Parallel()
	e := setup(t)
	slow := newSlowReceiver(t, time.Hour)
	key, err := e.st.RegisterAPIKey(e.ctx, "slow", "test", "k-slow")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := e.st.CreateWebhook(e.ctx, webhook.NewEndpoint{Tenant: "slow", URL: fmt.Sprintf("%s/hook/%d", slow.URL, i), By: key.ID, Max: 10}); err != nil {
			t.Fatal(err)
		}
	}
	rcv := webhooktest.New(t)
	e.endpoint(rcv, webhook.Filter{})
	e.webhooks(lifecycle.WebhookConfig{AllowPrivate: true, Timeout: time.Minute}, nil)
	t.Cleanup(slow.letGo) // before the worker's stop, which waits for its deliveries

	// The slow tenant's sandboxes keep coming, so each of its endpoints
	// always has a delivery waiting.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			e.create("", func(p *domain.CreateParams) { p.Tenant = "slow" })
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if now, _, _ := slow.inFlight(); now >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow tenant's deliveries never started")
		}
	}
	var worst time.Duration
	for range 5 {
		sb := e.create("")
		began := time.Now()
		for delivered := false; !delivered; time.Sleep(5 * time.Millisecond) {
			ps, err := rcv.Delivered()
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range webhooktest.Events(ps) {
				delivered = delivered || ev.SandboxID == sb.ID
			}
			if time.Since(began) > 20*time.Second {
				t.Fatal("acme's delivery did not arrive while the slow tenant's deliveries were under way")
			}
		}
		worst = max(worst, time.Since(began))
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("acme's worst delivery beside the slow tenant's: %s", worst)
	if _, most, perPath := slow.inFlight(); most > 2 || perPath > 1 {
		t.Errorf("the slow tenant held %d slots at once (%d on one endpoint); want at most its share, 2 of 8 (one per endpoint)", most, perPath)
	}
}
