package http_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Tenants and keys every bundle registers.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
	keyA    = "key-a"
	keyB    = "key-b"
)

// Limits of the server under test.
const (
	testMaxLifetime = 24 * time.Hour
	testMaxWait     = 60 * time.Second
	defaultMaxBody  = 1 << 20
)

// globalsMu lets TestNewServerConcurrently run alone: should NewServer ever
// write package-level state again (it once wrote docs.SwaggerInfo.Host),
// the race detector then blames that test, not every test running.
var globalsMu sync.RWMutex

// renamedProvider is the real sim provider under another name, so that a
// server can have two providers (for the provider filter and the
// default-provider rules), reporting images as the local provider does.
type renamedProvider struct {
	*sim.Provider
	name   string
	images []domain.ProviderImage
}

func (p renamedProvider) Name() string { return p.name }

func (p renamedProvider) Info(ctx context.Context) domain.ProviderInfo {
	info := p.Provider.Info(ctx)
	info.Name, info.Images = p.name, p.images
	return info
}

// logSink collects the server's log lines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(s.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

type options struct {
	executor bool
	maxBody  int64
	ready    func(context.Context) error
	draining context.Context
	quotas   [3]int // TenantMaxLive, TenantCreatesPerMinute, KeyRequestsPerSecond
	config   func(*httpapi.Config)
	extra    []domain.Provider
	logLevel slog.Level
	wrap     func(*store.Store) tetherhttp.Store
}

type option func(*options)

// withExecutor starts a real executor, so that sandboxes get created and
// released.
func withExecutor() option { return func(o *options) { o.executor = true } }

// withProvider adds a provider after sim and sim-b.
func withProvider(p domain.Provider) option {
	return func(o *options) { o.extra = append(o.extra, p) }
}

// withMaxBody sets the server's MaxBodyBytes.
func withMaxBody(n int64) option { return func(o *options) { o.maxBody = n } }

// withQuotas sets the server's quotas (zero: the defaults).
func withQuotas(maxLive, createsPerMinute, keyRPS int) option {
	return func(o *options) { o.quotas = [3]int{maxLive, createsPerMinute, keyRPS} }
}

// withStoreWrap gives the API the store as wrap makes it (to count what
// reaches Postgres).
func withStoreWrap(wrap func(*store.Store) tetherhttp.Store) option {
	return func(o *options) { o.wrap = wrap }
}

// withConfig changes the server's configuration last.
func withConfig(f func(*httpapi.Config)) option { return func(o *options) { o.config = f } }

// withLogLevel sets the server log's level (default info), as LOG_LEVEL
// does.
func withLogLevel(l slog.Level) option { return func(o *options) { o.logLevel = l } }

// withDraining gives the server a draining context (Deps.Draining).
func withDraining(ctx context.Context) option { return func(o *options) { o.draining = ctx } }

// withReady replaces the readiness check.
func withReady(f func(context.Context) error) option { return func(o *options) { o.ready = f } }

// bundle is one running API on its own fresh database.
type bundle struct {
	URL     string
	Store   *store.Store
	SimDir  string
	Handler http.Handler
	client  *http.Client
	logs    *logSink
}

