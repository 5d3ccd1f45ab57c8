package http_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/http/controlplane"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// nodeSim is the sim provider with a data plane that says which node
// served it: exec answers "node N: COMMAND", and files live in the node's
// memory. Each simulated node has its own.
type nodeSim struct {
	*sim.Provider
	node string

	mu    sync.Mutex
	files map[string][]byte
	ran   []string // the commands Exec ran
}

func (p *nodeSim) Exec(_ context.Context, _ string, req domain.ExecRequest) (domain.ExecResult, error) {
	p.mu.Lock()
	p.ran = append(p.ran, req.Command)
	p.mu.Unlock()
	if req.Command == "output-every-byte" {
		return domain.ExecResult{Output: string(everyByte())}, nil
	}
	if size, ok := strings.CutPrefix(req.Command, "output-bytes "); ok {
		if n, err := strconv.Atoi(size); err == nil && n >= 0 {
			return domain.ExecResult{Output: strings.Repeat("x", n)}, nil // more than a socket holds
		}
	}
	return domain.ExecResult{Output: fmt.Sprintf("node %s: %s", p.node, req.Command)}, nil
}

// ExecStream says it started, then runs until its request goes away;
// the command stream-chunks instead emits streamChunks and ends.
func (p *nodeSim) ExecStream(ctx context.Context, _ string, req domain.ExecRequest, emit func(string, []byte) error) (domain.ExecResult, error) {
	if req.Command == "stream-chunks" {
		for _, c := range streamChunks {
			if err := emit(c.stream, []byte(c.data)); err != nil {
				return domain.ExecResult{}, err
			}
		}
		return domain.ExecResult{}, nil
	}
	if err := emit(domain.Stdout, []byte("node "+p.node+" started "+req.Command+"\n")); err != nil {
		return domain.ExecResult{}, err
	}
	<-ctx.Done()
	return domain.ExecResult{}, ctx.Err()
}

