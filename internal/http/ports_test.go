package http_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// noPorts is a provider without the PortDialer capability.
type noPorts struct{ domain.Provider }

func (noPorts) Name() string { return "noports" }

// readyWithPorts creates a sim sandbox listening on ports for the tenant of
// key and waits until it is ready.
func (b *bundle) readyWithPorts(t *testing.T, key string, ports ...int) string {
	t.Helper()
	sb := b.create(t, key, map[string]any{"params": map[string]any{"ports": ports}})
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=20s", nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var got sandboxJSON
	r.decode(t, &got)
	if got.State != "ready" {
		t.Fatalf("sandbox %s is %s, want ready", sb.ID, got.State)
	}
	return sb.ID
}

type activityJSON struct {
	Kind       string  `json:"kind"`
	KeyID      *string `json:"key_id"`
	Request    *string `json:"request"`
	Port       *int    `json:"port"`
	HTTPStatus *int    `json:"http_status"`
	PreviewID  *string `json:"preview_id"`
	Bytes      *int64  `json:"bytes"`
	Error      *string `json:"error"`
}

func (b *bundle) activity(t *testing.T, key, id string) []activityJSON {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var out struct{ Items []activityJSON }
	r.decode(t, &out)
	return out.Items
}

func TestPortProxyOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readyWithPorts(t, keyA, 8080)
	base := "/v1/sandboxes/" + id + "/ports/8080"

	r := b.do(t, http.MethodGet, base+"/some/path?x=1&y=two", nil, as(keyA))
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != id || r.Header.Get(sim.HeaderPort) != "8080" {
		t.Fatalf("GET through the port = %d %v, want 200 from sandbox %s port 8080", r.Status, r.Header, id)
	}
	if got := r.Header.Get(sim.HeaderURI); got != "/some/path?x=1&y=two" {
		t.Errorf("the app saw %q, want /some/path?x=1&y=two", got)
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") {
		t.Errorf("Content-Security-Policy = %q, want a sandbox directive (the app must not run as Tether's origin)", csp)
	}
	// Escaped characters reach the app as they were sent.
	r = b.do(t, http.MethodGet, base+"/a%2Fb%20c", nil, as(keyA))
	if got := r.Header.Get(sim.HeaderURI); got != "/a%2Fb%20c" {
		t.Errorf("the app saw %q, want /a%%2Fb%%20c", got)
	}
	// A body goes through and comes back.
	r = b.do(t, http.MethodPost, base+"/echo", "hello, sandbox", as(keyA))
	if r.Status != http.StatusOK || string(r.Body) != "hello, sandbox" || r.Header.Get(sim.HeaderMethod) != "POST" {
		t.Errorf("POST echo = %d %q, want 200 %q", r.Status, r.Body, "hello, sandbox")
	}
	// The app never sees the API key or the node-to-node headers.
	r = b.do(t, http.MethodGet, base+"/headers", nil, as(keyA), header("Tether-Forwarded-Tenant", "x"))
	var seen http.Header
	r.decode(t, &seen)
	if seen.Get("Authorization") != "" || seen.Get("Tether-Forwarded-Tenant") != "" {
		t.Errorf("the app saw credentials: %v", seen)
	}
	if seen.Get("X-Forwarded-Prefix") != base {
		t.Errorf("X-Forwarded-Prefix = %q, want %q", seen.Get("X-Forwarded-Prefix"), base)
	}
	// Nothing listening: 502 PORT_UNREACHABLE, never a 500, and logged as
	// what it is: the sandbox's matter, not Tether's error.
	r = b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/ports/8081/", nil, as(keyA))
	wantProblem(t, r, http.StatusBadGateway, "PORT_UNREACHABLE")
	wantLoggedAt(t, b.logs, r, 1, "INFO")

	acts := b.activity(t, keyA, id)
	if len(acts) != 5 {
		t.Fatalf("activity has %d records, want 5: %+v", len(acts), acts)
	}
	first, last := acts[0], acts[4]
	if first.Kind != "port" || deref(first.Request) != "GET /some/path" || deref(first.Port) != 8080 ||
		deref(first.HTTPStatus) != 200 || deref(first.KeyID) == nil || first.PreviewID != nil {
		t.Errorf("first record = %+v, want kind port, GET /some/path, port 8080, status 200, the key", first)
	}
	if deref(acts[2].Bytes) != int64(2*len("hello, sandbox")) {
		t.Errorf("the echo's record counts %v bytes, want %d (both ways)", deref(acts[2].Bytes), 2*len("hello, sandbox"))
	}
	if deref(last.Error) != "PORT_UNREACHABLE" || deref(last.Port) != 8081 || last.HTTPStatus != nil {
		t.Errorf("refused record = %+v, want error PORT_UNREACHABLE on port 8081 without a status", last)
	}
}

func TestPortProxyRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withProvider(noPorts{mustSim(t)}))
	id := b.readyWithPorts(t, keyA, 8080)
	paused := b.readyWithPorts(t, keyA, 8080)
	wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+paused+"/pause?wait=20s", nil, as(keyA)), http.StatusAccepted)
	ended := b.readyWithPorts(t, keyA, 8080)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+ended, nil, as(keyA)), http.StatusAccepted)
	// Released before the counts: a release records a row (a webhook event).
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+ended+"?wait=20s&until=released", nil, as(keyA)), http.StatusOK)
	other := b.create(t, keyA, map[string]any{"provider": "noports"})
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+other.ID+"?wait=20s", nil, as(keyA)), http.StatusOK)

	before := b.counts(t)
	for _, tc := range []struct {
		name, path, method string
		status             int
		code, state        string
	}{
		{"unknown sandbox", "/v1/sandboxes/" + domain.NewID() + "/ports/8080/", "GET", 404, "NOT_FOUND", ""},
		{"malformed id", "/v1/sandboxes/nope/ports/8080/", "GET", 404, "NOT_FOUND", ""},
		{"another tenant's", "/v1/sandboxes/" + id + "/ports/8080/", "GET", 404, "NOT_FOUND", ""},
		{"port 0", "/v1/sandboxes/" + id + "/ports/0/", "GET", 400, "INVALID_REQUEST", ""},
		{"port 65536", "/v1/sandboxes/" + id + "/ports/65536/x", "POST", 400, "INVALID_REQUEST", ""},
		{"port abc", "/v1/sandboxes/" + id + "/ports/abc/", "GET", 400, "INVALID_REQUEST", ""},
		{"port 08080", "/v1/sandboxes/" + id + "/ports/08080/", "GET", 400, "INVALID_REQUEST", ""},
		{"port -1", "/v1/sandboxes/" + id + "/ports/-1/", "DELETE", 400, "INVALID_REQUEST", ""},
		{"paused", "/v1/sandboxes/" + paused + "/ports/8080/", "GET", 409, "SANDBOX_STATE_CONFLICT", "paused"},
		{"terminated", "/v1/sandboxes/" + ended + "/ports/8080/", "PUT", 409, "SANDBOX_STATE_CONFLICT", "terminated"},
		{"no ports", "/v1/sandboxes/" + other.ID + "/ports/8080/", "GET", 501, "NOT_SUPPORTED", ""},
	} {
		key := keyA
		if tc.name == "another tenant's" {
			key = keyB
		}
		p := wantProblem(t, b.do(t, tc.method, tc.path, nil, as(key)), tc.status, tc.code)
		if p.State != tc.state {
			t.Errorf("%s: state %q, want %q", tc.name, p.State, tc.state)
		}
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/ports/8080/", nil, noAuth()), http.StatusUnauthorized, "UNAUTHENTICATED")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("bad input wrote rows: before %v, after %v", before, after)
	}
}

func TestProvidersReportPorts(t *testing.T) {
	t.Parallel()
	b := setup(t, withProvider(noPorts{mustSim(t)}))
	var list struct {
		Items []struct {
			Name         string `json:"name"`
			Capabilities struct {
				Ports bool `json:"ports"`
			} `json:"capabilities"`
		} `json:"items"`
	}
	r := b.do(t, http.MethodGet, "/v1/providers", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &list)
	want := map[string]bool{"sim": true, "sim-b": true, "noports": false}
	if len(list.Items) != len(want) {
		t.Fatalf("providers = %+v", list.Items)
	}
	for _, p := range list.Items {
		if p.Capabilities.Ports != want[p.Name] {
			t.Errorf("provider %s: ports = %v, want %v", p.Name, p.Capabilities.Ports, want[p.Name])
		}
	}
}