// setup starts the API on a fresh database with tenants A and B registered,
// providers sim (the default) and sim-b, and optionally an executor.
// Everything is stopped when the test ends.
func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	o := options{maxBody: defaultMaxBody}
	for _, f := range opts {
		f(&o)
	}
	logs := &logSink{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: o.logLevel}))
	st, notifier := storetest.NewNotified(t, log)
	ctx := context.Background()
	for tenant, key := range map[string]string{tenantA: keyA, tenantB: keyB} {
		if _, err := st.RegisterAPIKey(ctx, tenant, "key-"+tenant, key); err != nil {
			t.Fatalf("register key for %s: %v", tenant, err)
		}
	}

	// Registered first, so it runs after the server and workers stopped.
	t.Cleanup(func() {
		var bad []string
		for _, l := range logs.lines() {
			if strings.Contains(l, `"msg":"request failed"`) || strings.Contains(l, `"msg":"panic serving request"`) {
				bad = append(bad, l)
			}
		}
		if len(bad) > 0 {
			t.Errorf("the server logged %d failed request(s) (5xx or panic):\n%s", len(bad), strings.Join(bad, "\n"))
		}
		if t.Failed() {
			lines := logs.lines()
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("server log (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
		}
	})

	simDir := t.TempDir()
	simProvider, err := sim.New(simDir)
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	simB, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatalf("sim-b: %v", err)
	}
	providers := []domain.Provider{simProvider, renamedProvider{Provider: simB, name: "sim-b", images: []domain.ProviderImage{{Name: "bookworm", Source: "folder"}, {Name: "tools.v2", Source: "tarball"}}}}
	providers = append(providers, o.extra...)

	if o.executor {
		ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{PollInterval: 50 * time.Millisecond},
			st, notifier, providers, log, lifecycle.NewMetrics(nil))
		ex.Start(ctx)
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ex.Stop(sctx)
		})
	}

	ready := o.ready
	if ready == nil {
		ready = func(ctx context.Context) error { return st.Ping(ctx) }
	}
	reg := prometheus.NewRegistry()
	cfg := httpapi.Config{
		DefaultProvider: sim.Name,
		DefaultTTL:      time.Hour,
		DefaultOwnerTTL: time.Minute,
		MaxLifetime:     testMaxLifetime,
		CreateTimeout:   time.Minute,
		MaxBodyBytes:    o.maxBody,
		MaxWait:         testMaxWait,

		TenantMaxLive:          o.quotas[0],
		TenantCreatesPerMinute: o.quotas[1],
		KeyRequestsPerSecond:   o.quotas[2],
		// A tenant's rate is its key's here (tests of the tenant's own
		// rate set it apart).
		TenantRequestsPerSecond: o.quotas[2],
	}
	if o.config != nil {
		o.config(&cfg)
	}
	var apiStore tetherhttp.Store = st
	if o.wrap != nil {
		apiStore = o.wrap(st)
	}
	globalsMu.Lock()
	h := tetherhttp.NewServer(log, cfg, tetherhttp.Deps{
		Store:     apiStore,
		Changes:   notifier,
		Providers: providers,
		Ready:     ready,
		Metrics:   reg,
		Gatherer:  reg,
		Draining:  o.draining,
	})
	globalsMu.Unlock()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{URL: srv.URL, Store: st, SimDir: simDir, Handler: h, client: srv.Client(), logs: logs}
}

// response is a fully read HTTP response.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) String() string {
	return fmt.Sprintf("%d %s", r.Status, r.Body)
}

// decode decodes the body as JSON into v, failing the test if it cannot.
func (r *response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode response %s: %v", r, err)
	}
}

type request struct {
	auth    string // the Authorization header; "" means "Bearer key-a"
	noAuth  bool
	headers map[string]string
	chunked bool // send the body without a Content-Length
	trailer http.Header
}

type reqOpt func(*request)

// as sends the request with tenant key k.
func as(k string) reqOpt { return func(r *request) { r.auth = "Bearer " + k } }

// authHeader sends exactly this Authorization header.
func authHeader(v string) reqOpt { return func(r *request) { r.auth = v } }

// noAuth sends no Authorization header.
func noAuth() reqOpt { return func(r *request) { r.noAuth = true } }

func header(k, v string) reqOpt {
	return func(r *request) {
		if r.headers == nil {
			r.headers = map[string]string{}
		}
		r.headers[k] = v
	}
}

func chunked() reqOpt { return func(r *request) { r.chunked = true } }

// trailer sends the body chunked, followed by the trailer k: v.
func trailer(k, v string) reqOpt {
	return func(r *request) {
		r.chunked = true
		if r.trailer == nil {
			r.trailer = http.Header{}
		}
		r.trailer.Set(k, v)
	}
}

// leakMarkers are strings that betray Go, driver or SQL internals; no API
// response may contain them.
var leakMarkers = []string{
	"pgx.", "pgx/", "pgconn", "SQLSTATE", "json:", "runtime", "goroutine", "panic", "store:",
	"int64", "[]uint8", "map[string]", "reflect", "sql:", "syntax error at",
}

// rawBody is a request body as do sends it: nil, a string or []byte as
// is, anything else as JSON.
func rawBody(t *testing.T, body any) []byte {
	t.Helper()
	switch v := body.(type) {
	case nil:
		return nil
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatalf("encode request body: %v", err)
	}
	return raw
}

