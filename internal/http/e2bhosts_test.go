package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// E2B's sandbox hosts ({port}-{sandbox id}.E2B_DOMAIN, the SDK's
// getHost): docs/e2b.md#sandbox-hosts-gethost.

// e2bAnswer is E2B's Sandbox, a create's and a connect's answer, as the
// SDK reads it.
type e2bAnswer struct {
	SandboxID          string  `json:"sandboxID"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// rawDo sends a request to the server, with the Host header host when it
// is not empty and the headers given, following no redirect, and reads
// the answer; it checks nothing (E2B's face and hosts are outside
// Tether's contract).
func (b *bundle) rawDo(t *testing.T, method, host, path string, body string, headers map[string]string) *response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: got}
}

// e2bCreate makes a sandbox through E2B's API with key and body, and
// returns the answer.
func (b *bundle) e2bCreate(t *testing.T, key, body string) e2bAnswer {
	t.Helper()
	r := b.rawDo(t, http.MethodPost, "", "/e2b/v2/sandboxes", body, map[string]string{"X-API-Key": key, "Content-Type": "application/json"})
	if r.Status != http.StatusCreated {
		t.Fatalf("E2B create %s = %d %s", body, r.Status, r.Body)
	}
	var a e2bAnswer
	r.decode(t, &a)
	return a
}

// webPool makes the tenant of key a warm pool "web" whose sandboxes
// listen on port 8080 (the sim's echo): E2B's template "web".
func (b *bundle) webPool(t *testing.T, key string) {
	t.Helper()
	wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"web","min_ready":0,"params":{"ports":[8080]}}`, as(key)), http.StatusCreated)
}

// e2bHostError is the JSON of an answer of E2B's proxy.
type e2bHostError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

// wantE2BHostError checks r is E2B's proxy's JSON answer of status for
// the sandbox id, its message containing msg.
func wantE2BHostError(t *testing.T, r *response, status int, id, msg string) {
	t.Helper()
	var e e2bHostError
	if r.Status != status || json.Unmarshal(r.Body, &e) != nil || e.Code != status || e.SandboxID != id || !strings.Contains(e.Message, msg) {
		t.Errorf("got %d %s, want %d with sandboxId %s and a message with %q", r.Status, r.Body, status, id, msg)
	}
}

// jsonOf is v as JSON, for messages.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// unknownID is a sandbox id no test makes.
var unknownID = domain.NewID()

// e2bHost is the host the SDK's getHost(port) builds for the sandbox id.
func e2bHost(port, id string) string { return port + "-" + id + ".e2b.test" }

