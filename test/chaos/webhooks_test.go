package chaos

// TestChaosWebhooks is the storm with a webhook endpoint: a receiver on
// loopback (webhooktest: it verifies every request's Tether-Signature),
// registered by replicas that allow private addresses
// (WEBHOOK_ALLOW_PRIVATE=true), and 1,000 sim sandbox lifecycles (cancels,
// deletes, TTL expiries, failed creates, owners that lapse or release)
// while replicas are kill -9ed, Postgres crashes once and the receiver is
// down (503) for 30 s; then every replica is kill -9ed while one holds a
// delivery in flight (a proxy keeps it unanswered), which another must
// send again, the same. After the settle it checks, against the event
// history: every event was delivered, under exactly one idempotency key
// (deduped by key, no event is in two deliveries and none is missing or
// invented), each event as the history has it, every sandbox's events in
// order, every retry of a key with the same bytes, every request signed
// right (and a tampered body or another secret fails the check), and the
// endpoint still active with no delivery given up. A replica without
// WEBHOOK_ALLOW_PRIVATE refuses SSRF targets at create.
//
//	go test -count=1 ./test/chaos -run 'TestChaosWebhooks$' -v
//	go test -count=1 ./test/chaos -run 'TestChaosWebhooks$' -chaos.webhooks.sandboxes=5000 -v   # longer
//	go test -count=1 ./test/chaos -run 'TestChaosWebhooks$' -chaos.seed=N -v   # replay a run's storm

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/webhook"
	"github.com/tetherhq/tether/internal/webhook/webhooktest"
	"github.com/tetherhq/tether/test/harness"
)

var (
	webhookSandboxes = flag.Int("chaos.webhooks.sandboxes", 1000, "sandbox lifecycles (TestChaosWebhooks)")
	receiverDownFor  = flag.Duration("chaos.webhooks.down", 30*time.Second, "how long the receiver is down (TestChaosWebhooks)")
)

// receiverDownAt is when, into the storm, the receiver goes down.
const receiverDownAt = 2 * time.Second

func TestChaosWebhooks(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	seed := uint64(*seedFlag)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	h := newChaos(t, seed, 0)
	w := &webhookChaos{chaos: h, rcv: webhooktest.New(t)}
	w.proxy = newHoldProxy(t, w.rcv.URL)
	w.checkSSRF()
	w.startReplicas()
	w.register()
	w.storm()
	w.killSender()
	w.settle()
	w.check()
}

type webhookChaos struct {
	*chaos
	rcv      *webhooktest.Receiver
	proxy    *holdProxy // in front of rcv: the endpoint's URL
	endpoint string     // its id
	secret   string
	held     heldRequest // the attempt whose sender was killed

	made         atomic.Int64 // sandboxes accepted
	downFrom     time.Time
	downTo       time.Time
	settledAfter time.Duration // from the storm's end to every event delivered
}

// env is the replicas' environment: the sim, short timeouts, and webhook
// retries that stay short (a random wait up to 1 s doubled per attempt, at
// most 2 s) and go on long enough to outlast the receiver's downtime.
func (w *webhookChaos) env() []string {
	return []string{
		"DATABASE_URL=" + w.dbURL,
		"BOOTSTRAP_API_KEY=" + apiKey,
		"PROVIDERS=sim",
		"SIM_STATE_DIR=" + w.simDir,
		"JANITOR_INTERVAL=" + janitorInterval.String(),
		"DEFAULT_OWNER_TTL=2s",
		"DEFAULT_TTL=3s",
		"CREATE_TIMEOUT=15s",
		"EXECUTOR_LEASE=2s",
		"EXECUTOR_POLL_INTERVAL=250ms",
		"EXECUTOR_MAX_BACKOFF=2s",
		"ORPHAN_GRACE=2s",
		"SHUTDOWN_TIMEOUT=2s",
		"DB_MAX_CONNS=8",
		"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
		"WEBHOOK_TIMEOUT=2s",
		"WEBHOOK_MAX_BACKOFF=2s",
		"WEBHOOK_RETRY_FOR=10m",
	}
}

