package e2b_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/e2b"
)

// TestProcessOnAnotherNode: the daemon's process calls for a sandbox held
// by another node are refused (unavailable) before anything goes through
// /v1, which would forward a start to that node while the output could
// not be read here.
func TestProcessOnAnotherNode(t *testing.T) {
	t.Parallel()
	for _, call := range []struct{ method, body string }{
		{"List", `{}`},
		{"SendSignal", `{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}`},
		{"SendInput", `{"process":{"pid":1},"input":{"stdin":"eA=="}}`},
		{"CloseStdin", `{"process":{"pid":1}}`},
		{"Update", `{"process":{"pid":1},"pty":{"size":{"rows":5,"cols":5}}}`},
	} {
		t.Run(call.method, func(t *testing.T) {
			t.Parallel()
			api := &fakeAPI{node: "b"}
			h := e2b.New(e2b.Options{API: api, Node: "a"})
			req := httptest.NewRequest(http.MethodPost, "/e2b/envd/process.Process/"+call.method, strings.NewReader(call.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Access-Token", "k")
			req.Header.Set("E2b-Sandbox-Id", "sbx_x")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"unavailable"`) || !strings.Contains(w.Body.String(), "node b") {
				t.Fatalf("status %d %s, want 503 unavailable naming node b", w.Code, w.Body)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.writes) > 0 {
				t.Fatalf("the call went through /v1: %v", api.writes)
			}
		})
	}
}