// TestE2BSandboxHosts: a sandbox made through E2B's API is reached on its
// hosts, {port}-{id}.E2B_DOMAIN, which its create and connect name as
// their domain: without a key when public traffic is allowed (E2B's
// default), else only with its traffic access token; its app never sees
// Tether's credentials, every request is in its activity (kind
// e2b_host), and what does not reach it is answered as E2B's proxy
// answers it, writing nothing. A /v1 sandbox is never reached there.
func TestE2BSandboxHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withConfig(func(c *httpapi.Config) { c.E2BDomain = "e2b.test" }))
	b.webPool(t, keyA)

	pub := b.e2bCreate(t, keyA, `{"templateID":"web"}`)
	if pub.Domain == nil || *pub.Domain != "e2b.test" || pub.TrafficAccessToken != nil {
		t.Fatalf("a public sandbox's create answered domain %v, trafficAccessToken %v", pub.Domain, pub.TrafficAccessToken)
	}
	id := pub.SandboxID
	// Key-less, at the root path, both spellings of the id; the app is
	// told its own host.
	for _, host := range []string{e2bHost("8080", id), "8080-" + strings.Replace(id, "_", "-", 1) + ".E2B.test:443"} {
		r := b.rawDo(t, http.MethodPost, host, "/app/x?y=1", "hello", nil)
		if r.Status != http.StatusOK || string(r.Body) != "hello" || r.Header.Get(sim.HeaderURI) != "/app/x?y=1" ||
			r.Header.Get(sim.HeaderPort) != "8080" || r.Header.Get(sim.HeaderSandbox) != id {
			t.Fatalf("POST %s = %d %v %q, want the sim's echo of port 8080", host, r.Status, r.Header, r.Body)
		}
		if strings.Contains(r.Header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("an E2B host's answer is sandboxed: %q", r.Header.Get("Content-Security-Policy"))
		}
	}
	// Tether's credentials stay out of the app: the API key as the
	// daemon's access token (the code-interpreter SDK sends it to every
	// port), as a bearer key, the traffic access token and a preview's
	// cookie; the app's own headers and cookies pass.
	r := b.rawDo(t, http.MethodGet, e2bHost("8080", id), "/headers", "", map[string]string{
		"X-Access-Token": keyA, "Authorization": "Bearer " + keyA, "E2b-Traffic-Access-Token": "tta_x",
		"Cookie": "tether_preview=tpv_x; app=1", "X-App": "kept",
	})
	var seen http.Header
	r.decode(t, &seen)
	for _, name := range []string{"X-Access-Token", "Authorization", "E2b-Traffic-Access-Token"} {
		if seen.Get(name) != "" {
			t.Errorf("the app saw %s: %q", name, seen.Get(name))
		}
	}
	if seen.Get("Cookie") != "app=1" || seen.Get("X-App") != "kept" || seen.Get("X-Forwarded-Host") != e2bHost("8080", id) {
		t.Errorf("the app saw %v", seen)
	}
	eventually(t, 10*time.Second, "the E2B host's activity", func() bool {
		n := 0
		for _, a := range b.activity(t, keyA, id) {
			if a.Kind == "e2b_host" && a.KeyID == nil && a.PreviewID == nil && deref(a.Port) == 8080 && deref(a.HTTPStatus) == 200 &&
				a.Request != nil && strings.HasPrefix(*a.Request, "POST /app/x") {
				n++
			}
		}
		return n == 2
	})

	// A sandbox whose create did not allow public traffic: only with its
	// token, which connect answers again.
	priv := b.e2bCreate(t, keyA, `{"templateID":"web","network":{"allowPublicTraffic":false}}`)
	if priv.TrafficAccessToken == nil || !strings.HasPrefix(*priv.TrafficAccessToken, "tta_") || priv.Domain == nil {
		t.Fatalf("a private sandbox's create answered domain %v, trafficAccessToken %v", priv.Domain, priv.TrafficAccessToken)
	}
	token := *priv.TrafficAccessToken
	r = b.rawDo(t, http.MethodPost, "", "/e2b/sandboxes/"+priv.SandboxID+"/connect", `{"timeout":60}`, map[string]string{"X-API-Key": keyA})
	var conn e2bAnswer
	r.decode(t, &conn)
	if r.Status != http.StatusOK || conn.TrafficAccessToken == nil || *conn.TrafficAccessToken != token || conn.Domain == nil || *conn.Domain != "e2b.test" {
		t.Fatalf("connect = %d %s, want the create's token and domain", r.Status, r.Body)
	}
	r = b.rawDo(t, http.MethodGet, "", "/e2b/sandboxes/"+priv.SandboxID, "", map[string]string{"X-API-Key": keyA})
	if !bytes.Contains(r.Body, []byte(`"domain":"e2b.test"`)) || !bytes.Contains(r.Body, []byte(`"network":{"allowPublicTraffic":false}`)) {
		t.Errorf("the sandbox's detail = %s, want its domain and allowPublicTraffic false", r.Body)
	}
	host := e2bHost("8080", priv.SandboxID)
	r = b.rawDo(t, http.MethodGet, host, "/", "", map[string]string{"E2b-Traffic-Access-Token": token})
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != priv.SandboxID {
		t.Fatalf("with its token = %d %s", r.Status, r.Body)
	}
	tagger, err := b.Store.Credentials(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	otherToken := e2b.TrafficToken(tagger, id) // the public sandbox's
	eventually(t, 10*time.Second, "the activity so far", func() bool {
		return len(b.activity(t, keyA, id)) == 3 && len(b.activity(t, keyA, priv.SandboxID)) == 1
	})
	before := b.counts(t)
	wantE2BHostError(t, b.rawDo(t, http.MethodGet, host, "/", "", nil), http.StatusForbidden, priv.SandboxID, "'e2b-traffic-access-token' is missing")
	for _, wrong := range []string{token + "x", "tta_" + strings.Repeat("A", 43), otherToken} {
		wantE2BHostError(t, b.rawDo(t, http.MethodGet, host, "/", "", map[string]string{"E2b-Traffic-Access-Token": wrong}),
			http.StatusForbidden, priv.SandboxID, "is invalid")
	}

	// A /v1 sandbox: E2B's connect names the domain, but its hosts do not
	// serve it, with or without a key or a token.
	v1 := b.readyWithPorts(t, keyA, 8080)
	r = b.rawDo(t, http.MethodPost, "", "/e2b/sandboxes/"+v1+"/connect", `{}`, map[string]string{"X-API-Key": keyA})
	r.decode(t, &conn)
	if r.Status != http.StatusOK || conn.Domain == nil || conn.TrafficAccessToken != nil {
		t.Fatalf("connect of a /v1 sandbox = %d %s", r.Status, r.Body)
	}
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer " + keyA, "X-Access-Token": keyA, "E2b-Traffic-Access-Token": token}} {
		wantE2BHostError(t, b.rawDo(t, http.MethodGet, e2bHost("8080", v1), "/", "", h), http.StatusBadGateway, v1, "The sandbox was not found")
	}

	// Port 49983 is E2B's daemon's, as on E2B: served by E2B's face for
	// the sandbox the host names, with the caller's key (the SDK's
	// X-Access-Token) and no traffic access token, a /v1 sandbox's too;
	// another tenant's key does not see it.
	for _, sb := range []string{id, priv.SandboxID, v1} {
		r := b.rawDo(t, http.MethodGet, e2bHost("49983", sb), "/health", "", map[string]string{"X-Access-Token": keyA, "E2b-Sandbox-Id": unknownID})
		if r.Status != http.StatusNoContent {
			t.Errorf("the daemon's health on %s's host = %d %s", sb, r.Status, r.Body)
		}
	}
	r = b.rawDo(t, http.MethodGet, e2bHost("49983", id), "/health", "", nil)
	if r.Status != http.StatusUnauthorized || !bytes.Contains(r.Body, []byte(`"code":401`)) {
		t.Errorf("the daemon without a key = %d %s", r.Status, r.Body)
	}

	// What does not reach an app.
	unknown := domain.NewID()
	wantE2BHostError(t, b.rawDo(t, http.MethodGet, e2bHost("8080", unknown), "/", "", nil), http.StatusBadGateway, unknown, "The sandbox was not found")
	r = b.rawDo(t, http.MethodGet, e2bHost("8081", id), "/", "", nil)
	wantE2BHostError(t, r, http.StatusBadGateway, id, "port is not open")
	if bytes.Contains(r.Body, []byte(`"port":8081`)) == false {
		t.Errorf("a closed port's answer names no port: %s", r.Body)
	}
	for host, want := range map[string]string{
		"nonsense.e2b.test":          "Invalid host",
		"8080.e2b.test":              "Invalid host",
		"-" + id + ".e2b.test":       "Invalid host",
		"8080-.e2b.test":             "Invalid host",
		"x.8080-" + id + ".e2b.test": "Invalid host",
		"0-" + id + ".e2b.test":      "Invalid sandbox port",
		"65536-" + id + ".e2b.test":  "Invalid sandbox port",
		"08080-" + id + ".e2b.test":  "Invalid sandbox port",
		"http-" + id + ".e2b.test":   "Invalid sandbox port",
		"8080-sbx_nope.e2b.test":     "Invalid sandbox ID",
		"8080-" + id + "-x.e2b.test": "Invalid sandbox ID",
	} {
		r := b.rawDo(t, http.MethodGet, host, "/", "", nil)
		if r.Status != http.StatusBadRequest || strings.TrimSpace(string(r.Body)) != want || mediaType(r) != "text/plain" {
			t.Errorf("%s = %d %s %q, want 400 %q", host, r.Status, r.Header.Get("Content-Type"), r.Body, want)
		}
	}
	wantProblem(t, b.rawDo(t, http.MethodGet, e2bHost("8080", id), "//127.0.0.1:5432/x", "", nil), http.StatusBadRequest, "INVALID_REQUEST")
	// A paused sandbox is not found (E2B resumes only auto-resume ones),
	// nor an ended one.
	wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/pause", nil, as(keyA)), http.StatusAccepted)
	eventually(t, 10*time.Second, "the pause", func() bool { return b.get(t, keyA, id).State == "paused" })
	wantE2BHostError(t, b.rawDo(t, http.MethodGet, e2bHost("8080", id), "/", "", nil), http.StatusBadGateway, id, "The sandbox was not found")
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+priv.SandboxID, nil, as(keyA)), http.StatusAccepted)
	wantE2BHostError(t, b.rawDo(t, http.MethodGet, host, "/", "", map[string]string{"E2b-Traffic-Access-Token": token}),
		http.StatusBadGateway, priv.SandboxID, "The sandbox was not found")
	// Each request that reached the provider is recorded, the closed
	// port's too; no refused one is.
	eventually(t, 10*time.Second, "the activity records", func() bool {
		return len(b.activity(t, keyA, id)) == 4 && len(b.activity(t, keyA, priv.SandboxID)) == 1
	})
	last := b.activity(t, keyA, id)[3]
	if last.Kind != "e2b_host" || deref(last.Port) != 8081 || deref(last.Error) != "PORT_UNREACHABLE" || last.HTTPStatus != nil {
		t.Errorf("the closed port's record = %+v", last)
	}
	time.Sleep(100 * time.Millisecond)
	if after := b.counts(t); after["sandbox_activity"] != before["sandbox_activity"]+1 {
		t.Errorf("refused requests were recorded: before %v, after %v", before, after)
	}
	// The API still answers on its own host.
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+v1, nil, as(keyA)), http.StatusOK)
	// E2B's 502s and 403s are the client's business, logged at INFO.
	for _, l := range b.logs.lines() {
		if strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("logged at ERROR: %s", l)
		}
	}
	// (After that check: E2B's face logs the daemon's 502 at ERROR, as
	// under /e2b/envd.)
	r = b.rawDo(t, http.MethodGet, e2bHost("49983", v1), "/health", "", map[string]string{"X-Access-Token": keyB})
	if r.Status != http.StatusBadGateway {
		t.Errorf("the daemon with another tenant's key = %d %s", r.Status, r.Body)
	}
}

