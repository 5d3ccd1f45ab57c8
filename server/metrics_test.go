package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestMetricsAddr: /metrics is on the API's address, without a key, by
// default; with METRICS_ADDR it is served there alone, and the API's
// address answers it 404.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim"})
	if code, body := get(s.base + "/metrics"); code != http.StatusOK || !strings.Contains(body, "tether_http_request_duration_seconds") {
		t.Errorf("default: the API's /metrics = %d", code)
	}

	s = start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim", "METRICS_ADDR": "127.0.0.1:0"})
	metrics := ""
	for deadline := time.Now().Add(10 * time.Second); metrics == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.SplitSeq(s.logs.String(), "\n") {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "metrics listening" {
				metrics = "http://" + rec.Addr
			}
		}
	}
	if metrics == "" {
		t.Fatalf("no metrics listener logged:\n%s", s.logs)
	}
	if code, _ := get(s.base + "/metrics"); code != http.StatusNotFound {
		t.Errorf("METRICS_ADDR set: the API's /metrics = %d; want 404", code)
	}
	if code, body := get(metrics + "/metrics"); code != http.StatusOK || !strings.Contains(body, "tether_http_request_duration_seconds") ||
		!strings.Contains(body, "tether_registry_up") {
		t.Errorf("METRICS_ADDR's /metrics = %d", code)
	}
	for _, path := range []string{"/v1/sandboxes", "/readyz", "/debug/pprof/"} {
		if code, _ := get(metrics + path); code != http.StatusNotFound {
			t.Errorf("METRICS_ADDR's %s = %d; want 404 (metrics only)", path, code)
		}
	}
}
