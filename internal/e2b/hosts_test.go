package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/internal/credential"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b"
)

// A sandbox id of Tether's shape.
const hostID = "sbx_06h5320zhpevw3t7avy66y2s40"

// TestParseHostLabel: a host's first label is read as E2B's proxy reads
// it, "{port}-{sandbox id}", with Tether's id in either spelling; what is
// not is E2B's 400 of the part that is wrong.
func TestParseHostLabel(t *testing.T) {
	t.Parallel()
	for label, want := range map[string]string{
		"8080-" + hostID:                      "ok 8080",
		"1-" + hostID:                         "ok 1",
		"65535-" + hostID:                     "ok 65535",
		"3000-sbx-06h5320zhpevw3t7avy66y2s40": "ok 3000",
		"":                                    "Invalid host",
		"8080":                                "Invalid host",
		"8080-":                               "Invalid host",
		"-" + hostID:                          "Invalid host",
		"8080-" + hostID + ".x":               "Invalid host",
		"0-" + hostID:                         "Invalid sandbox port",
		"65536-" + hostID:                     "Invalid sandbox port",
		"08080-" + hostID:                     "Invalid sandbox port",
		"+80-" + hostID:                       "Invalid sandbox port",
		"http-" + hostID:                      "Invalid sandbox port",
		"99999999999999999999-" + hostID:      "Invalid sandbox port",
		"8080-sbx_short":                      "Invalid sandbox ID",
		"8080-" + hostID + "-3000":            "Invalid sandbox ID",
		"8080-" + strings.TrimPrefix(hostID, "sbx_"): "Invalid sandbox ID",
		"8080-sbx__06h5320zhpevw3t7avy66y2s4":        "Invalid sandbox ID",
	} {
		id, port, err := e2b.ParseHostLabel(label)
		var he *e2b.HostError
		switch {
		case strings.HasPrefix(want, "ok "):
			if err != nil || id != hostID || "ok "+itoa(port) != want {
				t.Errorf("%q = %q, %d, %v; want %s of %s", label, id, port, err, want, hostID)
			}
		case !errors.As(err, &he) || he.Status != http.StatusBadRequest || he.Message != want:
			t.Errorf("%q = %v; want 400 %q", label, err, want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestHostAccess: a sandbox that allows public traffic lets every request
// through, token or not; one that does not lets through only its own
// traffic access token, and answers E2B's 403s otherwise.
func TestHostAccess(t *testing.T) {
	t.Parallel()
	tg := credential.NewTagger([]byte("secret"))
	token := e2b.TrafficToken(tg, hostID)
	if !strings.HasPrefix(token, "tta_") || e2b.TrafficToken(tg, hostID) != token {
		t.Fatalf("TrafficToken = %q, not stable or not tta_", token)
	}
	header := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set("e2b-traffic-access-token", v)
		}
		return h
	}
	public := domain.E2BSandbox{SandboxID: hostID, PublicTraffic: true}
	private := domain.E2BSandbox{SandboxID: hostID}
	for _, h := range []http.Header{header(""), header("wrong"), header(token)} {
		if err := e2b.HostAccess(nil, public, h); err != nil {
			t.Errorf("public sandbox with %v: %v", h, err)
		}
	}
	if err := e2b.HostAccess(tg, private, header(token)); err != nil {
		t.Errorf("private sandbox with its token: %v", err)
	}
	for v, want := range map[string]string{
		"":                                   "is missing",
		"wrong":                              "is invalid",
		token + "x":                          "is invalid",
		e2b.TrafficToken(tg, domain.NewID()): "is invalid",
		e2b.TrafficToken(credential.NewTagger([]byte("other")), hostID): "is invalid",
	} {
		err := e2b.HostAccess(tg, private, header(v))
		var he *e2b.HostError
		if !errors.As(err, &he) || he.Status != http.StatusForbidden || !strings.Contains(he.Message, want) ||
			he.SandboxID != hostID || e2b.InvalidToken(err) != (want == "is invalid") {
			t.Errorf("private sandbox with %q: %v; want 403 %q", v, err, want)
		}
	}
}

// TestHostErrorShapes: E2B's proxy answers a host it cannot read in
// plain text, everything else as JSON naming the sandbox (and the port,
// for a closed one).
func TestHostErrorShapes(t *testing.T) {
	t.Parallel()
	_, _, err := e2b.ParseHostLabel("x")
	var he *e2b.HostError
	if !errors.As(err, &he) {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	he.Write(w)
	if w.Code != 400 || w.Body.String() != "Invalid host\n" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("invalid host = %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	for _, tc := range []struct {
		err  *e2b.HostError
		want string
	}{
		{e2b.HostNotFound(hostID), `{"sandboxId":"` + hostID + `","message":"The sandbox was not found","code":502}`},
		{e2b.PortClosed(hostID, 3000), `{"sandboxId":"` + hostID + `","message":"The sandbox is running but port is not open","port":3000,"code":502}`},
	} {
		w := httptest.NewRecorder()
		tc.err.Write(w)
		if w.Code != 502 || w.Body.String() != tc.want || w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%v = %d %q %q; want 502 %s", tc.err, w.Code, w.Header().Get("Content-Type"), w.Body, tc.want)
		}
	}
}

// fakeHosts is a HostStore in memory; fail makes its records fail.
type fakeHosts struct {
	mu   sync.Mutex
	recs map[string]domain.E2BSandbox
	fail bool
	// unavailable makes the failure the store's for an unreachable
	// Postgres.
	unavailable bool
}

func (f *fakeHosts) RecordE2BSandbox(_ context.Context, id string, public bool) (domain.E2BSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable {
		return domain.E2BSandbox{}, fmt.Errorf("store: record e2b sandbox: %w", domain.Errorf(domain.CodeUnavailable, "the registry is temporarily unavailable"))
	}
	if f.fail {
		return domain.E2BSandbox{}, errors.New("postgres is down")
	}
	if f.recs == nil {
		f.recs = map[string]domain.E2BSandbox{}
	}
	f.recs[id] = domain.E2BSandbox{SandboxID: id, Tenant: "t", PublicTraffic: public}
	return f.recs[id], nil
}

func (f *fakeHosts) E2BSandbox(_ context.Context, id string) (domain.E2BSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.recs[id]; ok {
		return r, nil
	}
	return domain.E2BSandbox{}, domain.ErrNotFound
}

var hostsTagger = credential.NewTagger([]byte("secret"))

func (f *fakeHosts) Credentials(context.Context) (*credential.Tagger, error) { return hostsTagger, nil }

// call serves one control-plane call of the face h and decodes its answer.
func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("X-API-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
	return w.Code, out
}

// TestCreateRecordsPublicTraffic: a create records its sandbox with its
// network.allowPublicTraffic, true unless it says false (E2B's default);
// the create, connect and detail answer the domain, and a traffic access
// token only for a sandbox that needs one; a sandbox not made here (a
// /v1 one) gets the domain and no token. Without a domain, null.
func TestCreateRecordsPublicTraffic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		public bool
	}{
		{`{"templateID":"base"}`, true},
		{`{"templateID":"base","network":{}}`, true},
		{`{"templateID":"base","network":{"allowPublicTraffic":true}}`, true},
		{`{"templateID":"base","network":{"allowPublicTraffic":false}}`, false},
	} {
		hosts := &fakeHosts{}
		h := e2b.New(e2b.Options{API: &fakeAPI{}, Domain: "e2b.example.com", Hosts: hosts})
		status, a := call(t, h, http.MethodPost, "/e2b/v2/sandboxes", tc.body)
		if status != http.StatusCreated || a["domain"] != "e2b.example.com" {
			t.Fatalf("%s: %d %v", tc.body, status, a)
		}
		rec, err := hosts.E2BSandbox(t.Context(), "sbx_x")
		if err != nil || rec.PublicTraffic != tc.public {
			t.Errorf("%s: recorded %+v, %v; want public %v", tc.body, rec, err, tc.public)
		}
		want := any(nil)
		if !tc.public {
			want = e2b.TrafficToken(hostsTagger, "sbx_x")
		}
		if a["trafficAccessToken"] != want {
			t.Errorf("%s: trafficAccessToken %v, want %v", tc.body, a["trafficAccessToken"], want)
		}
		status, c := call(t, h, http.MethodPost, "/e2b/sandboxes/sbx_x/connect", `{}`)
		if status != http.StatusOK || c["trafficAccessToken"] != want || c["domain"] != "e2b.example.com" {
			t.Errorf("%s: connect = %d %v", tc.body, status, c)
		}
		status, d := call(t, h, http.MethodGet, "/e2b/sandboxes/sbx_x", ``)
		if n, _ := d["network"].(map[string]any); status != http.StatusOK || d["domain"] != "e2b.example.com" || n["allowPublicTraffic"] != tc.public {
			t.Errorf("%s: detail = %d %v", tc.body, status, d)
		}
	}
	// A sandbox not made here.
	h := e2b.New(e2b.Options{API: &fakeAPI{}, Domain: "e2b.example.com", Hosts: &fakeHosts{}})
	status, c := call(t, h, http.MethodPost, "/e2b/sandboxes/sbx_x/connect", `{}`)
	if status != http.StatusOK || c["trafficAccessToken"] != nil || c["domain"] != "e2b.example.com" {
		t.Errorf("connect of a /v1 sandbox = %d %v", status, c)
	}
	if _, d := call(t, h, http.MethodGet, "/e2b/sandboxes/sbx_x", ``); d["network"] != nil {
		t.Errorf("detail of a /v1 sandbox names a network: %v", d)
	}
	// No domain: null, as before.
	h = e2b.New(e2b.Options{API: &fakeAPI{}})
	status, a := call(t, h, http.MethodPost, "/e2b/v2/sandboxes", `{"templateID":"base"}`)
	if v, ok := a["domain"]; status != http.StatusCreated || !ok || v != nil {
		t.Errorf("create without a domain = %d %v", status, a)
	}
}