// TestE2BHostsSharePreviewHost: with E2B_DOMAIN the same as PREVIEW_HOST,
// a request that carries a preview token is a preview's, judged as one,
// and any other is an E2B host's: the SDK's getHost reaches an E2B
// sandbox key-less, a preview URL still works, and a /v1 sandbox is
// reached only through its preview.
func TestE2BHostsSharePreviewHost(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withConfig(func(c *httpapi.Config) {
		c.E2BDomain, c.PreviewHost = "sandbox.test", "sandbox.test"
	}))
	b.webPool(t, keyA)
	e := b.e2bCreate(t, keyA, `{"templateID":"web"}`)
	if e.Domain == nil || *e.Domain != "sandbox.test" {
		t.Fatalf("domain = %v", e.Domain)
	}
	r := b.rawDo(t, http.MethodGet, "8080-"+e.SandboxID+".sandbox.test", "/x", "", nil)
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != e.SandboxID {
		t.Fatalf("getHost's host = %d %s", r.Status, r.Body)
	}
	// A WebSocket too, key-less.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, b.wsURL("/ws"), http.Header{"Host": {"8080-" + e.SandboxID + ".sandbox.test"}})
	if err != nil {
		t.Fatalf("WebSocket on the E2B host: %v", err)
	}
	_ = res.Body.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ws.ReadMessage(); err != nil || string(got) != "ping" {
		t.Fatalf("the WebSocket's echo: %q, %v", got, err)
	}
	_ = ws.Close()
	v1 := b.readyWithPorts(t, keyA, 8080)
	p := b.preview(t, keyA, v1, map[string]any{"port": 8080})
	host := "8080-" + strings.Replace(v1, "_", "-", 1) + ".sandbox.test"
	r = b.rawDo(t, http.MethodGet, host, "/?tether_preview_token="+*p.Token, "", nil)
	if r.Status != http.StatusSeeOther {
		t.Fatalf("the preview's first visit = %d %s", r.Status, r.Body)
	}
	cookie := r.Header.Get("Set-Cookie")
	name, rest, _ := strings.Cut(cookie, "=")
	value, _, _ := strings.Cut(rest, ";")
	r = b.rawDo(t, http.MethodGet, host, "/y", "", map[string]string{"Cookie": name + "=" + value})
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != v1 {
		t.Fatalf("the preview with its cookie = %d %s", r.Status, r.Body)
	}
	// Without the token, the /v1 sandbox's host is an E2B host's, which
	// does not serve it; a preview token on the E2B sandbox's host is a
	// preview's, for another sandbox.
	wantE2BHostError(t, b.rawDo(t, http.MethodGet, host, "/", "", nil), http.StatusBadGateway, v1, "The sandbox was not found")
	wantProblem(t, b.rawDo(t, http.MethodGet, "8080-"+e.SandboxID+".sandbox.test", "/", "", map[string]string{"Cookie": name + "=" + value}),
		http.StatusNotFound, "NOT_FOUND")
	var a, v []activityJSON
	defer func() {
		if t.Failed() {
			t.Logf("records: %s; %s", jsonOf(a), jsonOf(v))
		}
	}()
	eventually(t, 10*time.Second, "the records", func() bool {
		a, v = b.activity(t, keyA, e.SandboxID), b.activity(t, keyA, v1)
		statuses := map[any]bool{}
		for _, r := range a {
			statuses[deref(r.HTTPStatus)] = r.Kind == "e2b_host"
		}
		return len(a) == 2 && statuses[200] && statuses[101] && len(v) == 1 && v[0].Kind == "preview"
	})
}