// checkSSRF starts a replica that does not allow private addresses (the
// default) and checks that it refuses every internal target at create,
// writing nothing. It is stopped before the endpoint exists, so that it
// never takes part in a delivery.
func (w *webhookChaos) checkSSRF() {
	t := w.t
	r := harness.NewReplica(t, w.bin, filepath.Join(w.logDir, "guard.log"), w.env()...)
	r.Start()
	defer r.Stop()
	r.WaitReady(60 * time.Second)
	rcvURL, err := url.Parse(w.rcv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := rcvURL.Port()
	c := harness.Client{Key: apiKey, HTTP: client}
	for _, target := range []string{
		"http://169.254.169.254/latest/meta-data/", // cloud metadata
		"http://[fd00:ec2::254]/",                  // its IPv6 spelling
		"http://10.1.2.3/hook",                     // private
		"http://192.168.0.1:8080/hook",
		"http://172.16.5.4/hook",
		"http://127.0.0.1:" + port + "/", // the receiver itself: loopback
		"http://localhost:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/", // IPv4-mapped
		"http://0.0.0.0:" + port + "/",
	} {
		code, body, err := c.Do(http.MethodPost, r.URL()+"/v1/webhooks", map[string]any{"url": target})
		if err != nil {
			t.Fatalf("POST /v1/webhooks %s: %v", target, err)
		}
		if code != http.StatusForbidden || body["code"] != "FORBIDDEN" {
			t.Errorf("POST /v1/webhooks %s without WEBHOOK_ALLOW_PRIVATE: %d %v, want 403 FORBIDDEN", target, code, body)
		}
	}
	code, body, err := c.Do(http.MethodGet, r.URL()+"/v1/webhooks", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/webhooks: %d %v %v", code, body, err)
	}
	if items, _ := body["webhooks"].([]any); len(items) != 0 {
		t.Errorf("refused creates wrote endpoints: %v", items)
	}
}

func (w *webhookChaos) startReplicas() {
	env := append(w.env(), "WEBHOOK_ALLOW_PRIVATE=true")
	for i := range *nReplicas {
		r := harness.NewReplica(w.t, w.bin, filepath.Join(w.logDir, fmt.Sprintf("replica-%d.log", i)), env...)
		w.replicas = append(w.replicas, r)
		r.Start()
	}
	for _, r := range w.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// register makes the endpoint, every event, and gives the receiver its
// secret.
func (w *webhookChaos) register() {
	code, body := w.call(http.MethodPost, "/v1/webhooks", map[string]any{"url": w.proxy.URL + "/hook", "description": "chaos"})
	if code != http.StatusCreated {
		w.t.Fatalf("POST /v1/webhooks %s: %d %v", w.rcv.URL, code, body)
	}
	wh, _ := body["webhook"].(map[string]any)
	w.endpoint, _ = wh["id"].(string)
	w.secret, _ = body["secret"].(string)
	if w.endpoint == "" || w.secret == "" {
		w.t.Fatalf("POST /v1/webhooks: no id or secret in %v", body)
	}
	w.rcv.SetSecret(w.secret)
}

// createBody is a short-lived sim sandbox: most end by their TTL, some
// fail their create (once, retryably, or for good), some are owned.
func (w *webhookChaos) createBody() map[string]any {
	params := map[string]any{"create_delay_ms": w.intn(150)}
	switch n := w.intn(20); {
	case n < 2:
		params["fail"] = "create_once"
	case n < 3:
		params["fail"] = "create"
	case n < 4:
		params["fail"] = "destroy_once"
	}
	body := map[string]any{"params": params, "ttl_seconds": 1 + w.intn(3)}
	if w.intn(4) == 0 {
		if o := w.randomOwner(); o != "" {
			body["owner"] = o
			delete(body, "ttl_seconds")
		}
	}
	return body
}

// take counts one more sandbox, unless the run has made them all.
func (w *webhookChaos) take() bool {
	if w.made.Add(1) > int64(*webhookSandboxes) {
		w.made.Add(-1)
		return false
	}
	return true
}

// createLoop makes sandboxes until the run has made them all; a quarter
// are deleted soon after (some before they are ready).
func (w *webhookChaos) createLoop(ctx context.Context) {
	for ctx.Err() == nil && w.take() {
		code, sb := w.call(http.MethodPost, "/v1/sandboxes", w.createBody())
		if code != http.StatusAccepted {
			w.made.Add(-1) // not made: try again
			time.Sleep(50 * time.Millisecond)
			continue
		}
		id := sb["id"].(string)
		w.created.Store(id, struct{}{})
		if w.intn(4) == 0 {
			time.Sleep(w.between(0, 400*time.Millisecond))
			w.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
		}
		time.Sleep(w.between(5*time.Millisecond, 30*time.Millisecond))
	}
}

// ownerLoop plays owners: each comes into being with a sandbox, heartbeats
// a little, then lapses (owner_expired) or releases itself
// (owner_released).
func (w *webhookChaos) ownerLoop(ctx context.Context, n int) {
	for i := 0; ctx.Err() == nil && w.take(); i++ {
		name := fmt.Sprintf("owner-%d-%d", n, i)
		code, sb := w.call(http.MethodPost, "/v1/sandboxes", map[string]any{"owner": name, "params": map[string]any{"create_delay_ms": w.intn(100)}})
		if code != http.StatusAccepted {
			w.made.Add(-1)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		w.created.Store(sb["id"].(string), struct{}{})
		w.liveOwners.Store(name, struct{}{})
		for range 1 + w.intn(3) {
			time.Sleep(500 * time.Millisecond)
			w.call(http.MethodPut, "/v1/owners/"+name+"/lease", map[string]any{"ttl_seconds": 2})
		}
		w.liveOwners.Delete(name)
		if w.intn(2) == 0 {
			w.call(http.MethodDelete, "/v1/owners/"+name, nil)
		}
	}
}

// storm runs until every sandbox is made and the receiver is back: the
// creates, kill -9s of replicas, a Postgres crash a few seconds in, and
// the receiver down from receiverDownAt for receiverDownFor.
func (w *webhookChaos) storm() {
	ctx, cancel := context.WithCancel(w.t.Context())
	defer cancel()
	var makers, faults sync.WaitGroup
	for range w.clients {
		makers.Go(func() { w.createLoop(ctx) })
	}
	for i := range 2 {
		makers.Go(func() { w.ownerLoop(ctx, i) })
	}
	faults.Go(func() { w.killLoop(ctx) })
	faults.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(receiverDownAt + *receiverDownFor/3):
		}
		w.pgDown = time.Now()
		harness.Postgres(w.t, "stop", w.cluster, "TETHER_PG_STOP_MODE=immediate")
		time.Sleep(time.Second)
		harness.Postgres(w.t, "start", w.cluster)
		w.pgUp = time.Now()
	})
	time.Sleep(receiverDownAt)
	w.downFrom = time.Now()
	w.rcv.SetDown(true)
	time.Sleep(*receiverDownFor)
	w.rcv.SetDown(false)
	w.downTo = time.Now()
	makers.Wait()
	cancel()
	faults.Wait()
	for _, r := range w.replicas {
		if !r.Alive() {
			r.Start()
		}
	}
	for _, r := range w.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// killSender kill -9s every replica while one holds a delivery in
// flight (the proxy keeps its request unanswered), then restarts them: the
// delivery's lease lapses and another replica must send it again, under
// the same id and with the same bytes. One more sandbox makes sure there
// is something to deliver.
func (w *webhookChaos) killSender() {
	w.proxy.armed.Store(true)
	if code, body := w.call(http.MethodPost, "/v1/sandboxes", map[string]any{"ttl_seconds": 1}); code != http.StatusAccepted {
		w.t.Fatalf("create: %d %v", code, body)
	}
	select {
	case w.held = <-w.proxy.held:
	case <-time.After(30 * time.Second):
		w.t.Fatal("no delivery reached the receiver within 30s of a new sandbox")
	}
	for _, r := range w.replicas {
		r.Kill()
	}
	w.kills.Add(int64(len(w.replicas)))
	w.proxy.unblock()
	for _, r := range w.replicas {
		r.Start()
	}
	for _, r := range w.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// heldRequest is a delivery attempt the proxy held.
type heldRequest struct {
	delivery string
	body     []byte
}

// holdProxy forwards each request to the receiver as it came, except,
// once armed, the next one: it holds that one unanswered until released,
// then drops it (its sender is dead by then).
type holdProxy struct {
	*httptest.Server
	target  string
	armed   atomic.Bool
	held    chan heldRequest
	release chan struct{}
	once    sync.Once
}

// unblock lets the held request end.
func (p *holdProxy) unblock() { p.once.Do(func() { close(p.release) }) }

func newHoldProxy(t *testing.T, target string) *holdProxy {
	p := &holdProxy{target: target, held: make(chan heldRequest, 1), release: make(chan struct{})}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() { p.unblock(); p.Close() })
	return p
}

func (p *holdProxy) serve(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		rw.WriteHeader(http.StatusBadRequest)
		return
	}
	if p.armed.CompareAndSwap(true, false) {
		p.held <- heldRequest{delivery: req.Header.Get(webhook.HeaderDelivery), body: body}
		<-p.release
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, p.target+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		rw.WriteHeader(http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		rw.WriteHeader(http.StatusBadGateway)
		return
	}
	_ = resp.Body.Close()
	rw.WriteHeader(resp.StatusCode)
}

// historyEvent is an event as the history holds it: a state change, or a
// release (type sandbox.released, kept beside the state history).
type historyEvent struct {
	id             int64
	typ            string
	sandbox        string
	from, to       string
	reason, actor  string
	state          domain.State // the sandbox's, now
	released, live bool
}

func (w *webhookChaos) history(ctx context.Context, conn *pgx.Conn) ([]historyEvent, error) {
	rows, err := conn.Query(ctx, `
		SELECT e.id, e.type, e.sandbox_id, coalesce(e.from_state, ''), e.to_state, coalesce(e.reason, ''), e.actor, s.state, s.released
		FROM sandbox_outbox e JOIN sandboxes s ON s.id = e.sandbox_id ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	var out []historyEvent
	var e historyEvent
	_, err = pgx.ForEachRow(rows, []any{&e.id, &e.typ, &e.sandbox, &e.from, &e.to, &e.reason, &e.actor, &e.state, &e.released}, func() error {
		e.live = !e.state.Terminal() || !e.released
		out = append(out, e)
		return nil
	})
	return out, err
}

// delivered is the set of event ids the receiver acknowledged.
func (w *webhookChaos) deliveredIDs() map[int64]bool {
	got := map[int64]bool{}
	for _, a := range w.rcv.Attempts() {
		if a.Answered/100 == 2 {
			for _, e := range a.Payload.Events {
				got[e.ID] = true
			}
		}
	}
	return got
}

// settle waits until every sandbox has ended and been released, and the
// receiver has acknowledged every event of the history.
func (w *webhookChaos) settle() {
	ctx := w.t.Context()
	conn, err := pgx.Connect(ctx, w.dbURL)
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		hist, err := w.history(ctx, conn)
		if err != nil {
			w.t.Fatal(err)
		}
		live, undelivered := 0, 0
		got := w.deliveredIDs()
		for _, e := range hist {
			if e.live {
				live++
			}
			if !got[e.id] {
				undelivered++
			}
		}
		if live == 0 && undelivered == 0 {
			w.settledAfter = time.Since(start)
			return
		}
		if time.Now().After(deadline) {
			w.t.Logf("not settled after 2m: %d events of live or unreleased sandboxes, %d events undelivered", live, undelivered)
			return // check reports the details
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *webhookChaos) check() {
	t, ctx := w.t, w.t.Context()
	conn, err := pgx.Connect(ctx, w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	hist, err := w.history(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	attempts := w.rcv.Attempts()

	// Every request was signed right, and every attempt of one delivery
	// id carried the same bytes.
	payloads, err := w.rcv.Delivered()
	if err != nil {
		t.Errorf("deliveries: %v", err)
	}
	w.checkSignatures(attempts)

	// Deduped by key: each event is in exactly one delivery, appears as
	// the history has it, and each sandbox's events come in order.
	byID := map[int64]historyEvent{}
	for _, e := range hist {
		byID[e.id] = e
	}
	inDelivery := map[int64]string{}
	last := map[string]int64{}
	var twice, invented, wrong, disordered, unended []string
	reasons := map[string]int{}
	// A release comes after its sandbox's terminal event.
	ended := map[string]bool{}
	releases := 0
	for _, p := range payloads {
		for _, e := range p.Events {
			if other, ok := inDelivery[e.ID]; ok {
				twice = append(twice, fmt.Sprintf("%d in %s and %s", e.ID, other, p.ID))
				continue
			}
			inDelivery[e.ID] = p.ID
			h, ok := byID[e.ID]
			if !ok {
				invented = append(invented, fmt.Sprint(e.ID))
				continue
			}
			if e.Type != h.typ || e.SandboxID != h.sandbox || e.To != h.to || deref(e.From) != h.from || deref(e.Reason) != h.reason || e.Actor != h.actor {
				wrong = append(wrong, fmt.Sprintf("%d: got %s %s>%s %s, history %s %s>%s %s", e.ID,
					e.SandboxID, deref(e.From), e.To, deref(e.Reason), h.sandbox, h.from, h.to, h.reason))
			}
			if e.ID <= last[e.SandboxID] {
				disordered = append(disordered, fmt.Sprintf("%s: %d after %d", e.SandboxID, e.ID, last[e.SandboxID]))
			}
			last[e.SandboxID] = max(last[e.SandboxID], e.ID)
			reasons[cmp.Or(deref(e.Reason), e.To)]++
			if e.Type == string(domain.EventReleased) {
				releases++
				if !ended[e.SandboxID] {
					unended = append(unended, fmt.Sprintf("%d (%s)", e.ID, e.SandboxID))
				}
			}
			if domain.State(e.To).Terminal() {
				ended[e.SandboxID] = true
			}
		}
	}
	var missing []string
	for _, e := range hist {
		if _, ok := inDelivery[e.id]; !ok {
			missing = append(missing, fmt.Sprintf("%d (%s %s>%s)", e.id, e.sandbox, e.from, e.to))
		}
	}

	// Per key: how often each delivery was sent, and what the receiver
	// answered while down.
	sends := map[string]int{}
	refused := 0
	for _, a := range attempts {
		sends[a.Delivery]++
		if a.Answered/100 != 2 {
			refused++
		}
	}
	retried, maxSends := 0, 0
	for _, n := range sends {
		if n > 1 {
			retried++
		}
		maxSends = max(maxSends, n)
	}
	var total, live, released, failedDeliveries int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT (state IN ('cancelled', 'terminated', 'failed') AND released)),
		count(*) FILTER (WHERE released) FROM sandboxes`).Scan(&total, &live, &released); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'`).Scan(&failedDeliveries); err != nil {
		t.Fatal(err)
	}
	// The delivery whose sender was killed came again, the same.
	resent := 0
	for _, a := range attempts {
		if a.Delivery == w.held.delivery && a.Answered/100 == 2 {
			resent++
			if !bytes.Equal(a.Body, w.held.body) {
				t.Errorf("delivery %s was sent again with other bytes:\n%s\n%s", a.Delivery, w.held.body, a.Body)
			}
		}
	}
	if resent == 0 {
		t.Errorf("delivery %s, in flight when every replica was killed, was never acknowledged after", w.held.delivery)
	}
	code, wh := w.call(http.MethodGet, "/v1/webhooks/"+w.endpoint, nil)
	state, _ := wh["state"].(string)

	summary := fmt.Sprintf("chaos webhooks: sandboxes=%d releases=%d events=%d deliveries=%d attempts=%d retried=%d max_attempts=%d refused_while_down=%d receiver_down=%s kills=%d pg_restarts=%d delivered_events=%d missing=%d twice=%d invented=%d mismatched=%d out_of_order=%d failed_deliveries=%d resent_after_sender_killed=%d endpoint=%s settle=%s reasons=%v",
		total, releases, len(hist), len(payloads), len(attempts), retried, maxSends, refused, w.downTo.Sub(w.downFrom).Round(time.Second),
		w.kills.Load(), boolInt(!w.pgUp.IsZero()), len(inDelivery), len(missing), len(twice), len(invented), len(wrong), len(disordered),
		failedDeliveries, resent, state, w.settledAfter.Round(100*time.Millisecond), reasons)
	fmt.Println(summary)
	t.Log(summary)

	fail := func(what string, items []string) {
		if len(items) > 0 {
			t.Errorf("%s (%d): %v", what, len(items), items[:min(len(items), 10)])
		}
	}
	fail("events never delivered", missing)
	fail("events in two deliveries (two idempotency keys)", twice)
	fail("delivered events the history lacks", invented)
	fail("events delivered otherwise than the history has them", wrong)
	fail("a sandbox's events out of order", disordered)
	fail("releases delivered before their sandbox's terminal event", unended)
	if releases != released {
		t.Errorf("delivered %d releases; %d sandboxes are released", releases, released)
	}
	if live > 0 {
		t.Errorf("%d sandboxes not ended and released after the settle", live)
	}
	// A create whose replica died before it answered may have been made
	// all the same: at least as many as asked for.
	if total < *webhookSandboxes {
		t.Errorf("the storm made %d sandboxes, want %d", total, *webhookSandboxes)
	}
	if refused == 0 {
		t.Errorf("no attempt was refused while the receiver was down %s: the downtime proved nothing", *receiverDownFor)
	}
	if failedDeliveries > 0 || code != http.StatusOK || state != string(webhook.StateActive) {
		t.Errorf("endpoint %s: GET %d, state %q, %d deliveries failed; want active and none failed", w.endpoint, code, state, failedDeliveries)
	}
	for _, r := range w.replicas {
		if b, err := os.ReadFile(r.LogPath); err == nil && bytes.Contains(b, []byte("panic")) {
			t.Errorf("a replica panicked; log in %s", r.LogPath)
		}
	}
}

