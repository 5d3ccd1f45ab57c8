package http_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/webhook"
	"github.com/tetherhq/tether/internal/webhook/webhooktest"
)

type webhookJSON struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	Description string `json:"description"`
	Events      struct {
		States  []string `json:"states"`
		Reasons []string `json:"reasons"`
		Types   []string `json:"types"`
	} `json:"events"`
	State        string     `json:"state"`
	FailingSince *time.Time `json:"failing_since"`
	Cursor       string     `json:"cursor"`
	CreatedBy    *string    `json:"created_by"`
}

type createdWebhook struct {
	Webhook webhookJSON `json:"webhook"`
	Secret  string      `json:"secret"`
}

type deliveryJSON struct {
	ID             string  `json:"id"`
	WebhookID      string  `json:"webhook_id"`
	Status         string  `json:"status"`
	EventIDs       []int64 `json:"event_ids"`
	Attempts       int     `json:"attempts"`
	ResponseStatus *int    `json:"response_status"`
	Error          *string `json:"error"`
}

type deliveryList struct {
	Items      []deliveryJSON `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

func (b *bundle) createWebhook(t *testing.T, key string, body any) createdWebhook {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/webhooks", body, as(key))
	wantStatus(t, r, http.StatusCreated)
	var w createdWebhook
	r.decode(t, &w)
	if r.Header.Get("Location") != "/v1/webhooks/"+w.Webhook.ID || r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", r.Header)
	}
	return w
}

// allowPrivate lets endpoint URLs name loopback, for receivers the tests
// run.
func allowPrivate() option {
	return withConfig(func(c *httpapi.Config) { c.WebhookAllowPrivate = true })
}

// TestWebhookEndpoints: create shows the secret once; list and get show
// the endpoint without it, to its tenant only; delete removes it.
func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, allowPrivate())
	w := b.createWebhook(t, keyA, map[string]any{"url": "http://127.0.0.1:9/hook", "description": "ops",
		"events": map[string]any{"states": []string{"terminated", "failed", "terminated"}, "reasons": []string{"owner_expired"},
			"types": []string{"sandbox.released", "sandbox.released"}}})
	if !strings.HasPrefix(w.Secret, "whsec_") || w.Webhook.State != "active" || w.Webhook.Description != "ops" ||
		strings.Join(w.Webhook.Events.States, ",") != "terminated,failed" || strings.Join(w.Webhook.Events.Types, ",") != "sandbox.released" ||
		w.Webhook.CreatedBy == nil {
		t.Fatalf("created %+v", w)
	}
	plain := b.createWebhook(t, keyA, `{"url":"https://127.0.0.1/x"}`)
	if plain.Webhook.Events.States == nil || len(plain.Webhook.Events.States) != 0 || plain.Webhook.Events.Types == nil || len(plain.Webhook.Events.Types) != 0 {
		t.Errorf("no filter: %+v; want empty lists", plain.Webhook.Events)
	}
	r := b.do(t, http.MethodGet, "/v1/webhooks", nil)
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), w.Secret) || strings.Contains(string(r.Body), "whsec_") {
		t.Fatal("the list shows a secret")
	}
	var list struct{ Items []webhookJSON }
	r.decode(t, &list)
	if len(list.Items) != 2 || list.Items[0].ID != w.Webhook.ID {
		t.Fatalf("list = %+v", list)
	}
	r = b.do(t, http.MethodGet, "/v1/webhooks/"+w.Webhook.ID, nil)
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), "whsec_") {
		t.Fatal("get shows the secret")
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/webhooks/"+w.Webhook.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/webhooks/"+w.Webhook.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	r = b.do(t, http.MethodGet, "/v1/webhooks", nil, as(keyB))
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), w.Webhook.ID) {
		t.Fatal("tenant B lists A's endpoint")
	}
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/webhooks/"+w.Webhook.ID, nil), http.StatusOK)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/webhooks/"+w.Webhook.ID, nil), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/webhooks/"+w.Webhook.ID, nil), http.StatusNotFound, "NOT_FOUND")
	r = b.do(t, http.MethodGet, "/v1/webhooks/"+plain.Webhook.ID+"/deliveries", nil)
	wantStatus(t, r, http.StatusOK)
}

// TestWebhookScopeAndCap: a key without manage_keys may do nothing with
// webhooks; the tenant's cap of endpoints holds; neither writes anything.
func TestWebhookScopeAndCap(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *httpapi.Config) { c.WebhookMaxEndpoints = 1; c.WebhookAllowPrivate = true }))
	plain := b.mint(t, keyA, `{"name":"agent"}`)
	w := b.createWebhook(t, keyA, `{"url":"http://127.0.0.1:9/"}`)
	before := b.counts(t)
	id := w.Webhook.ID
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/webhooks", `{"url":"http://127.0.0.1:9/"}`},
		{http.MethodGet, "/v1/webhooks", ""},
		{http.MethodGet, "/v1/webhooks/" + id, ""},
		{http.MethodDelete, "/v1/webhooks/" + id, ""},
		{http.MethodGet, "/v1/webhooks/" + id + "/deliveries", ""},
		{http.MethodPost, "/v1/webhooks/" + id + "/replay", `{}`},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		wantProblem(t, b.do(t, c.method, c.path, body, as(plain.Secret)), http.StatusForbidden, "FORBIDDEN")
	}
	r := b.do(t, http.MethodPost, "/v1/webhooks", `{"url":"http://127.0.0.1:9/"}`)
	wantProblem(t, r, http.StatusTooManyRequests, "QUOTA_EXCEEDED")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("refused requests wrote: %v -> %v", before, after)
	}
	b.createWebhook(t, keyB, `{"url":"http://127.0.0.1:9/"}`) // another tenant's cap
}

// TestWebhookBadInput: malformed requests and URLs to forbidden addresses
// (each class) are the documented 4xx, and write nothing.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	open := setup(t, allowPrivate()) // for an endpoint to replay
	w := open.createWebhook(t, keyA, `{"url":"http://127.0.0.1:9/"}`)
	// An endpoint in b, written directly (b refuses loopback URLs).
	ep, _, err := b.Store.CreateWebhook(context.Background(), webhook.NewEndpoint{Tenant: tenantA, URL: "https://example.com/", By: b.keyID(t, keyA)})
	if err != nil {
		t.Fatal(err)
	}
	before := b.counts(t)
	post := func(body string) *response { return b.do(t, http.MethodPost, "/v1/webhooks", body) }
	for _, body := range []string{
		``, `{}`, `{"url":""}`, `{"url":"ftp://example.com/"}`, `{"url":"example.com"}`, `{"url":"https://u:p@example.com/"}`,
		`{"url":"https://example.com/#x"}`, `{"url":42}`, `{"url":"https://example.com/","extra":1}`,
		`{"url":"https://example.com/","events":{"states":["gone"]}}`, `{"url":"https://example.com/","events":{"reasons":["because"]}}`,
		`{"url":"https://example.com/","events":{"types":["sandbox.deleted"]}}`, `{"url":"https://example.com/","events":{"types":["released"]}}`,
		`{"url":"https://example.com/","events":{"types":"sandbox.released"}}`,
		`{"url":"https://example.com/","events":{"kinds":[]}}`, `{"url":"https://example.com/","description":"a\nb"}`,
		`{"url":"https://example.com/","description":"` + strings.Repeat("x", 201) + `"}`,
		`{"url":"https://does-not-exist.invalid/"}`,
	} {
		wantProblem(t, post(body), http.StatusBadRequest, "INVALID_REQUEST")
	}
	for _, target := range []string{"127.0.0.1", "[::1]", "localhost", "169.254.169.254", "[fe80::1]", "10.0.0.1", "172.16.5.4",
		"192.168.0.10", "[fd00::1]", "0.0.0.0", "[::]", "224.0.0.1", "[ff02::1]", "[::ffff:127.0.0.1]", "100.100.100.200",
		// Every IPv6 form that carries a loopback IPv4 address: IPv4-compatible,
		// -translated, NAT64, 6to4, Teredo.
		"[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::1]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]"} {
		p := wantProblem(t, post(`{"url":"http://`+target+`:8080/hook"}`), http.StatusForbidden, "FORBIDDEN")
		if !strings.Contains(p.Detail, "WEBHOOK_ALLOW_PRIVATE") {
			t.Errorf("%s: detail %q does not say how to allow it", target, p.Detail)
		}
	}
	id := ep.ID
	replay := func(body string) *response { return b.do(t, http.MethodPost, "/v1/webhooks/"+id+"/replay", body) }
	for _, body := range []string{``, `[]`, `{"from_event_id":-1}`, `{"from_event_id":"1"}`, `{"from_event_id":1,"from_delivery_id":"whd_aaaaaaaaaaaaaaaa"}`,
		`{"from_event_id":999999}`, `{"from_delivery_id":"nope"}`, `{"from_delivery_id":"whd_aaaaaaaaaaaaaaaa"}`, `{"x":1}`} {
		wantProblem(t, replay(body), http.StatusBadRequest, "INVALID_REQUEST")
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/webhooks/"+w.Webhook.ID+"/replay", `{}`), http.StatusNotFound, "NOT_FOUND") // another server's
	for _, path := range []string{"/v1/webhooks/nope", "/v1/webhooks/wh_AAAAAAAAAAAAAAAA", "/v1/webhooks/wh_aaaaaaaaaaaaaaaa/deliveries"} {
		wantProblem(t, b.do(t, http.MethodGet, path, nil), http.StatusNotFound, "NOT_FOUND")
	}
	for _, q := range []string{"?limit=0", "?limit=501", "?cursor=x", "?cursor=0", "?after=1"} {
		wantProblem(t, b.do(t, http.MethodGet, "/v1/webhooks/"+id+"/deliveries"+q, nil), http.StatusBadRequest, "INVALID_REQUEST")
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/webhooks?x=1", nil), http.StatusBadRequest, "INVALID_REQUEST")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("bad input wrote: %v -> %v", before, after)
	}
}

// TestWebhookDeliveriesThroughTheAPI: sandboxes' lifecycles through the
// API, run by the real executor over the sim provider, while the receiver
// is down for a while: every event arrives once per delivery id, in order
// per sandbox, signed with the secret the create returned (and a tampered
// body fails the check); the history shows the retries; a replay from an
// event resends from there.
func TestWebhookDeliveriesThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), allowPrivate())
	rcv := webhooktest.New(t)
	rcv.SetDown(true)
	w := b.createWebhook(t, keyA, map[string]any{"url": rcv.URL + "/hooks"})
	rcv.SetSecret(w.Secret)
	worker := lifecycle.NewWebhooks(lifecycle.WebhookConfig{AllowPrivate: true, PollInterval: 20 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, BatchSize: 5},
		b.Store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	worker.Start(context.Background())
	t.Cleanup(func() { worker.Stop(context.Background()) })

	const n = 20
	var ids []string
	for range n {
		ids = append(ids, b.create(t, keyA, `{}`).ID)
	}
	b.create(t, keyB, `{}`) // another tenant's: never delivered here
	for _, id := range ids {
		r := b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", nil)
		wantStatus(t, r, http.StatusOK)
		wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+id, nil), http.StatusAccepted)
	}
	eventually(t, 20*time.Second, "an attempt against the receiver down", func() bool { return len(rcv.Attempts()) > 0 })
	rcv.SetDown(false)
	want := n * 5 // requested, creating, ready, terminated, then the release
	var got []webhook.Event
	eventually(t, 30*time.Second, fmt.Sprintf("%d events delivered", want), func() bool {
		ps, err := rcv.Delivered()
		if err != nil {
			t.Fatal(err)
		}
		got = webhooktest.Events(ps)
		return len(got) >= want
	})
	seen := map[int64]bool{}
	last := map[string]int64{}
	released := map[string]int{}
	for _, e := range got {
		if seen[e.ID] || e.Tenant != tenantA {
			t.Errorf("event %d delivered twice, or of tenant %s", e.ID, e.Tenant)
		}
		seen[e.ID] = true
		if e.ID <= last[e.SandboxID] {
			t.Errorf("sandbox %s: event %d after %d", e.SandboxID, e.ID, last[e.SandboxID])
		}
		last[e.SandboxID] = e.ID
		if e.Type == string(domain.EventReleased) {
			released[e.SandboxID]++
		}
	}
	for _, id := range ids {
		if released[id] != 1 {
			t.Errorf("sandbox %s: %d releases delivered; want 1", id, released[id])
		}
	}
	if len(got) != want {
		t.Errorf("delivered %d events; want %d", len(got), want)
	}
	a := rcv.Attempts()[0]
	if webhook.Verify(w.Secret, a.Signature, a.Body, time.Hour, time.Now()) != nil {
		t.Error("the signature does not verify with the create's secret")
	}
	tampered := strings.Replace(string(a.Body), `"events":[`, `"events":[ `, 1)
	if webhook.Verify(w.Secret, a.Signature, []byte(tampered), time.Hour, time.Now()) == nil {
		t.Error("a tampered body verifies")
	}

	// The receiver answered the last delivery; Tether records that just
	// after.
	var ds deliveryList
	eventually(t, 10*time.Second, "every delivery recorded", func() bool {
		r := b.do(t, http.MethodGet, "/v1/webhooks/"+w.Webhook.ID+"/deliveries?limit=500", nil)
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &ds)
		return len(ds.Items) > 0 && ds.Items[0].Status != "pending"
	})
	retried := false
	for _, d := range ds.Items {
		if d.Status != "delivered" || d.ResponseStatus == nil || *d.ResponseStatus != 204 {
			t.Errorf("delivery %+v; want delivered with 204", d)
		}
		retried = retried || d.Attempts > 1
	}
	if !retried {
		t.Error("no delivery shows a retry")
	}
	r := b.do(t, http.MethodPost, "/v1/webhooks/"+w.Webhook.ID+"/replay", map[string]any{"from_event_id": got[len(got)-1].ID})
	wantStatus(t, r, http.StatusOK)
	eventually(t, 20*time.Second, "the replayed event", func() bool {
		ps, _ := rcv.Delivered()
		evs := webhooktest.Events(ps)
		return len(evs) > want && evs[want].ID == got[len(got)-1].ID
	})
}