// TestForwardedE2BHost: an E2B host's request sent to one node reaches
// the sandbox on its own node, as the E2B host's (its record, its own
// origin, Tether's credentials stripped), and a closed port there is
// answered as E2B's proxy answers it.
func TestForwardedE2BHost(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	wantStatus(t, n.a.do(t, http.MethodPost, "/v1/pools", `{"name":"web","min_ready":0,"params":{"ports":[8080]}}`, as(keyA)), http.StatusCreated)
	e := n.a.e2bCreate(t, keyA, `{"templateID":"web"}`)
	if _, err := n.a.Store.Pool().Exec(t.Context(), `UPDATE sandboxes SET node = 'b' WHERE id = $1`, e.SandboxID); err != nil {
		t.Fatal(err)
	}
	reached := n.reachedB.Load()
	r := n.a.rawDo(t, http.MethodGet, e2bHost("8080", e.SandboxID), "/headers", "", map[string]string{"X-Access-Token": keyA})
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != e.SandboxID || n.reachedB.Load() == reached {
		t.Fatalf("through a = %d %s, want node b's echo", r.Status, r.Body)
	}
	var seen http.Header
	r.decode(t, &seen)
	for name := range seen {
		if l := strings.ToLower(name); strings.HasPrefix(l, "tether-") || l == "x-access-token" || l == "authorization" {
			t.Errorf("the app on b saw %s", name)
		}
	}
	if seen.Get("X-Forwarded-Prefix") != "" {
		t.Errorf("the app on b saw X-Forwarded-Prefix %q, want none (its own origin)", seen.Get("X-Forwarded-Prefix"))
	}
	r = n.a.rawDo(t, http.MethodGet, e2bHost("8081", e.SandboxID), "/", "", nil)
	wantE2BHostError(t, r, http.StatusBadGateway, e.SandboxID, "port is not open")
	eventually(t, 10*time.Second, "the forwarded records", func() bool {
		seen := map[string]bool{}
		for _, r := range n.a.activity(t, keyA, e.SandboxID) {
			seen[fmt.Sprint(deref(r.Request), " ", deref(r.Error))] = r.Kind == "e2b_host" && r.KeyID == nil
		}
		return len(seen) == 2 && seen["GET /headers <nil>"] && seen["GET / PORT_UNREACHABLE"]
	})
}
