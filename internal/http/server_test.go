package http_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/docs"
	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		r := b.do(t, http.MethodGet, path, nil, noAuth())
		wantStatus(t, r, http.StatusOK)
		var h struct{ Status string }
		r.decode(t, &h)
		if h.Status != "ok" {
			t.Errorf("%s status = %q, want ok", path, h.Status)
		}
	}
}

// TestReadyzFollowsTheReadinessCheck checks that /readyz reports the
// readiness check (Postgres), without its cause, and /healthz does not.
func TestReadyzFollowsTheReadinessCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, withReady(func(context.Context) error {
		return errors.New("pgx: dial tcp 10.0.0.1:5432: connection refused")
	}))
	r := b.do(t, http.MethodGet, "/readyz", nil, noAuth())
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %s, want 503", r)
	}
	if strings.Contains(string(r.Body), "10.0.0.1") {
		t.Errorf("/readyz leaks the cause: %s", r.Body)
	}
	wantStatus(t, b.do(t, http.MethodGet, "/healthz", nil, noAuth()), http.StatusOK)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil), http.StatusOK)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/nope", nil), http.StatusNotFound, "NOT_FOUND")
	r := b.do(t, http.MethodGet, "/metrics", nil, noAuth())
	if r.Status != http.StatusOK {
		t.Fatalf("/metrics = %d", r.Status)
	}
	body := string(r.Body)
	for _, want := range []string{
		"tether_http_request_duration_seconds",
		`tether_http_request_duration_seconds_count{method="GET",route="/v1/sandboxes",status="200"} 1`,
		`tether_http_request_duration_seconds_count{method="GET",route="/v1/sandboxes/:id",status="404"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestSwaggerDocumentsTheAPI checks that the generated OpenAPI document
// describes every implemented /v1 route.
func TestSwaggerDocumentsTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	globalsMu.RLock() // see globalsMu
	r := b.do(t, http.MethodGet, "/swagger/doc.json", nil, noAuth())
	index := b.do(t, http.MethodGet, "/swagger/index.html", nil, noAuth())
	globalsMu.RUnlock()
	if r.Status != http.StatusOK || mediaType(r) != "application/json" {
		t.Fatalf("/swagger/doc.json = %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	// go-swagger users get the committed document itself: swag's runtime
	// rendering adds "host": "" and "schemes": [], which Swagger 2.0 refuses.
	if !bytes.Equal(r.Body, docs.SwaggerJSON) {
		t.Error("/swagger/doc.json is not docs/swagger.json byte for byte")
	}
	var top map[string]json.RawMessage
	r.decode(t, &top)
	for _, field := range []string{"host", "schemes"} {
		if v, ok := top[field]; ok && (string(v) == `""` || string(v) == "[]") {
			t.Errorf("/swagger/doc.json has an empty %q (%s), invalid in Swagger 2.0", field, v)
		}
	}
	if index.Status != http.StatusOK || !strings.Contains(string(index.Body), "swagger") {
		t.Errorf("/swagger/index.html = %d", index.Status)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	r.decode(t, &doc)
	documented := func(method, path string) bool {
		_, ok := doc.Paths[path][strings.ToLower(method)]
		return ok
	}

	// The contract's implemented paths, as the API documents them.
	for _, c := range [][2]string{
		{"POST", "/v1/sandboxes"}, {"GET", "/v1/sandboxes"}, {"GET", "/v1/sandboxes/{id}"},
		{"DELETE", "/v1/sandboxes/{id}"}, {"GET", "/v1/sandboxes/{id}/events"}, {"GET", "/v1/events"},
		{"GET", "/v1/providers"}, {"GET", "/healthz"}, {"GET", "/readyz"},
	} {
		if !documented(c[0], c[1]) {
			t.Errorf("doc.json does not document %s %s", c[0], c[1])
		}
	}

	// Every /v1 route the server has, unless it is a reserved stub that
	// answers 501 whatever it is sent.
	engine, ok := b.Handler.(*gin.Engine)
	if !ok {
		t.Fatalf("NewServer returned %T, want *gin.Engine", b.Handler)
	}
	probeID := domain.NewID()
	var checked, stubs []string
	for _, rt := range engine.Routes() {
		if !strings.HasPrefix(rt.Path, "/v1/") {
			continue
		}
		path, probe := rt.Path, rt.Path
		for _, seg := range strings.Split(rt.Path, "/") {
			name, ok := strings.CutPrefix(seg, ":")
			if !ok {
				name, ok = strings.CutPrefix(seg, "*")
			}
			if ok {
				path = strings.Replace(path, seg, "{"+name+"}", 1)
				value := "probe-owner"
				if name == "id" {
					value = probeID
				}
				probe = strings.Replace(probe, seg, value, 1)
			}
		}
		// A stub answers 501 whatever it is sent. Only routes on an id or
		// owner are probed: with one that does not exist, they write
		// nothing.
		if probe != rt.Path {
			if res := b.do(t, rt.Method, probe, "{}"); res.Status == http.StatusNotImplemented {
				stubs = append(stubs, rt.Method+" "+path)
				continue
			}
		}
		checked = append(checked, rt.Method+" "+path)
		if !documented(rt.Method, path) {
			t.Errorf("route %s %s is served but not in doc.json", rt.Method, path)
		}
	}
	sort.Strings(stubs)
	t.Logf("documented routes checked: %v; reserved stubs (501, not checked): %v", checked, stubs)
	if len(checked) < 7 {
		t.Errorf("checked only %d /v1 routes: %v", len(checked), checked)
	}
}

// TestReservedRoutesAnswerNotSupported checks that the routes of the
// contract not implemented yet answer 501 NOT_SUPPORTED as problems, after
// authentication.
func TestReservedRoutesAnswerNotSupported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := domain.NewID()
	for _, c := range [][2]string{
		{http.MethodPost, "/v1/sandboxes/" + id + "/renew"},
		{http.MethodPost, "/v1/sandboxes/" + id + "/exec"},
		{http.MethodPut, "/v1/sandboxes/" + id + "/files?path=/a"},
		{http.MethodGet, "/v1/sandboxes/" + id + "/files?path=/a"},
		{http.MethodPut, "/v1/owners/agent-1/lease"},
		{http.MethodDelete, "/v1/owners/agent-1"},
	} {
		r := b.do(t, c[0], c[1], "{}", noAuth())
		if r.Status != http.StatusUnauthorized {
			t.Errorf("%s %s without a key = %d, want 401", c[0], c[1], r.Status)
		}
		r = b.do(t, c[0], c[1], "{}")
		if r.Status == http.StatusNotImplemented {
			wantProblem(t, r, http.StatusNotImplemented, "NOT_SUPPORTED")
		} else {
			t.Logf("%s %s is implemented now (%d)", c[0], c[1], r.Status)
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/nope", "/v1/nope", "/v2/sandboxes", "/v1/sandboxes/" + domain.NewID() + "/nope"} {
		wantProblem(t, b.do(t, http.MethodGet, path, nil), http.StatusNotFound, "NOT_FOUND")
		wantProblem(t, b.do(t, http.MethodGet, path, nil, noAuth()), http.StatusNotFound, "NOT_FOUND")
	}
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPatch, "/v1/sandboxes", "GET"},
		{http.MethodPut, "/v1/sandboxes", "POST"},
		{http.MethodPost, "/v1/sandboxes/" + domain.NewID(), "DELETE"},
		{http.MethodPost, "/healthz", "GET"},
		{http.MethodDelete, "/v1/events", "GET"},
	} {
		before := b.counts(t)
		r := b.do(t, c.method, c.path, `{}`)
		wantProblem(t, r, http.StatusMethodNotAllowed, "INVALID_REQUEST")
		if allow := r.Header.Get("Allow"); !strings.Contains(allow, c.allow) {
			t.Errorf("%s %s: Allow = %q, want it to include %s", c.method, c.path, allow, c.allow)
		}
		if after := b.counts(t); !after.equal(before) {
			t.Errorf("%s %s wrote rows: %v -> %v", c.method, c.path, before, after)
		}
	}
}

func TestProviders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/v1/providers", nil)
	wantStatus(t, r, http.StatusOK)
	var l struct {
		Items []struct {
			Name         string `json:"name"`
			Default      bool   `json:"default"`
			Available    bool   `json:"available"`
			Capabilities struct {
				Exec  *bool `json:"exec"`
				Files *bool `json:"files"`
			} `json:"capabilities"`
			Images []map[string]string `json:"images"`
		} `json:"items"`
	}
	r.decode(t, &l)
	if len(l.Items) != 2 || l.Items[0].Name != "sim" || !l.Items[0].Default || l.Items[1].Name != "sim-b" || l.Items[1].Default {
		t.Fatalf("providers = %s, want sim (default) then sim-b", r.Body)
	}
	// Images: [] for a provider without any (never null), else each with
	// its name and source, in the provider's order.
	if l.Items[0].Images == nil || len(l.Items[0].Images) != 0 {
		t.Errorf("sim's images = %v in %s, want []", l.Items[0].Images, r.Body)
	}
	wantImages := []map[string]string{{"name": "bookworm", "source": "folder"}, {"name": "tools.v2", "source": "tarball"}}
	if !reflect.DeepEqual(l.Items[1].Images, wantImages) {
		t.Errorf("sim-b's images = %v, want %v", l.Items[1].Images, wantImages)
	}
	for _, p := range l.Items {
		if !p.Available || p.Capabilities.Exec == nil || p.Capabilities.Files == nil {
			t.Errorf("provider %s: available %v, capabilities %s; want available with exec and files flags", p.Name, p.Available, r.Body)
		}
	}
	// UNKNOWN_PROVIDER names the enabled providers.
	p := wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"provider":"aws"}`), http.StatusBadRequest, "UNKNOWN_PROVIDER")
	if !strings.Contains(p.Detail, "sim") || !strings.Contains(p.Detail, "sim-b") {
		t.Errorf("UNKNOWN_PROVIDER detail %q does not name the enabled providers", p.Detail)
	}
}