func (p *nodeSim) WriteFile(_ context.Context, id, path string, r io.Reader, limit int64) error {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > limit {
		return domain.Errorf(domain.CodePayloadTooLarge, "over %d bytes", limit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files[id+path] = b
	return nil
}

func (p *nodeSim) ReadFile(_ context.Context, id, path string, w io.Writer, _ int64) error {
	p.mu.Lock()
	b, ok := p.files[id+path]
	p.mu.Unlock()
	if !ok {
		return domain.Errorf(domain.CodeFileNotFound, "no file %s", path)
	}
	_, err := w.Write(b)
	return err
}

// twoNodes is two API servers of nodes "a" and "b" on one registry, each
// with its own provider, and a sandbox placed on b; b2 is a second replica
// of node b (same node id and provider), which node a does not call.
type twoNodes struct {
	a, b   *bundle
	b2     *bundle
	provB  *nodeSim
	onB    string
	secret []byte
	// reachedB counts the requests that reached node b's replica b.
	reachedB *atomic.Int64
}

func setupTwoNodes(t *testing.T, maxFile int64, drainA context.Context) twoNodes {
	t.Helper()
	logs := &logSink{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, notifier := storetest.NewNotified(t, log)
	ctx := t.Context()
	for tenant, key := range map[string]string{tenantA: keyA, tenantB: keyB} {
		if _, err := st.RegisterAPIKey(ctx, tenant, "key-"+tenant, key); err != nil {
			t.Fatal(err)
		}
	}
	secret, err := st.ClusterSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := twoNodes{secret: secret, reachedB: &atomic.Int64{}}
	for _, name := range []string{"a", "b", "b2"} {
		node := strings.TrimSuffix(name, "2")
		var draining context.Context
		if node == "a" {
			draining = drainA
		}
		simP, err := sim.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		p := &nodeSim{Provider: simP, node: node, files: map[string][]byte{}}
		if name == "b2" {
			p = out.provB // the same host
		}
		reg := prometheus.NewRegistry()
		globalsMu.Lock()
		h := tetherhttp.NewServer(log, httpapi.Config{
			DefaultProvider: sim.Name, MaxLifetime: testMaxLifetime, MaxWait: testMaxWait, MaxFileBytes: maxFile,
			// TestForwardableRoutes makes a refused (keyless) call to every
			// route, more than the default allows an address a second.
			AuthFailuresPerSecond: 10000,
			E2BDomain:             "e2b.test", // TestForwardedE2BHost
		}, tetherhttp.Deps{
			Store: st, Changes: notifier, Providers: []domain.Provider{p},
			Ready:   func(ctx context.Context) error { return st.Ping(ctx) },
			Metrics: reg, Gatherer: reg,
			Nodes:    cluster.Nodes{Self: node, Secret: secret, Finder: st, Nonces: st},
			Draining: draining,
		})
		globalsMu.Unlock()
		served := h
		if name == "b" {
			served = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				out.reachedB.Add(1)
				h.ServeHTTP(w, r)
			})
		}
		srv := httptest.NewServer(served)
		t.Cleanup(srv.Close)
		bd := &bundle{URL: srv.URL, Store: st, Handler: h, client: srv.Client(), logs: logs}
		if name == "b2" {
			out.b2 = bd
			continue
		}
		if err := st.Heartbeat(ctx, store.Node{ID: node, URL: srv.URL, Providers: []string{sim.Name}}, true); err != nil {
			t.Fatal(err)
		}
		if node == "a" {
			out.a = bd
		} else {
			out.b, out.provB = bd, p
		}
	}
	ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{PollInterval: 50 * time.Millisecond},
		st, notifier, []domain.Provider{out.provB}, log, lifecycle.NewMetrics(nil))
	ex.Start(ctx)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ex.Stop(sctx)
	})
	// It listens on port 8080 (the sim's echo; TestForwardedPorts).
	sb := out.a.create(t, keyA, map[string]any{"params": map[string]any{"ports": []int{8080}}})
	out.onB = sb.ID
	deadline := time.Now().Add(10 * time.Second)
	for out.a.get(t, keyA, sb.ID).State != "ready" {
		if time.Now().After(deadline) {
			t.Fatal("sandbox never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The executor is not host-bound here; place the sandbox by hand.
	if _, err := st.Pool().Exec(ctx, `UPDATE sandboxes SET node = 'b' WHERE id = $1`, sb.ID); err != nil {
		t.Fatal(err)
	}
	return out
}

var octets = header("Content-Type", "application/octet-stream")

// TestForwardToTheSandboxesNode: data-plane calls sent to any node reach
// the node the sandbox lives on, as the caller, within the caller's
// limits; forged or stale forwarding is refused; a dead node is a
// retryable 503.
func TestForwardToTheSandboxesNode(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	id := n.onB
	for _, via := range []*bundle{n.a, n.b} {
		r := via.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "hostname"}, as(keyA))
		wantStatus(t, r, http.StatusOK)
		if !bytes.Contains(r.Body, []byte("node b: hostname")) {
			t.Fatalf("exec via %s answered %s; want node b's answer", via.URL, r.Body)
		}
	}
	// A file written through a reaches b; read back through a.
	if r := n.a.do(t, http.MethodPut, "/v1/sandboxes/"+id+"/files?path=/workspace/x", "hello b", as(keyA), octets); r.Status != http.StatusNoContent {
		t.Fatalf("write through a = %s; want 204", r)
	}
	if got := string(n.provB.files[id+"/workspace/x"]); got != "hello b" {
		t.Fatalf("node b holds %q; want the file written through a", got)
	}
	if r := n.a.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/files?path=/workspace/x", nil, as(keyA)); r.Status != http.StatusOK || string(r.Body) != "hello b" {
		t.Fatalf("read through a = %s; want hello b", r)
	}
	// The caller's limit holds across the hop, and so does its tenant.
	wantProblem(t, n.a.do(t, http.MethodPut, "/v1/sandboxes/"+id+"/files?path=/workspace/big", strings.Repeat("x", 2048), as(keyA), octets),
		http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
	wantProblem(t, n.a.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "id"}, as(keyB)),
		http.StatusNotFound, "NOT_FOUND")

	// The audit trail names the caller's key, whichever node served it.
	// Read through b: the calls forwarded to it were recorded before they
	// were answered, and a read there waits for the record of the exec it
	// answered itself, which a read through a may come before.
	r := n.b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	if c := bytes.Count(r.Body, []byte(`"key_name":"key-`+tenantA+`"`)); c < 4 {
		t.Fatalf("activity names key-%s %d times; want every call (4): %s", tenantA, c, r.Body)
	}

	// Nothing outside can pose as a node: a forged or stale signature, or
	// none with a tenant header, is refused.
	forged := func(sig, at string) *response {
		return n.b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "id"}, noAuth(),
			header("Tether-Forwarded-By", "a"), header("Tether-Forwarded-At", at),
			header("Tether-Forwarded-Tenant", tenantA), header("Tether-Forwarded-Signature", sig))
	}
	now := fmt.Sprint(time.Now().UnixMilli())
	wantProblem(t, forged(strings.Repeat("ab", 32), now), http.StatusUnauthorized, "UNAUTHENTICATED")
	wantProblem(t, forged("zz", now), http.StatusUnauthorized, "UNAUTHENTICATED")
	wantProblem(t, n.b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "id"}, noAuth(),
		header("Tether-Forwarded-Tenant", tenantA)), http.StatusUnauthorized, "UNAUTHENTICATED")

	// A call signed with the cluster's secret is taken once, by the node
	// it names, recently, and on a data-plane route only.
	signed := func(method, path string, body any, to string, at time.Time) *response {
		t.Helper()
		return signedCall(t, n, n.b, method, path, body, to, at)
	}
	execPath := "/v1/sandboxes/" + id + "/exec"
	cmd := map[string]any{"command": "echo once"}
	hdr, trl := signedHeaders(t, n, http.MethodPost, execPath, cmd, "b", time.Now())
	if r := sendSigned(t, n.b, http.MethodPost, execPath, cmd, hdr, trl); r.Status != http.StatusOK {
		t.Fatalf("a well-signed forwarded exec = %s; want 200", r)
	}
	wantRefused(t, sendSigned(t, n.b, http.MethodPost, execPath, cmd, hdr, trl), "accepted before")
	wantRefused(t, signed(http.MethodPost, execPath, cmd, "a", time.Now()), "meant for another node")
	wantRefused(t, signed(http.MethodPost, execPath, cmd, "b", time.Now().Add(-2*time.Minute)), "older than the skew")
	wantRefused(t, signed(http.MethodPost, execPath, cmd, "b", time.Now().Add(2*time.Minute)), "from the future")
	// Whoever holds the secret still cannot mint keys or reach any other
	// route (TestForwardableRoutes tries them all).
	wantRefused(t, signed(http.MethodPost, "/v1/keys", map[string]any{"name": "minted"}, "b", time.Now()), "does not take forwarded calls")
	wantRefused(t, signed(http.MethodGet, "/v1/sandboxes", nil, "b", time.Now()), "does not take forwarded calls")

	// Node b dies: calls through a are a retryable 503 that names it.
	if _, err := n.a.Store.Pool().Exec(t.Context(), `UPDATE nodes SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	r = n.a.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "id"}, as(keyA))
	wantProblem(t, r, http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	if r.Header.Get("Retry-After") == "" || !bytes.Contains(r.Body, []byte("node b")) {
		t.Fatalf("dead node answer = %s %v; want Retry-After and the node named", r, r.Header)
	}

	// GET /v1/nodes shows both, b dead, with the tenant's counts.
	r = n.a.do(t, http.MethodGet, "/v1/nodes", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var nodes controlplane.NodeList
	r.decode(t, &nodes)
	if len(nodes.Items) != 2 || !nodes.Items[0].Alive || nodes.Items[1].Alive || nodes.Items[1].LiveSandboxes != 1 {
		t.Fatalf("nodes = %+v; want a alive, b dead with 1 sandbox", nodes.Items)
	}
	if bytes.Contains(r.Body, []byte("127.0.0.1")) {
		t.Fatalf("GET /v1/nodes shows node addresses: %s", r.Body)
	}
}

// TestBadExecRefusedBeforeTheHop: an exec whose body is bad gets its 400
// from the replica that received it, without a hop to the sandbox's node;
// a good one goes there.
func TestBadExecRefusedBeforeTheHop(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	path := "/v1/sandboxes/" + n.onB + "/exec"
	before := n.reachedB.Load()
	for _, body := range []any{
		map[string]any{"command": ""},
		map[string]any{"command": "id", "workdir": "relative"},
		map[string]any{"command": "id", "timeout_seconds": -1},
		map[string]any{"command": "id", "unknown": true},
		`{"command":"id","command":"rm -rf /"}`,
		"not json",
	} {
		wantProblem(t, n.a.do(t, http.MethodPost, path, body, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
	}
	if got := n.reachedB.Load() - before; got != 0 {
		t.Errorf("%d bad execs reached node b; want none", got)
	}
	r := n.a.do(t, http.MethodPost, path, map[string]any{"command": "hostname", "env": map[string]string{"A": "1"}}, as(keyA))
	wantStatus(t, r, http.StatusOK)
	if !bytes.Contains(r.Body, []byte("node b: hostname")) || n.reachedB.Load()-before != 1 {
		t.Errorf("a good exec through a answered %s, with %d calls to node b; want node b's answer, one call", r, n.reachedB.Load()-before)
	}
}

// TestForwardedStreamEndsAtShutdown: a streaming exec forwarded through a
// replica that begins to shut down ends at once with a retryable error
// event, as a local one does, and the node's command ends with it.
func TestForwardedStreamEndsAtShutdown(t *testing.T) {
	t.Parallel()
	drain, startDraining := context.WithCancel(context.Background())
	defer startDraining()
	n := setupTwoNodes(t, 1024, drain)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, n.a.URL+"/v1/sandboxes/"+n.onB+"/exec",
		strings.NewReader(`{"command":"sleep 600"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := n.a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	rd := bufio.NewReader(res.Body)
	line, err := rd.ReadString('\n')
	for err == nil && !strings.Contains(line, "node b started") {
		line, err = rd.ReadString('\n')
	}
	if err != nil {
		t.Fatalf("the forwarded stream never showed node b's output: %v", err)
	}
	start := time.Now()
	startDraining()
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("read the rest: %v", err)
	}
	if !bytes.Contains(rest, []byte("event: error")) || !bytes.Contains(rest, []byte(`"code":"UNAVAILABLE"`)) {
		t.Fatalf("the stream ended with %q; want a retryable error event", rest)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the stream took %s to end after shutdown began", took)
	}
}