// TestCreateThatCannotRecordDeletes: a create whose sandbox cannot be
// recorded for its hosts deletes it and fails (500), rather than answer a
// sandbox its hosts would not serve.
func TestCreateThatCannotRecordDeletes(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	h := e2b.New(e2b.Options{API: api, Domain: "e2b.example.com", Hosts: &fakeHosts{fail: true}})
	status, a := call(t, h, http.MethodPost, "/e2b/v2/sandboxes", `{"templateID":"base"}`)
	if status != http.StatusInternalServerError || a["code"] != float64(500) {
		t.Fatalf("create = %d %v; want 500", status, a)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.writes) != 2 || api.writes[1] != "DELETE /v1/sandboxes/sbx_x" {
		t.Fatalf("/v1 writes = %v; want the create and its delete", api.writes)
	}
}

// TestCreateWhileThePostgresIsDownIs503: a create whose record fails
// because Postgres is out of reach (a restart) deletes its sandbox and is
// answered 503, which E2B's SDK and its users retry, not 500.
func TestCreateWhilePostgresIsDownIs503(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	h := e2b.New(e2b.Options{API: api, Domain: "e2b.example.com", Hosts: &fakeHosts{unavailable: true}})
	status, a := call(t, h, http.MethodPost, "/e2b/v2/sandboxes", `{"templateID":"base"}`)
	if status != http.StatusServiceUnavailable || a["code"] != float64(503) {
		t.Fatalf("create = %d %v; want 503", status, a)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.writes) != 2 || api.writes[1] != "DELETE /v1/sandboxes/sbx_x" {
		t.Fatalf("/v1 writes = %v; want the create and its delete", api.writes)
	}
}