// do sends a request and reads the response. body is nil, a string or
// []byte (sent as is), or anything else (sent as JSON). Every response is
// checked for the properties that hold everywhere: never a 500, no
// internals in the body, and well-formed problem documents; and the request
// and the response are checked against the OpenAPI document
// (checkContract, in contract_test.go).
func (b *bundle) do(t *testing.T, method, path string, body any, opts ...reqOpt) *response {
	t.Helper()
	var rq request
	for _, o := range opts {
		o(&rq)
	}
	raw := rawBody(t, body)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(raw)
		if rq.chunked {
			rd = struct{ io.Reader }{rd} // hides the length
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.URL+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case rq.noAuth:
	case rq.auth == "":
		req.Header.Set("Authorization", "Bearer "+keyA)
	default:
		req.Header.Set("Authorization", rq.auth)
	}
	for k, v := range rq.headers {
		req.Header.Set(k, v)
	}
	req.Trailer = rq.trailer
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = res.Body.Close() }()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := &response{Status: res.StatusCode, Header: res.Header, Body: got}
	checkResponse(t, method, path, r)
	checkContract(t, req, raw, r)
	return r
}

func checkResponse(t *testing.T, method, path string, r *response) {
	t.Helper()
	if r.Status >= 500 && r.Status != http.StatusNotImplemented && r.Status != http.StatusServiceUnavailable &&
		(r.Status != http.StatusBadGateway || !bytes.Contains(r.Body, []byte(`"PORT_UNREACHABLE"`))) {
		t.Errorf("%s %s: got status %d, want no 5xx: %s", method, path, r.Status, r.Body)
	}
	if !strings.HasPrefix(path, "/metrics") && !strings.HasPrefix(path, "/swagger") && !strings.HasPrefix(path, "/openapi.") {
		for _, m := range leakMarkers {
			if bytes.Contains(r.Body, []byte(m)) {
				t.Errorf("%s %s: response leaks internals (%q): %s", method, path, m, r.Body)
			}
		}
	}
	if mediaType(r) == "application/problem+json" && method != http.MethodHead { // a HEAD answer has no body
		var p problem
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Errorf("%s %s: problem document is not JSON: %v: %s", method, path, err, r.Body)
			return
		}
		if p.Status != r.Status {
			t.Errorf("%s %s: problem status = %d, HTTP status = %d", method, path, p.Status, r.Status)
		}
		if p.Code == "" || p.Title == "" || p.Type == "" || strings.TrimSpace(p.Detail) == "" {
			t.Errorf("%s %s: problem lacks code, title, type or detail: %s", method, path, r.Body)
		}
		if id := r.Header.Get("X-Request-ID"); id != "" && p.RequestID != id {
			t.Errorf("%s %s: problem request_id = %q, X-Request-ID = %q", method, path, p.RequestID, id)
		}
	}
}

func mediaType(r *response) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// problem is an RFC 9457 problem document as the contract defines it.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	State     string `json:"state"`
	RequestID string `json:"request_id"`
}

// wantProblem asserts r is a problem+json response with the given status
// and code, and returns the problem.
func wantProblem(t *testing.T, r *response, status int, code string) problem {
	t.Helper()
	var p problem
	if mt := mediaType(r); r.Status != status || mt != "application/problem+json" {
		t.Errorf("got %d %s, want %d application/problem+json with code %s: %s", r.Status, r.Header.Get("Content-Type"), status, code, r.Body)
		return p
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem is not JSON: %v: %s", err, r.Body)
	}
	if p.Code != code {
		t.Errorf("code = %q, want %q (detail %q)", p.Code, code, p.Detail)
	}
	if strings.TrimSpace(p.Detail) == "" {
		t.Errorf("detail is empty: %s", r.Body)
	}
	return p
}

// wantStatus asserts r has the given status and a JSON body.
func wantStatus(t *testing.T, r *response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.Status, status, r.Body)
	}
	if mt := mediaType(r); mt != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", r.Header.Get("Content-Type"))
	}
}

// sandboxJSON is a sandbox as the contract shows it.
type sandboxJSON struct {
	FromSnapshot *string           `json:"from_snapshot"`
	ID           string            `json:"id"`
	State        string            `json:"state"`
	Provider     string            `json:"provider"`
	Owner        *string           `json:"owner"`
	Labels       map[string]string `json:"labels"`
	Reason       *string           `json:"reason"`
	Error        *string           `json:"error"`
	Released     bool              `json:"released"`
	ProviderID   *string           `json:"provider_id"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	ReadyAt      *time.Time        `json:"ready_at"`
	EndedAt      *time.Time        `json:"ended_at"`
	ReleasedAt   *time.Time        `json:"released_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
}