// signedHeaders signs a call as node a forwards one, with the cluster's
// secret at the time at, and returns the headers and the trailer (the
// body's digest; nil without a body) that it is sent with: a test may send
// them again (a replay), or with another body.
func signedHeaders(t *testing.T, n twoNodes, method, path string, body any, to string, at time.Time) (hdr, trl http.Header) {
	t.Helper()
	a := cluster.New(cluster.Nodes{Self: "a", Secret: n.secret, Finder: n.a.Store,
		Now: func() time.Time { return at }})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(rawBody(t, body))
	}
	req, err := http.NewRequestWithContext(t.Context(), method, "http://node-b"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	a.Sign(req, to, cluster.Caller{Tenant: tenantA})
	if req.Body != nil {
		if _, err := io.Copy(io.Discard, req.Body); err != nil { // sets the trailer
			t.Fatal(err)
		}
	}
	return req.Header, req.Trailer
}

// sendSigned sends a call with the headers and trailer of a signed one
// (signedHeaders) and body, which may be another than the one signed, to
// the replica via, with opts.
func sendSigned(t *testing.T, via *bundle, method, path string, body any, hdr, trl http.Header, opts ...reqOpt) *response {
	t.Helper()
	opts = append(opts, noAuth())
	for k := range hdr {
		opts = append(opts, header(k, hdr.Get(k)))
	}
	for k := range trl {
		opts = append(opts, trailer(k, trl.Get(k)))
	}
	return via.do(t, method, path, body, opts...)
}