func mustSim(t *testing.T) *sim.Provider {
	t.Helper()
	p, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wsURL is the WebSocket address of path on the bundle's server.
func (b *bundle) wsURL(path string) string { return "ws" + strings.TrimPrefix(b.URL, "http") + path }

func TestPortProxyCarriesWebSockets(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readyWithPorts(t, keyA, 9000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, b.wsURL("/v1/sandboxes/"+id+"/ports/9000/ws"),
		http.Header{"Authorization": {"Bearer " + keyA}})
	if err != nil {
		t.Fatalf("dial the sandbox's WebSocket: %v", err)
	}
	_ = res.Body.Close()
	for _, msg := range []string{"one", strings.Repeat("x", 100_000), "three"} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.ReadMessage()
		if err != nil || string(got) != msg {
			t.Fatalf("echo of a %d-byte message: %d bytes, %v", len(msg), len(got), err)
		}
	}
	_ = ws.Close()
	eventually(t, 10*time.Second, "the WebSocket's activity record", func() bool {
		acts := b.activity(t, keyA, id)
		return len(acts) == 1 && deref(acts[0].HTTPStatus) == 101 && acts[0].Bytes != nil && *acts[0].Bytes > 200_000
	})
	// Without a key, no upgrade.
	_, res, err = websocket.DefaultDialer.DialContext(ctx, b.wsURL("/v1/sandboxes/"+id+"/ports/9000/ws"), nil)
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("WebSocket without a key: %v, want 401", err)
	}
	if res != nil {
		_ = res.Body.Close()
	}
}