type sandboxList struct {
	Items      []sandboxJSON `json:"items"`
	NextCursor *string       `json:"next_cursor"`
}

type eventJSON struct {
	ID        int64     `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	At        time.Time `json:"at"`
	From      *string   `json:"from"`
	To        string    `json:"to"`
	Reason    *string   `json:"reason"`
	Actor     string    `json:"actor"`
	Message   string    `json:"message"`
}

type eventList struct {
	Items      []eventJSON `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

// create requests a sandbox for the tenant of key and returns it, failing
// the test unless the answer is 202.
func (b *bundle) create(t *testing.T, key string, body any) sandboxJSON {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/sandboxes", body, as(key))
	wantStatus(t, r, http.StatusAccepted)
	var sb sandboxJSON
	r.decode(t, &sb)
	return sb
}

// get returns the tenant's sandbox, failing the test unless it is 200.
func (b *bundle) get(t *testing.T, key, id string) sandboxJSON {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+id, nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var sb sandboxJSON
	r.decode(t, &sb)
	return sb
}

// list GETs a sandbox listing, failing the test unless it is 200.
func (b *bundle) list(t *testing.T, key, query string) sandboxList {
	t.Helper()
	path := "/v1/sandboxes"
	if query != "" {
		path += "?" + query
	}
	r := b.do(t, http.MethodGet, path, nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var l sandboxList
	r.decode(t, &l)
	return l
}

func (b *bundle) events(t *testing.T, key, path string) eventList {
	t.Helper()
	r := b.do(t, http.MethodGet, path, nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var l eventList
	r.decode(t, &l)
	return l
}

// rowCounts are the row counts of every table of the schema (but goose's
// own), so that "nothing was written" holds for tables added later too.
type rowCounts map[string]int64

func (c rowCounts) String() string {
	keys := slices.Sorted(maps.Keys(c))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (c rowCounts) equal(o rowCounts) bool { return maps.Equal(c, o) }

func (b *bundle) counts(t *testing.T) rowCounts {
	t.Helper()
	ctx := context.Background()
	rows, err := b.Store.Pool().Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'goose_db_version'
		ORDER BY table_name`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	if !slices.Contains(tables, "sandboxes") || !slices.Contains(tables, "sandbox_events") {
		t.Fatalf("schema has tables %v, want sandboxes and sandbox_events among them", tables)
	}
	selects := make([]string, len(tables))
	for i, name := range tables {
		selects[i] = "(SELECT count(*) FROM " + pgx.Identifier{name}.Sanitize() + ")"
	}
	vals := make([]int64, len(tables))
	dest := make([]any, len(tables))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := b.Store.Pool().QueryRow(ctx, "SELECT "+strings.Join(selects, ", ")).Scan(dest...); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	c := rowCounts{}
	for i, name := range tables {
		c[name] = vals[i]
	}
	return c
}

// eventually polls cond every 25ms until it holds or timeout passes.
// wantLoggedAt waits for the n request lines ("http request") of the
// request that r answers (by its X-Request-ID; a forwarded call is logged
// by both nodes) and checks they are at level.
func wantLoggedAt(t *testing.T, logs *logSink, r *response, n int, level string) {
	t.Helper()
	id := r.Header.Get("X-Request-ID")
	var lines []string
	eventually(t, 10*time.Second, "the request's log lines", func() bool {
		lines = lines[:0]
		for _, l := range logs.lines() {
			if strings.Contains(l, `"msg":"http request"`) && strings.Contains(l, `"request_id":"`+id+`"`) {
				lines = append(lines, l)
			}
		}
		return len(lines) >= n
	})
	for _, l := range lines {
		if !strings.Contains(l, `"level":"`+level+`"`) {
			t.Errorf("request %s is logged not at %s: %s", id, level, l)
		}
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// simHas reports whether the sim holds a resource for the sandbox.
func (b *bundle) simHas(t *testing.T, id string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(b.SimDir, id))
	if err == nil {
		return true
	}
	if !os.IsNotExist(err) {
		t.Fatalf("stat sim resource: %v", err)
	}
	return false
}

// simCreates counts the creates.log lines for the sandbox.
func (b *bundle) simCreates(t *testing.T, id string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.SimDir, "creates.log"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatalf("read creates.log: %v", err)
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			n++
		}
	}
	return n
}

func ids(items []sandboxJSON) []string {
	out := make([]string, len(items))
	for i, sb := range items {
		out[i] = sb.ID
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