// signedCall sends a call signed as node a forwards one to the replica via.
func signedCall(t *testing.T, n twoNodes, via *bundle, method, path string, body any, to string, at time.Time, opts ...reqOpt) *response {
	t.Helper()
	hdr, trl := signedHeaders(t, n, method, path, body, to, at)
	return sendSigned(t, via, method, path, body, hdr, trl, opts...)
}

// TestForwardableRoutes: the routes that take forwarded calls are in the
// route table, and a well-signed call to any other route of it is refused.
func TestForwardableRoutes(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	forwardable := map[string]bool{
		"POST /v1/sandboxes/:id/exec": true,
		"PUT /v1/sandboxes/:id/files": true, "GET /v1/sandboxes/:id/files": true,
		"PUT /v1/sandboxes/:id/archive": true, "GET /v1/sandboxes/:id/archive": true,
		"POST /v1/sandboxes/:id/processes": true, "GET /v1/sandboxes/:id/processes": true,
		"GET /v1/sandboxes/:id/processes/:pid": true, "GET /v1/sandboxes/:id/processes/:pid/output": true,
		"POST /v1/sandboxes/:id/processes/:pid/stdin": true, "POST /v1/sandboxes/:id/processes/:pid/signal": true,
		"POST /v1/sandboxes/:id/processes/:pid/resize": true, "GET /v1/sandboxes/:id/processes/:pid/terminal": true,
		"GET /v1/sandboxes/:id/watch": true,
	}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		forwardable[m+" /v1/sandboxes/:id/ports/:port/*path"] = true
	}
	table := map[string]bool{}
	params := strings.NewReplacer(":id", n.onB, ":owner", "owner-1", ":port", "8080", "*path", "x", ":preview_id", "prv_x", ":pid", "1")
	for _, rt := range n.b.Handler.(*gin.Engine).Routes() {
		route := rt.Method + " " + rt.Path
		table[route] = true
		if !strings.HasPrefix(rt.Path, "/v1/") {
			continue // public: no caller, nothing to forward
		}
		var body any
		opts := []reqOpt{}
		switch rt.Method {
		case http.MethodPost:
			body = map[string]any{"command": "true", "name": "minted", "owner": "owner-1"}
		case http.MethodPut:
			body, opts = "x", []reqOpt{octets}
		}
		r := signedCall(t, n, n.b, rt.Method, params.Replace(rt.Path), body, "b", time.Now(), opts...)
		refused := r.Status == http.StatusUnauthorized && bytes.Contains(r.Body, []byte("does not take forwarded calls"))
		if refused == forwardable[route] {
			t.Errorf("%s: a signed call answered %s; forwardable %t", route, r, forwardable[route])
		}
	}
	for route := range forwardable {
		if !table[route] {
			t.Errorf("%s takes forwarded calls but is not in the route table", route)
		}
	}
	if got := n.a.get(t, keyA, n.onB); got.State != "ready" {
		t.Errorf("the sandbox is %s after the refused calls; want ready", got.State)
	}
}