// checkSignatures checks that a receiver can tell a forged delivery: the
// signature of a real one verifies, and fails for a tampered body, another
// secret, or a signature of another time.
func (w *webhookChaos) checkSignatures(attempts []webhooktest.Attempt) {
	t := w.t
	var a *webhooktest.Attempt
	for i := range attempts {
		if len(attempts[i].Payload.Events) > 0 {
			a = &attempts[i]
			break
		}
	}
	if a == nil {
		t.Error("no delivery to check signatures on")
		return
	}
	now := time.Now()
	if err := webhook.Verify(w.secret, a.Signature, a.Body, time.Hour, now); err != nil {
		t.Errorf("delivery %s: its own signature does not verify: %v", a.Delivery, err)
	}
	tampered := bytes.Replace(a.Body, []byte(`"to":"`), []byte(`"to":"x`), 1)
	if bytes.Equal(tampered, a.Body) {
		t.Fatalf("delivery %s has no event to tamper with: %s", a.Delivery, a.Body)
	}
	if webhook.Verify(w.secret, a.Signature, tampered, time.Hour, now) == nil {
		t.Errorf("delivery %s: a tampered body verifies", a.Delivery)
	}
	if webhook.Verify("whsec_another", a.Signature, a.Body, time.Hour, now) == nil {
		t.Errorf("delivery %s: verifies under another secret", a.Delivery)
	}
	ts, sig, _ := strings.Cut(a.Signature, ",")
	if webhook.Verify(w.secret, ts+"1,"+sig, a.Body, 1000*time.Hour, now) == nil {
		t.Errorf("delivery %s: verifies with another timestamp", a.Delivery)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
