package http_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Benchmarks of whole requests through the router, its middleware (request
// id, pacing, logging, metrics, auth, rate limits) and the handler, against
// the test Postgres, without the TCP of a real client: what Tether's own
// code costs per request. Compare allocs/op and ns/op with benchstat.

// benchServer is the API as `tether serve` runs it in the benchmark
// (cmd/bench): the key cache on, quotas out of the way, LOG_LEVEL=warn.
func benchServer(b *testing.B) *bundle {
	return setup(b, withQuotas(100_000_000, 100_000_000, 100_000_000), withLogLevel(slog.LevelWarn),
		withConfig(func(c *httpapi.Config) {
			c.AuthCacheTTL = httpapi.DefaultAuthCacheTTL
			c.TenantRequestsPerSecond = 100_000_000
		}))
}

// BenchmarkServeGetSandbox is GET /v1/sandboxes/{id} of a requested
// sandbox with a cached key.
func BenchmarkServeGetSandbox(b *testing.B) {
	bd := benchServer(b)
	sb, _, err := bd.Store.CreateSandbox(context.Background(), domain.CreateParams{
		Tenant: tenantA, Provider: "sim", Labels: map[string]string{"team": "a"}, TTL: testMaxLifetime / 2, CreateTimeout: testMaxWait,
	})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/"+sb.ID, nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		bd.Handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("GET: %d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkServeCreateSandbox is POST /v1/sandboxes of a sim sandbox, as
// the bench sends it (no executor: the sandbox stays requested).
func BenchmarkServeCreateSandbox(b *testing.B) {
	bd := benchServer(b)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(`{"provider":"sim"}`))
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		bd.Handler.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("POST: %d %s", w.Code, w.Body)
		}
	}
}
