package e2b_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/internal/e2b"
)

// fakeAPI stands in for /v1: it records every call and answers a GET of
// a sandbox with a ready one (held by node, when it is set); any other
// call is recorded as a write.
type fakeAPI struct {
	node   string
	mu     sync.Mutex
	writes []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		f.mu.Lock()
		f.writes = append(f.writes, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
	}
	node := ""
	if f.node != "" {
		node = `"node":"` + f.node + `",`
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"sbx_x","state":"ready","provider":"local",`+node+`"created_at":"2026-01-01T00:00:00Z"}`)
}

// TestBadInput: each bad call on the E2B face is answered in E2B's shape,
// {"code": status, "message": "..."}, with a 4xx status, and writes
// nothing through /v1.
func TestBadInput(t *testing.T) {
	t.Parallel()
	key := map[string]string{"X-API-Key": "k"}
	envd := map[string]string{"X-Access-Token": "k", "E2b-Sandbox-Id": "sbx_x"}
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
	}{
		{"no key", "POST", "/e2b/v2/sandboxes", `{"templateID":"base"}`, nil, 401},
		{"not JSON", "POST", "/e2b/v2/sandboxes", `{"templateID":`, key, 400},
		{"no body", "POST", "/e2b/v2/sandboxes", ``, key, 400},
		{"template of the wrong type", "POST", "/e2b/v2/sandboxes", `{"templateID":5}`, key, 400},
		{"no template", "POST", "/e2b/sandboxes", `{"timeout":30}`, key, 400},
		{"zero timeout", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","timeout":0}`, key, 400},
		{"negative timeout", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","timeout":-5}`, key, 400},
		{"auto-pause", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","autoPause":true}`, key, 400},
		{"a partial deny list", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"denyOut":["1.1.1.1"]}}`, key, 400},
		{"allowOut with all traffic let out", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["pypi.org"]}}`, key, 400},
		{"allowOut of all traffic", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["0.0.0.0/0"],"denyOut":["0.0.0.0/0"]}}`, key, 400},
		{"allowOut not a list", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"allowOut":"pypi.org","denyOut":["0.0.0.0/0"]}}`, key, 400},
		{"allowOut on a pool", "POST", "/e2b/v2/sandboxes", `{"templateID":"python","network":{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}}`, key, 400},
		{"no internet on a pool", "POST", "/e2b/v2/sandboxes", `{"templateID":"python","allow_internet_access":false}`, key, 400},
		{"deny all on a pool", "POST", "/e2b/v2/sandboxes", `{"templateID":"python","network":{"denyOut":["0.0.0.0/0"]}}`, key, 400},
		{"transform rules", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"rules":{"a.b":[]}}}`, key, 400},
		{"a masked host", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"maskRequestHost":"x"}}`, key, 400},
		{"public traffic not a boolean", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":{"allowPublicTraffic":"no"}}`, key, 400},
		{"network not an object", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","network":true}`, key, 400},
		{"metadata of the wrong type", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","metadata":{"a":1}}`, key, 400},
		{"the template label", "POST", "/e2b/v2/sandboxes", `{"templateID":"base","metadata":{"e2b.template":"x"}}`, key, 400},
		{"huge body", "POST", "/e2b/v2/sandboxes", `{"templateID":"` + strings.Repeat("a", 2<<20) + `"}`, key, 413},
		{"bad state", "GET", "/e2b/v2/sandboxes?state=dead", ``, key, 400},
		{"bad limit", "GET", "/e2b/v2/sandboxes?limit=0", ``, key, 400},
		{"limit over 100", "GET", "/e2b/v2/sandboxes?limit=101", ``, key, 400},
		{"ascending", "GET", "/e2b/v2/sandboxes?order=asc", ``, key, 400},
		{"bad startedAfter", "GET", "/e2b/v2/sandboxes?startedAfter=yesterday", ``, key, 400},
		{"timeout without a body", "POST", "/e2b/sandboxes/sbx_x/timeout", ``, key, 400},
		{"timeout of zero", "POST", "/e2b/sandboxes/sbx_x/timeout", `{"timeout":0}`, key, 400},
		{"timeout not JSON", "POST", "/e2b/sandboxes/sbx_x/timeout", `timeout`, key, 400},
		{"refresh too long", "POST", "/e2b/sandboxes/sbx_x/refreshes", `{"duration":3601}`, key, 400},
		{"pause without memory", "POST", "/e2b/sandboxes/sbx_x/pause", `{"memory":false}`, key, 400},
		{"connect with a negative timeout", "POST", "/e2b/v2/sandboxes/sbx_x/connect", `{"timeout":-1}`, key, 400},
		{"metrics", "GET", "/e2b/sandboxes/sbx_x/metrics", ``, key, 501},
		{"network update letting all out", "PUT", "/e2b/sandboxes/sbx_x/network", `{}`, key, 400},
		{"network update with an empty deny list", "PUT", "/e2b/sandboxes/sbx_x/network", `{"denyOut":[]}`, key, 400},
		{"network update with a partial deny", "PUT", "/e2b/sandboxes/sbx_x/network", `{"denyOut":["1.1.1.1"]}`, key, 400},
		{"network update with rules", "PUT", "/e2b/sandboxes/sbx_x/network", `{"rules":{},"denyOut":["0.0.0.0/0"]}`, key, 400},
		{"network update not an object", "PUT", "/e2b/sandboxes/sbx_x/network", `[]`, key, 400},
		{"network update internet not a boolean", "PUT", "/e2b/sandboxes/sbx_x/network", `{"allow_internet_access":"no"}`, key, 400},
		{"unknown route", "GET", "/e2b/nothing", ``, key, 404},
		{"envd without a token", "GET", "/e2b/envd/health", ``, map[string]string{"E2b-Sandbox-Id": "sbx_x"}, 401},
		{"envd without a sandbox", "GET", "/e2b/envd/files?path=/a", ``, map[string]string{"X-Access-Token": "k"}, 400},
		{"envd on another port", "GET", "/e2b/envd/health", ``, map[string]string{"X-Access-Token": "k", "E2b-Sandbox-Id": "sbx_x", "E2b-Sandbox-Port": "8080"}, 400},
		{"download without a path", "GET", "/e2b/envd/files", ``, envd, 400},
		{"upload in an unknown encoding", "POST", "/e2b/envd/files?path=/a", `x`, map[string]string{"X-Access-Token": "k", "E2b-Sandbox-Id": "sbx_x", "Content-Encoding": "br"}, 400},
		{"upload of bad gzip", "POST", "/e2b/envd/files?path=/a", `x`, map[string]string{"X-Access-Token": "k", "E2b-Sandbox-Id": "sbx_x", "Content-Encoding": "gzip"}, 400},
		{"multipart without a boundary", "POST", "/e2b/envd/files", `x`, map[string]string{"X-Access-Token": "k", "E2b-Sandbox-Id": "sbx_x", "Content-Type": "multipart/form-data"}, 400},
		{"upload without a path", "POST", "/e2b/envd/files", `x`, envd, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &fakeAPI{}
			h := e2b.New(e2b.Options{API: api})
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			var body struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("the body is not E2B's error: %v: %s", err, w.Body)
			}
			if body.Code != tc.want || body.Message == "" {
				t.Fatalf("body %+v, want code %d and a message", body, tc.want)
			}
			if len(api.writes) > 0 {
				t.Fatalf("a bad call wrote through /v1: %v", api.writes)
			}
		})
	}
}