// wantRefused checks that a forwarded call was refused, for the reason.
func wantRefused(t *testing.T, r *response, reason string) {
	t.Helper()
	if p := wantProblem(t, r, http.StatusUnauthorized, "UNAUTHENTICATED"); !strings.Contains(p.Detail, reason) {
		t.Errorf("the forwarded call was refused with %q; want the reason %q", p.Detail, reason)
	}
}

// TestForwardedReplayRefused: a forwarded call is taken once by all the
// replicas of its node, and its body is the one signed: a captured exec
// replayed to the node's other replica, or sent with another command under
// the same signature, is refused, and no command runs.
func TestForwardedReplayRefused(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	path := "/v1/sandboxes/" + n.onB + "/exec"
	signed := map[string]any{"command": "echo signed"}
	hdr, trl := signedHeaders(t, n, http.MethodPost, path, signed, "b", time.Now())
	if r := sendSigned(t, n.b, http.MethodPost, path, signed, hdr, trl); r.Status != http.StatusOK {
		t.Fatalf("the signed call = %s; want 200", r)
	}
	// The same call, as sent or with another body, to either replica of
	// node b.
	evil := map[string]any{"command": "rm -rf /workspace"}
	for _, via := range []*bundle{n.b2, n.b} {
		wantRefused(t, sendSigned(t, via, http.MethodPost, path, signed, hdr, trl), "accepted before")
		wantRefused(t, sendSigned(t, via, http.MethodPost, path, evil, hdr, trl), "accepted before")
	}
	// A fresh nonce, but a body other than the one the trailer covers.
	hdr, trl = signedHeaders(t, n, http.MethodPost, path, signed, "b", time.Now())
	wantRefused(t, sendSigned(t, n.b2, http.MethodPost, path, evil, hdr, trl), "its body is not the one its signature covers")
	// Nor a body where the call was signed without one.
	hdr, _ = signedHeaders(t, n, http.MethodPost, path, nil, "b", time.Now())
	wantRefused(t, sendSigned(t, n.b2, http.MethodPost, path, evil, hdr, nil), "its body is not the one its signature covers")
	// And an upload whose body is not the one signed is not kept.
	upload := "/v1/sandboxes/" + n.onB + "/files?path=/workspace/x"
	hdr, trl = signedHeaders(t, n, http.MethodPut, upload, "good", "b", time.Now())
	wantRefused(t, sendSigned(t, n.b2, http.MethodPut, upload, "evil", hdr, trl), "its body is not the one its signature covers")
	n.provB.mu.Lock()
	defer n.provB.mu.Unlock()
	if len(n.provB.ran) != 1 || n.provB.ran[0] != "echo signed" {
		t.Errorf("node b ran %q; want the signed command alone", n.provB.ran)
	}
	if _, ok := n.provB.files[n.onB+"/workspace/x"]; ok {
		t.Error("the upload with a body other than the signed one was kept")
	}
}