// TestHostileInputDoesNotBreakTheServer sends deeply nested JSON, huge
// numbers and extreme cursors: each is answered without a 5xx, nothing is
// written, and the server goes on serving.
func TestHostileInputDoesNotBreakTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const depth = 100_000
	deepArrays := `{"params":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	deepObjects := `{"params":` + strings.Repeat(`{"a":`, 9000) + `1` + strings.Repeat("}", 9000) + `}`
	deepLabels := `{"labels":{"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`
	unclosed := `{"params":` + strings.Repeat("[", depth)
	before := b.counts(t)
	for _, body := range []string{
		deepArrays, deepObjects, deepLabels, unclosed,
		`{"ttl_seconds":1e400}`,
		`{"ttl_seconds":-1e400}`,
		`{"ttl_seconds":` + strings.Repeat("9", 5000) + `}`,
		`{"ttl_seconds":0.` + strings.Repeat("0", 5000) + `1}`,
		`{"params":{"create_delay_ms":1e400}}`,
		`{"params":{"create_delay_ms":` + strings.Repeat("9", 5000) + `}}`,
		`{"labels":{"k":"\ud800"}}` + "\xff",
		"\xef\xbb\xbf{}", // a byte order mark
	} {
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body)
		if r.Status != http.StatusBadRequest {
			t.Errorf("hostile body (%.40q...) = %s, want 400", body, r)
		}
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("hostile bodies wrote rows: %v -> %v", before, after)
	}

	// Cursors that decode but name absurd times: a 400 or an empty page, never a 5xx.
	id := domain.NewID()
	for _, raw := range []string{
		"-9223372036854775808|" + id, "9223372036854775807|" + id, "-62135596800000001|" + id, "253402300800000000|" + id,
	} {
		c := url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(raw)))
		r := b.do(t, http.MethodGet, "/v1/sandboxes?cursor="+c, nil)
		if r.Status != http.StatusOK && r.Status != http.StatusBadRequest {
			t.Errorf("cursor %q = %s, want 200 or 400", raw, r)
		}
		if r.Status == http.StatusBadRequest {
			wantProblem(t, r, http.StatusBadRequest, "INVALID_REQUEST")
		}
	}
	for _, q := range []string{"created_after=9999-12-31T23:59:59Z", "created_before=0000-01-01T00:00:00Z", "created_after=0001-01-01T00:00:00%2B23:59"} {
		r := b.do(t, http.MethodGet, "/v1/sandboxes?"+q, nil)
		if r.Status != http.StatusOK && r.Status != http.StatusBadRequest {
			t.Errorf("?%s = %s, want 200 or 400", q, r)
		}
	}
	wantStatus(t, b.do(t, http.MethodGet, "/healthz", nil, noAuth()), http.StatusOK)
	b.create(t, keyA, `{}`)
}

// TestNewServerConcurrently builds two servers at once, as parallel tests
// and multi-tenant embedders do. NewServer must not write package-level
// state; under -race this test reports such a write.
//
// It is deliberately not parallel: the race detector blames every test
// running when it fires, so it runs alone, before the parallel tests resume.
func TestNewServerConcurrently(t *testing.T) {
	globalsMu.Lock()
	defer globalsMu.Unlock()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_ = tetherhttp.NewServer(log, httpapi.Config{DefaultProvider: "sim", MaxBodyBytes: 1 << 10}, tetherhttp.Deps{})
		})
	}
	wg.Wait()
}
