package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// syncBuffer is a bytes.Buffer safe for the server's logger and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type server struct {
	base   string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// start runs the whole program on a free port and waits for /healthz.
func start(t *testing.T, env map[string]string) *server {
	t.Helper()
	if env["LISTEN_ADDR"] == "" {
		env["LISTEN_ADDR"] = "127.0.0.1:0"
	}
	if env["SIM_STATE_DIR"] == "" {
		env["SIM_STATE_DIR"] = t.TempDir()
	}
	env["LOG_LEVEL"] = "debug"
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithCancel(t.Context())
	s := &server{logs: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- run(ctx, []string{"serve"}, getenv, nil, io.Discard, s.logs) }()
	t.Cleanup(func() { s.stop(t) })

	deadline := time.Now().Add(30 * time.Second)
	for s.base == "" {
		for line := range strings.SplitSeq(s.logs.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "tether listening" {
				s.base = "http://" + rec.Addr
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("run exited early: %v\nlogs:\n%s", err, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never listened; logs:\n%s", s.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := s.get(t, "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	return s
}

func (s *server) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("run returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("run did not return within 30s of shutdown")
	}
}

func (s *server) get(t *testing.T, path, key string) int {
	t.Helper()
	code, _ := s.do(t, http.MethodGet, path, key, "")
	return code
}

func (s *server) do(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestServeLifecycle(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewURL(t)
	s := start(t, map[string]string{"DATABASE_URL": dbURL, "BOOTSTRAP_API_KEY": "boot-key"})

	if code := s.get(t, "/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "boot-key", `{"labels":{"e2e":"yes"}}`)
	if code != http.StatusAccepted || sb["state"] != "requested" {
		t.Fatalf("create = %d %v", code, sb)
	}
	id, _ := sb["id"].(string)
	code, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=20s", "boot-key", "")
	if code != http.StatusOK || sb["state"] != "ready" {
		t.Fatalf("wait for ready = %d %v", code, sb)
	}
	code, sb = s.do(t, http.MethodDelete, "/v1/sandboxes/"+id, "boot-key", "")
	if code != http.StatusAccepted || sb["state"] != "terminated" {
		t.Fatalf("delete = %d %v", code, sb)
	}
	if code := s.get(t, "/v1/sandboxes", "wrong-key"); code != http.StatusUnauthorized {
		t.Errorf("wrong key = %d, want 401", code)
	}
	if code := s.get(t, "/swagger/doc.json", ""); code != http.StatusOK {
		t.Errorf("/swagger/doc.json = %d", code)
	}
	s.stop(t)
	if strings.Contains(s.logs.String(), "boot-key") {
		t.Error("the API key appears in the logs")
	}
}

// TestSuperuserWarning: Tether says so when it finds itself connected as a
// Postgres superuser, and is quiet as the least-privileged role `make test`
// runs it with.
func TestSuperuserWarning(t *testing.T) {
	t.Parallel()
	const warning = "connected to Postgres as a superuser"
	dbURL := storetest.NewURL(t)
	pool, err := store.Connect(t.Context(), dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	super, err := store.New(pool).Superuser(t.Context())
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	if super {
		t.Fatalf("the tests run Tether as a superuser (%s): run them with `make test`, whose role `tether` is not one", dbURL)
	}
	s := start(t, map[string]string{"DATABASE_URL": dbURL})
	s.stop(t)
	if strings.Contains(s.logs.String(), warning) {
		t.Errorf("warned of a superuser when connected as a plain role:\n%s", s.logs)
	}
	s = start(t, map[string]string{"DATABASE_URL": storetest.AsAdmin(t, dbURL)})
	s.stop(t)
	if !strings.Contains(s.logs.String(), warning) {
		t.Errorf("no warning when connected as a superuser:\n%s", s.logs)
	}
}

func TestKeysCreate(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewURL(t)
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"keys", "create", "--tenant", "team-x", "--name", "deploy-bot"}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("keys create: %v", err)
	}
	if !strings.Contains(out.String(), `"deploy-bot"`) {
		t.Errorf("output %q does not name the key", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	key := lines[len(lines)-1]
	if !strings.HasPrefix(key, "tk_") || strings.Contains(key, " ") {
		t.Fatalf("last line %q is not a key", key)
	}
	s := start(t, map[string]string{"DATABASE_URL": dbURL})
	if code := s.get(t, "/v1/sandboxes", key); code != http.StatusOK {
		t.Errorf("list with the new key = %d, want 200", code)
	}
}

func TestCommandErrors(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cases := []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"bogus"}, none, "unknown command"},
		{[]string{"serve"}, none, "DATABASE_URL is not set"},
		{[]string{"keys", "create"}, none, "--tenant is required"},
		// The ops commands are tetherctl's, which is nowhere here
		// (TestOpsCommands runs one).
		{[]string{"sandboxes", "ls"}, none, "neither beside this binary nor on PATH"},
		{[]string{"keys", "ls"}, none, "tetherctl"},
		{[]string{"keys", "create", "--name", "bot"}, none, "tetherctl"},
		{[]string{"serve"}, func(k string) string {
			return map[string]string{"DATABASE_URL": "postgres://x", "JANITOR_INTERVAL": "soon"}[k]
		}, "JANITOR_INTERVAL"},
	}
	for _, tc := range cases {
		err := run(t.Context(), tc.args, tc.env, nil, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%v) = %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

// TestOpsCommands: a command that is not the server's runs tetherctl
// (the one on PATH here) with the same arguments and standard streams, and
// tether exits with its status, silently.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"tetherctl $*\"; read -r line; echo \"stdin: $line\"; echo oops >&2; exit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "tetherctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"PATH": dir}[k] }
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"keys", "create", "--name", "bot"}, getenv, strings.NewReader("hi\n"), &stdout, &stderr)
	if want := "tetherctl keys create --name bot\nstdin: hi\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	if stderr.String() != "oops\n" {
		t.Errorf("stderr = %q, want tetherctl's", stderr.String())
	}
	if code, say := exitCode(err); code != 3 || say {
		t.Errorf("exitCode(%v) = %d, %v; want tetherctl's 3, silently", err, code, say)
	}
	// The server's own commands do not go to tetherctl.
	if err := run(t.Context(), []string{"keys", "create"}, getenv, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--tenant is required") {
		t.Errorf("keys create = %v, want the server's own error", err)
	}
}

// TestHelp: `tether help` shows the server's commands and where the ops
// commands are, each under the binary's name.
func TestHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"help"}, func(string) string { return "" }, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tether migrate", "tether keys create --tenant", "tether COMMAND", "tetherctl help"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not show %q:\n%s", want, out.String())
		}
	}
	commands, listed, _ := strings.Cut(out.String(), "\nsettings")
	for line := range strings.SplitSeq(commands, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "tether" && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") {
			t.Errorf("help line %q does not start with the binary's name", line)
		}
	}
	// Every setting has a line: its name, its default and what it does.
	lines := map[string]string{}
	for line := range strings.SplitSeq(listed, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			lines[f[0]] = line
		}
	}
	for _, s := range settings() {
		line := lines[s.name]
		if f := strings.Fields(line); len(f) < 3 || f[1] != cmp.Or(s.def, "-") || !strings.HasSuffix(line, "  "+s.doc) {
			t.Errorf("help lists %s as %q; want its default %q and %q", s.name, line, s.def, s.doc)
		}
	}
}