type previewJSON struct {
	ID        string     `json:"id"`
	SandboxID string     `json:"sandbox_id"`
	Port      int        `json:"port"`
	URL       *string    `json:"url"`
	Token     *string    `json:"token"`
	ExpiresAt time.Time  `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func (b *bundle) preview(t *testing.T, key, id string, body any) previewJSON {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/previews", body, as(key))
	wantStatus(t, r, http.StatusCreated)
	var p previewJSON
	r.decode(t, &p)
	if p.URL == nil || p.Token == nil || !strings.HasPrefix(*p.Token, "tpv_") {
		t.Fatalf("preview %+v has no URL or token", p)
	}
	return p
}

// previewPath is the path of a preview's URL.
func previewPath(t *testing.T, p previewJSON) string {
	t.Helper()
	u, err := url.Parse(*p.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

func TestPreviewURLs(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readyWithPorts(t, keyA, 8080, 8081)
	p := b.preview(t, keyA, id, map[string]any{"port": 8080})
	if p.Port != 8080 || p.SandboxID != id || !strings.HasPrefix(*p.URL, b.URL+"/p/tpv_") {
		t.Errorf("preview = %+v, want port 8080 of %s at %s/p/...", p, id, b.URL)
	}
	if d := time.Until(p.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("expires in %s, want the default hour", d)
	}
	path := previewPath(t, p)

	// No API key needed; the path after the token is the app's.
	r := b.do(t, http.MethodGet, path+"index.html?q=1", nil, noAuth())
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != id || r.Header.Get(sim.HeaderPort) != "8080" ||
		r.Header.Get(sim.HeaderURI) != "/index.html?q=1" {
		t.Fatalf("GET through the preview = %d %v", r.Status, r.Header)
	}
	// A WebSocket through the preview.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, b.wsURL(path+"ws"), nil)
	if err != nil {
		t.Fatalf("WebSocket through the preview: %v", err)
	}
	_ = res.Body.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ws.ReadMessage(); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the preview: %q, %v", got, err)
	}
	_ = ws.Close()

	// Listed without its token; another tenant sees none of it.
	r = b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/previews", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var list struct{ Items []previewJSON }
	r.decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != p.ID || list.Items[0].Token != nil || list.Items[0].URL != nil {
		t.Errorf("list = %+v, want the one preview without its token", list.Items)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/previews", nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+id+"/previews/"+p.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	// The traffic is in the sandbox's activity, as the preview's: the GET
	// and the WebSocket, in either order (each request writes its record
	// as it ends, and the GET's may come after the WebSocket's).
	eventually(t, 10*time.Second, "the preview's activity", func() bool {
		acts := b.activity(t, keyA, id)
		statuses := map[any]int{}
		for _, a := range acts {
			if a.Kind != "preview" || deref(a.PreviewID) != p.ID || a.KeyID != nil {
				return false
			}
			statuses[deref(a.HTTPStatus)]++
		}
		return len(acts) == 2 && statuses[200] == 1 && statuses[101] == 1
	})

	// Revoked: 410, at once.
	r = b.do(t, http.MethodDelete, "/v1/sandboxes/"+id+"/previews/"+p.ID, nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var revoked previewJSON
	r.decode(t, &revoked)
	if revoked.RevokedAt == nil {
		t.Errorf("revoke answered %+v, want revoked_at", revoked)
	}
	wantProblem(t, b.do(t, http.MethodGet, path, nil, noAuth()), http.StatusGone, "PREVIEW_GONE")
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+id+"/previews/"+p.ID, nil, as(keyA)), http.StatusOK)

	// Expired: 410.
	short := b.preview(t, keyA, id, map[string]any{"port": 8081, "ttl_seconds": 1})
	eventually(t, 10*time.Second, "the preview to expire", func() bool {
		return b.do(t, http.MethodGet, previewPath(t, short), nil, noAuth()).Status == http.StatusGone
	})

	// The sandbox ends: its previews answer 410 and nothing is started.
	live := b.preview(t, keyA, id, map[string]any{"port": 8080})
	creates := b.simCreates(t, id)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+id, nil, as(keyA)), http.StatusAccepted)
	wantProblem(t, b.do(t, http.MethodGet, previewPath(t, live)+"x", nil, noAuth()), http.StatusGone, "PREVIEW_GONE")
	eventually(t, 10*time.Second, "the sandbox's release", func() bool { return !b.simHas(t, id) })
	wantProblem(t, b.do(t, http.MethodPost, previewPath(t, live), "body", noAuth()), http.StatusGone, "PREVIEW_GONE")
	if got := b.simCreates(t, id); got != creates || b.simHas(t, id) {
		t.Errorf("after the preview's requests the sim made %d creates (was %d), holds it: %v", got, creates, b.simHas(t, id))
	}
}

// TestPreviewLocation: a preview's creation answers with a Location that
// GETs the same preview (without its token), for its tenant only; a
// preview is found only under its own sandbox.
func TestPreviewLocation(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readyWithPorts(t, keyA, 8080)
	other := b.readyWithPorts(t, keyA, 8080)
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/previews", map[string]any{"port": 8080}, as(keyA))
	wantStatus(t, r, http.StatusCreated)
	var made previewJSON
	r.decode(t, &made)
	loc := r.Header.Get("Location")
	if want := "/v1/sandboxes/" + id + "/previews/" + made.ID; loc != want {
		t.Fatalf("Location = %q, want %q", loc, want)
	}

	r = b.do(t, http.MethodGet, loc, nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var got previewJSON
	r.decode(t, &got)
	if got.ID != made.ID || got.SandboxID != id || got.Port != 8080 || !got.ExpiresAt.Equal(made.ExpiresAt) ||
		got.RevokedAt != nil || got.URL != nil || got.Token != nil {
		t.Errorf("GET Location = %+v, want the preview made (%+v) without its URL and token", got, made)
	}

	for _, tc := range []struct {
		name, key, path string
	}{
		{"another tenant's", keyB, loc},
		{"under another sandbox", keyA, "/v1/sandboxes/" + other + "/previews/" + made.ID},
		{"an unknown sandbox", keyA, "/v1/sandboxes/" + domain.NewID() + "/previews/" + made.ID},
		{"an unknown preview", keyA, "/v1/sandboxes/" + id + "/previews/prv_nope"},
		{"not a preview id", keyA, "/v1/sandboxes/" + id + "/previews/" + id},
	} {
		if r := b.do(t, http.MethodGet, tc.path, nil, as(tc.key)); r.Status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", tc.name, r.Status)
		} else {
			wantProblem(t, r, http.StatusNotFound, "NOT_FOUND")
		}
	}
	wantProblem(t, b.do(t, http.MethodGet, loc+"?x=1", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")

	// Revoked, it is still there, saying so.
	wantStatus(t, b.do(t, http.MethodDelete, loc, nil, as(keyA)), http.StatusOK)
	r = b.do(t, http.MethodGet, loc, nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &got)
	if got.ID != made.ID || got.RevokedAt == nil {
		t.Errorf("GET after the revoke = %+v, want it with revoked_at", got)
	}
}

func TestPreviewsRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withProvider(noPorts{mustSim(t)}))
	id := b.readyWithPorts(t, keyA, 8080)
	p := b.preview(t, keyA, id, map[string]any{"port": 8080})
	paused := b.readyWithPorts(t, keyA, 8080)
	pausedPreview := b.preview(t, keyA, paused, map[string]any{"port": 8080})
	wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+paused+"/pause?wait=20s", nil, as(keyA)), http.StatusAccepted)
	other := b.create(t, keyA, map[string]any{"provider": "noports"})
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+other.ID+"?wait=20s", nil, as(keyA)), http.StatusOK)

	before := b.counts(t)
	for _, tc := range []struct {
		name   string
		key    string
		id     string
		body   any
		status int
		code   string
	}{
		{"port 0", keyA, id, map[string]any{"port": 0}, 400, "INVALID_REQUEST"},
		{"port 65536", keyA, id, map[string]any{"port": 65536}, 400, "INVALID_REQUEST"},
		{"port a string", keyA, id, map[string]any{"port": "8080"}, 400, "INVALID_REQUEST"},
		{"no port", keyA, id, map[string]any{}, 400, "INVALID_REQUEST"},
		{"ttl 0", keyA, id, map[string]any{"port": 8080, "ttl_seconds": 0}, 400, "INVALID_REQUEST"},
		{"ttl over the max", keyA, id, map[string]any{"port": 8080, "ttl_seconds": 86401}, 400, "INVALID_REQUEST"},
		{"unknown field", keyA, id, map[string]any{"port": 8080, "host": "x"}, 400, "INVALID_REQUEST"},
		{"unknown sandbox", keyA, domain.NewID(), map[string]any{"port": 8080}, 404, "NOT_FOUND"},
		{"another tenant's", keyB, id, map[string]any{"port": 8080}, 404, "NOT_FOUND"},
		{"paused", keyA, paused, map[string]any{"port": 8080}, 409, "SANDBOX_STATE_CONFLICT"},
		{"no ports", keyA, other.ID, map[string]any{"port": 8080}, 501, "NOT_SUPPORTED"},
	} {
		r := b.do(t, http.MethodPost, "/v1/sandboxes/"+tc.id+"/previews", tc.body, as(tc.key))
		if r.Status != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, r.Status, tc.status)
		}
		wantProblem(t, r, tc.status, tc.code)
	}
	// Unknown, malformed and another's tokens; a paused sandbox's preview.
	wantProblem(t, b.do(t, http.MethodGet, "/p/tpv_"+strings.Repeat("A", 43)+"/", nil, noAuth()), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodGet, "/p/nope/x", nil, noAuth()), http.StatusNotFound, "NOT_FOUND")
	pp := wantProblem(t, b.do(t, http.MethodGet, previewPath(t, pausedPreview), nil, noAuth()), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if pp.State != "paused" {
		t.Errorf("a paused sandbox's preview: state %q, want paused", pp.State)
	}
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+id+"/previews/prv_nope", nil, as(keyA)), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+paused+"/previews/"+p.ID, nil, as(keyA)), http.StatusNotFound, "NOT_FOUND")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("bad input wrote rows: before %v, after %v", before, after)
	}
	// The paused sandbox was not resumed.
	if got := b.get(t, keyA, paused); got.State != "paused" {
		t.Errorf("the paused sandbox is %s after its preview was asked for", got.State)
	}
}

// hostRequest sends a request with the Host header host, following no
// redirect and checking nothing else, and reads the answer.
func (b *bundle) hostRequest(t *testing.T, host, path string, cookies ...*http.Cookie) *response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, b.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: body}
}

func TestPreviewWildcardHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withConfig(func(c *httpapi.Config) {
		c.PreviewHost = "preview.test"
		c.PreviewBaseURL = "https://tether.test"
	}))
	id := b.readyWithPorts(t, keyA, 8080, 8081)
	p := b.preview(t, keyA, id, map[string]any{"port": 8080})
	host := "8080-" + strings.Replace(id, "_", "-", 1) + ".preview.test"
	if want := "https://" + host + "/?tether_preview_token=" + *p.Token; *p.URL != want {
		t.Fatalf("url = %s, want %s", *p.URL, want)
	}
	// The token in the query: a cookie of that host, and the same URL
	// without it.
	res := b.hostRequest(t, host, "/app?tether_preview_token="+*p.Token+"&x=1")
	if res.Status != http.StatusSeeOther || res.Header.Get("Location") != "/app?x=1" {
		t.Fatalf("first visit = %d to %q, want 303 to /app?x=1", res.Status, res.Header.Get("Location"))
	}
	var cookie *http.Cookie
	cookies := (&http.Response{Header: res.Header}).Cookies()
	for _, ck := range cookies {
		if ck.Name == "tether_preview" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.Value != *p.Token {
		t.Fatalf("first visit set cookies %v, want an HttpOnly tether_preview", cookies)
	}
	// The cookie carries it: the app gets the root path and its own origin.
	res = b.hostRequest(t, host, "/?x=1", cookie)
	if res.Status != http.StatusOK || res.Header.Get(sim.HeaderURI) != "/?x=1" || res.Header.Get(sim.HeaderPort) != "8080" {
		t.Fatalf("with the cookie = %d %v", res.Status, res.Header)
	}
	if strings.Contains(res.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("a preview host's answer is sandboxed: %q", res.Header.Get("Content-Security-Policy"))
	}
	res = b.hostRequest(t, host, "/headers", cookie)
	var seen http.Header
	res.decode(t, &seen)
	if strings.Contains(seen.Get("Cookie"), *p.Token) {
		t.Errorf("the app saw the preview's cookie: %v", seen)
	}
	// The token is bound to its sandbox and port.
	eventually(t, 10*time.Second, "the preview host's activity", func() bool { return len(b.activity(t, keyA, id)) == 2 })
	before := b.counts(t)
	for _, other := range []string{
		"8081-" + strings.Replace(id, "_", "-", 1) + ".preview.test",
		"8080-" + strings.Replace(domain.NewID(), "_", "-", 1) + ".preview.test",
		"nonsense.preview.test",
	} {
		for _, res := range []*response{
			b.hostRequest(t, other, "/", cookie),
			b.hostRequest(t, other, "/?tether_preview_token="+*p.Token),
		} {
			wantProblem(t, res, http.StatusNotFound, "NOT_FOUND")
		}
	}
	wantProblem(t, b.hostRequest(t, host, "/"), http.StatusNotFound, "NOT_FOUND")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("refused preview requests wrote rows: before %v, after %v", before, after)
	}
	// The API itself still answers on its own host.
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+id, nil, as(keyA)), http.StatusOK)
}

// TestForwardedPorts: a port's traffic, a WebSocket's and a preview's sent
// to another node reach the sandbox on its own node, streamed both ways.
func TestForwardedPorts(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	id := n.onB
	base := "/v1/sandboxes/" + id + "/ports/8080"
	reached := n.reachedB.Load()
	r := n.a.do(t, http.MethodPost, base+"/up?x=1", strings.Repeat("y", 5000), as(keyA))
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderSandbox) != id || len(r.Body) != 5000 || r.Header.Get(sim.HeaderURI) != "/up?x=1" {
		t.Fatalf("POST through a = %d %v (%d bytes), want node b's echo", r.Status, r.Header, len(r.Body))
	}
	if n.reachedB.Load() == reached {
		t.Fatal("the request did not reach node b")
	}
	// Both nodes log a port nothing listens on at INFO: node b, which
	// answered it, and node a, which passed its answer on.
	r = n.a.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/ports/8081/", nil, as(keyA))
	wantProblem(t, r, http.StatusBadGateway, "PORT_UNREACHABLE")
	wantLoggedAt(t, n.a.logs, r, 2, "INFO")
	wantProblem(t, n.a.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/ports/0/", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, n.a.wsURL(base+"/ws"), http.Header{"Authorization": {"Bearer " + keyA}})
	if err != nil {
		t.Fatalf("WebSocket through a: %v", err)
	}
	_ = res.Body.Close()
	for i := range 20 {
		msg := strings.Repeat(string(rune('a'+i)), 1000*i+1)
		if err := ws.WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := ws.ReadMessage(); err != nil || string(got) != msg {
			t.Fatalf("echo %d through two hops: %d bytes, %v", i, len(got), err)
		}
	}
	_ = ws.Close()

	// A preview made through a, used through a, served on b.
	p := n.a.preview(t, keyA, id, map[string]any{"port": 8080})
	r = n.a.do(t, http.MethodGet, previewPath(t, p)+"page", nil, noAuth())
	if r.Status != http.StatusOK || r.Header.Get(sim.HeaderURI) != "/page" {
		t.Fatalf("preview through a = %d %v", r.Status, r.Header)
	}
	r = n.a.do(t, http.MethodGet, previewPath(t, p)+"headers", nil, noAuth())
	var seen http.Header
	r.decode(t, &seen)
	if got, want := seen.Get("X-Forwarded-Prefix"), strings.TrimSuffix(previewPath(t, p), "/"); got != want {
		t.Errorf("the app on b saw X-Forwarded-Prefix %q, want the preview's %q", got, want)
	}
	for name := range seen {
		if strings.HasPrefix(strings.ToLower(name), "tether-") {
			t.Errorf("the app on b saw %s", name)
		}
	}
	eventually(t, 10*time.Second, "the forwarded preview's activity", func() bool {
		for _, a := range n.a.activity(t, keyA, id) {
			if a.Kind == "preview" && deref(a.PreviewID) == p.ID && a.KeyID == nil && deref(a.Request) == "GET /page" {
				return true
			}
		}
		return false
	})
}

// TestPortPathsAreNormal: a path with an empty segment or a dot segment
// is refused before anything is dialled, through the API and through a
// preview; "//127.0.0.1:5432/x" once reached the app as "/x" (read as an
// authority), so the app's path and the activity record disagreed.
func TestPortPathsAreNormal(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readyWithPorts(t, keyA, 8080)
	p := b.preview(t, keyA, id, map[string]any{"port": 8080})
	bases := map[string]func(path string) *response{
		"port": func(path string) *response {
			return b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/ports/8080"+path, nil, as(keyA))
		},
		"preview": func(path string) *response {
			return b.do(t, http.MethodGet, strings.TrimSuffix(previewPath(t, p), "/")+path, nil, noAuth())
		},
	}
	before := b.counts(t)
	for name, get := range bases {
		for _, path := range []string{"//127.0.0.1:5432/x", "/a//b", "/./x", "/a/../b", "/%2e%2E/x", "/a/%2e", "/a/.%2e/"} {
			r := get(path)
			wantProblem(t, r, http.StatusBadRequest, "INVALID_REQUEST")
			if uri := r.Header.Get(sim.HeaderURI); uri != "" {
				t.Errorf("%s %s reached the app as %q", name, path, uri)
			}
		}
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("refused paths wrote rows: before %v, after %v", before, after)
	}
	// Normal paths, a trailing slash, dots inside a name and an escaped
	// slash still pass as they were sent.
	for name, get := range bases {
		for _, path := range []string{"/", "/a/b/", "/a.b/..c/x.", "/a%2Fb"} {
			if r := get(path); r.Status != http.StatusOK || r.Header.Get(sim.HeaderURI) != path {
				t.Errorf("%s %s: %d, the app saw %q; want 200 and the path as sent", name, path, r.Status, r.Header.Get(sim.HeaderURI))
			}
		}
	}
}

// setCookies is the query of the sim app's /response-headers that makes it
// answer with these Set-Cookie lines (and other headers).
func setCookies(h map[string][]string) string { return "response-headers?" + url.Values(h).Encode() }

// TestPreviewCookiesStayWithTheirApp: in path mode every preview and the
// console share Tether's origin, so an app's cookies are moved under the
// preview's own path and lose any Domain, an app cannot set Tether's
// preview cookie, and origin-wide headers (Clear-Site-Data) are dropped. A
// real cookie jar then sends the app's cookies to that app alone: not to
// another tenant's preview, the console or the API.
func TestPreviewCookiesStayWithTheirApp(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	idA, idB := b.readyWithPorts(t, keyA, 8080), b.readyWithPorts(t, keyB, 8080)
	pa, pb := b.preview(t, keyA, idA, map[string]any{"port": 8080}), b.preview(t, keyB, idB, map[string]any{"port": 8080})
	prefixA := strings.TrimSuffix(previewPath(t, pa), "/")

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar}
	get := func(u string) *response {
		t.Helper()
		res, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		body, _ := io.ReadAll(res.Body)
		return &response{Status: res.StatusCode, Header: res.Header, Body: body}
	}
	// A's app sets cookies as an app at the root of its own host would.
	res := get(b.URL + prefixA + "/" + setCookies(map[string][]string{
		"Set-Cookie": {"session=a-secret; Path=/; HttpOnly", "wide=1; Domain=127.0.0.1; Path=/", "deep=1; Path=/api",
			"plain=1", "tether_preview=planted; Path=/", "__Host-tether_preview=planted; Path=/; Secure"},
		"Clear-Site-Data": {`"cookies", "storage"`},
	}))
	if res.Status != http.StatusOK {
		t.Fatalf("the app's answer: %d", res.Status)
	}
	lines := res.Header.Values("Set-Cookie")
	if len(lines) != 4 {
		t.Errorf("Set-Cookie = %q; want the app's 4 cookies, not Tether's", lines)
	}
	for _, line := range lines {
		low := strings.ToLower(line)
		if strings.Contains(low, "domain=") || strings.Contains(low, "tether_preview") || !strings.Contains(line, "Path="+prefixA+"/") {
			t.Errorf("Set-Cookie %q; want it under %s/, without a Domain", line, prefixA)
		}
	}
	if v := res.Header.Get("Clear-Site-Data"); v != "" {
		t.Errorf("the app cleared Tether's origin: Clear-Site-Data %q", v)
	}
	// The jar sends them back to A's app, and to nothing else of Tether's
	// origin.
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if got := jar.Cookies(mustURL(b.URL + prefixA + "/page")); len(got) != 3 {
		t.Errorf("A's preview gets cookies %v; want session, wide and plain", got)
	}
	if got := jar.Cookies(mustURL(b.URL + prefixA + "/api/x")); len(got) != 4 {
		t.Errorf("A's preview under /api gets cookies %v; want deep too", got)
	}
	for _, other := range []string{previewPath(t, pb), previewPath(t, pb) + "api/x", "/ui/", "/v1/sandboxes", "/p/", "/"} {
		if got := jar.Cookies(mustURL(b.URL + other)); len(got) != 0 {
			t.Errorf("%s gets A's app's cookies %v", other, got)
		}
	}
	// Through the port route, with a key: under that route's prefix.
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+idA+"/ports/8080/"+setCookies(map[string][]string{"Set-Cookie": {"k=1; Path=/"}}), nil, as(keyA))
	if got, want := r.Header.Get("Set-Cookie"), "k=1; Path=/v1/sandboxes/"+idA+"/ports/8080/"; got != want {
		t.Errorf("through the port route Set-Cookie = %q; want %q", got, want)
	}
}

// TestPreviewHostsKeepCookiesApart: on wildcard preview hosts the
// token's redirect goes only to a path of the same host, an app's cookies
// lose any Domain (which would reach every other preview host) and never
// carry Tether's own name, and over HTTPS Tether's cookie is a __Host-
// one, which a cookie another host planted for the whole domain does not
// shadow.
func TestPreviewHostsKeepCookiesApart(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withConfig(func(c *httpapi.Config) {
		c.PreviewHost = "preview.test"
		c.PreviewBaseURL = "https://tether.test"
	}))
	id, other := b.readyWithPorts(t, keyA, 8080), b.readyWithPorts(t, keyB, 8080)
	p, po := b.preview(t, keyA, id, map[string]any{"port": 8080}), b.preview(t, keyB, other, map[string]any{"port": 8080})
	host := "8080-" + strings.Replace(id, "_", "-", 1) + ".preview.test"
	send := func(path string, hdr http.Header, cookies ...*http.Cookie) *response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		maps.Copy(req.Header, hdr)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		body, _ := io.ReadAll(res.Body)
		return &response{Status: res.StatusCode, Header: res.Header, Body: body}
	}
	cookiesOf := func(r *response) []*http.Cookie { return (&http.Response{Header: r.Header}).Cookies() }
	// The token's visit redirects to a path of this host, whatever the
	// path looks like.
	for _, path := range []string{"//evil.example/x", "/\\evil.example/x", "/%5C%5Cevil.example/x", "/app"} {
		res := send(path+"?tether_preview_token="+*p.Token, nil)
		loc := res.Header.Get("Location")
		if res.Status/100 == 3 && (!strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\")) {
			t.Errorf("%s: %d to %q; want a path of the same host", path, res.Status, loc)
		}
		if u, err := url.Parse(loc); err != nil || u.Host != "" {
			t.Errorf("%s: Location %q names a host", path, loc)
		}
	}
	// Over HTTPS the cookie is __Host-tether_preview: Secure, Path=/, no Domain.
	res := send("/?tether_preview_token="+*p.Token, http.Header{"X-Forwarded-Proto": {"https"}})
	var hostCookie *http.Cookie
	for _, ck := range cookiesOf(res) {
		if ck.Name == "__Host-tether_preview" {
			hostCookie = ck
		}
	}
	if hostCookie == nil || !hostCookie.Secure || hostCookie.Path != "/" || hostCookie.Domain != "" || !hostCookie.HttpOnly {
		t.Errorf("the token's visit over HTTPS set %v; want an HttpOnly, Secure __Host-tether_preview at Path=/", cookiesOf(res))
		if hostCookie = cookiesOf(res)[0]; hostCookie == nil {
			t.FailNow()
		}
	}
	// A plain tether_preview cookie another host set for the whole domain
	// (here another tenant's token, sent first) does not shadow it.
	planted := &http.Cookie{Name: "tether_preview", Value: *po.Token}
	if res := send("/page", nil, planted, hostCookie); res.Status != http.StatusOK || res.Header.Get(sim.HeaderSandbox) != id {
		t.Errorf("with a planted cookie before the host's own: %d from %q; want 200 from %s", res.Status, res.Header.Get(sim.HeaderSandbox), id)
	}
	// The app's cookies: no Domain, never Tether's name; the app's own Path
	// stays (the host is its own origin).
	res = send("/"+setCookies(map[string][]string{"Set-Cookie": {"a=1; Domain=preview.test; Path=/", "b=2; Path=/api; domain=.preview.test",
		"tether_preview=" + *po.Token + "; Domain=preview.test", "__Host-tether_preview=x; Path=/; Secure", "TETHER_PREVIEW=x"}}), nil, hostCookie)
	lines := res.Header.Values("Set-Cookie")
	if want := []string{"a=1; Path=/", "b=2; Path=/api"}; !slices.Equal(lines, want) {
		t.Errorf("the app's Set-Cookie = %q; want %q", lines, want)
	}
}