// TestTamperedForwardSaysWhatWasRefused: a forwarded exec whose body is
// changed on the way between the nodes is refused by the node before the
// command runs, and the client is told that the body did not arrive as
// signed, not that the hosts' clocks disagree (which they do not).
func TestTamperedForwardSaysWhatWasRefused(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	// A proxy in front of node b that changes one command for another in
	// every body it passes on (the digest trailer passes unchanged).
	b, err := url.Parse(n.b.URL)
	if err != nil {
		t.Fatal(err)
	}
	tamper := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(b)
		if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
			body, err := io.ReadAll(pr.In.Body)
			if err != nil {
				t.Error(err)
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(bytes.ReplaceAll(body, []byte(`"id"`), []byte(`"ls"`))))
		}
	}})
	t.Cleanup(tamper.Close)
	if err := n.a.Store.Heartbeat(t.Context(), store.Node{ID: "b", URL: tamper.URL, Providers: []string{sim.Name}}, true); err != nil {
		t.Fatal(err)
	}
	r := n.a.do(t, http.MethodPost, "/v1/sandboxes/"+n.onB+"/exec", map[string]any{"command": "id"}, as(keyA))
	p := wantProblem(t, r, http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	if !strings.Contains(p.Detail, "body") || strings.Contains(p.Detail, "clock") {
		t.Errorf("detail %q; want it to say the body was refused, not the clocks", p.Detail)
	}
	n.provB.mu.Lock()
	defer n.provB.mu.Unlock()
	if len(n.provB.ran) != 0 {
		t.Errorf("node b ran %q", n.provB.ran)
	}
}