// proxy is a TCP relay to Postgres that the test can cut and restore, to
// make Postgres unreachable without touching the server.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
		p.wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// TestReadyzFollowsPostgres: /readyz is 503 while Postgres is unreachable and
// 200 again once it is back; /healthz stays 200 throughout.
func TestReadyzFollowsPostgres(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	u.Host = px.ln.Addr().String()
	s := start(t, map[string]string{"DATABASE_URL": u.String()})

	waitStatus := func(path string, want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := s.get(t, path, "")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d, want %d", path, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStatus("/readyz", http.StatusOK)
	px.cut()
	waitStatus("/readyz", http.StatusServiceUnavailable)
	waitStatus("/healthz", http.StatusOK)
	px.restore()
	waitStatus("/readyz", http.StatusOK)
}

// TestUnavailableProvider: without bubblewrap the local provider reports
// itself unavailable, creates for it are refused with 503, and Tether is
// still ready (readiness never depends on a provider).
func TestUnavailableProvider(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bwrap here
	s := start(t, map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "k",
		"PROVIDERS": "local,sim", "LOCAL_STATE_DIR": t.TempDir(),
	})
	if code := s.get(t, "/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
	code, body := s.do(t, http.MethodGet, "/v1/providers", "k", "")
	items, _ := body["items"].([]any)
	if code != http.StatusOK || len(items) != 2 {
		t.Fatalf("/v1/providers = %d %v", code, body)
	}
	local, _ := items[0].(map[string]any)
	if local["name"] != "local" || local["available"] != false || !strings.Contains(fmt.Sprint(local["reason"]), "bwrap") {
		t.Errorf("local provider = %v, want unavailable with a reason naming bwrap", local)
	}
	code, body = s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{}`)
	if code != http.StatusServiceUnavailable || body["code"] != "PROVIDER_UNAVAILABLE" {
		t.Errorf("create on the unavailable default = %d %v, want 503 PROVIDER_UNAVAILABLE", code, body)
	}
	if code, _ := s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{"provider":"sim"}`); code != http.StatusAccepted {
		t.Errorf("create on sim = %d, want 202", code)
	}
}
