package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/cli"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

// server is a real `tether serve` process on a free port, with a fresh
// database, stopped when the test ends.
type server struct {
	base string
	key  string
	bin  string // the tether binary
}

// start builds tether and runs it with env (NAME=value) until the test
// ends; BOOTSTRAP_API_KEY is the key the test's calls use.
func start(t *testing.T, key string, env ...string) *server {
	t.Helper()
	env = append([]string{"DATABASE_URL=" + storetest.NewURL(t), "BOOTSTRAP_API_KEY=" + key,
		"SIM_STATE_DIR=" + t.TempDir()}, env...)
	bin := harness.Build(t)
	r := harness.NewReplica(t, bin, filepath.Join(t.TempDir(), "tether.log"), env...)
	r.Start()
	r.WaitReady(60 * time.Second)
	return &server{base: r.URL(), key: key, bin: bin}
}

// do calls the API with the server's key.
func (s *server) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	var payload any
	if body != "" {
		payload = json.RawMessage(body)
	}
	code, out, err := harness.Client{Key: s.key}.Do(method, s.base+path, payload)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, out
}

// run is `tether CMD ARGS...` for an ops command, with env as its
// environment.
func run(ctx context.Context, env map[string]string, stdout, stderr *syncBuffer, args ...string) error {
	return cli.Run(ctx, args[0], args[1:], func(k string) string { return env[k] }, nil, stdout, stderr)
}

// syncBuffer is a bytes.Buffer that a command and the test may use at once.
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

// TestOpsCommands drives the ops commands against a live server: they talk
// REST, print tables for people and JSON for scripts, and say what the
// server refused.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	s := start(t, "ops-key", "PROVIDERS=sim")
	env := map[string]string{"TETHER_URL": s.base, "TETHER_API_KEY": "ops-key"}
	tether := func(args ...string) (string, string, error) {
		t.Helper()
		var out, errOut syncBuffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err := run(ctx, env, &out, &errOut, args...)
		return out.String(), errOut.String(), err
	}

	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", `{"owner":"agent-7","labels":{"team":"ops","note":"\u001b]0;pwned\u0007\u009b2J\u202eok\nline\tcol"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)

	out, errOut, err := tether("sandboxes", "get", id, "--wait", "20s")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "ready") || !strings.Contains(errOut, "waiting") {
		t.Fatalf("sandboxes get --wait = %q %q %v", out, errOut, err)
	}
	out, _, err = tether("sandboxes", "ls", "--label", "team=ops", "-o", "json")
	var listed []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 || listed[0]["id"] != id {
		t.Fatalf("sandboxes ls -o json = %q %v", out, err)
	}
	// A label is the tenant's data: the table shows its terminal escapes
	// (and its newlines and tabs) as text, JSON as JSON escapes.
	note := "\x1b]0;pwned\x07\u009b2J\u202eok\nline\tcol"
	if listed[0]["labels"].(map[string]any)["note"] != note || strings.ContainsAny(out, "\x1b\u009b\u202e") {
		t.Errorf("sandboxes ls -o json = %q; want the label %q, its escapes as JSON escapes", out, note)
	}
	out, _, err = tether("sandboxes", "ls", "--label", "team=ops")
	if err != nil || !strings.Contains(out, `note=\x1b]0;pwned\x07\u009b2J\u202eok\x0aline\x09col,team=ops`) || strings.ContainsAny(out, "\x1b\x07\u009b\u202e") ||
		strings.Count(out, "\n") != 2 {
		t.Errorf("sandboxes ls = %q; want the label's escapes shown as text, on one line", out)
	}
	if out, _, err = tether("sandboxes", "ls", "--label", "team=nobody", "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("sandboxes ls -o json (no match) = %q %v; want []", out, err)
	}
	if out, _, err = tether("sandboxes", "ls", "--label", "team=nobody"); err != nil || strings.Contains(out, id) || !strings.Contains(out, "STATE") {
		t.Errorf("sandboxes ls (no match) = %q %v", out, err)
	}
	if _, _, err = tether("sandboxes", "exec", id, "--", "echo", "hi"); err == nil || !strings.Contains(err.Error(), "NOT_SUPPORTED") {
		t.Errorf("exec on sim = %v, want the server's NOT_SUPPORTED", err)
	}
	out, _, err = tether("owners", "ls")
	if err != nil || !strings.Contains(out, "agent-7") || !strings.Contains(out, "LIVE SANDBOXES") {
		t.Errorf("owners ls = %q %v", out, err)
	}
	out, _, err = tether("owners", "end", "agent-7")
	if err != nil || !strings.Contains(out, "1 sandboxes ended") {
		t.Errorf("owners end = %q %v", out, err)
	}
	if out, errOut, err = tether("sandboxes", "rm", id, "--wait"); err != nil || !strings.Contains(errOut, "released after") {
		t.Errorf("sandboxes rm --wait = %q %q %v", out, errOut, err)
	}
	out, _, err = tether("events")
	if err != nil || !strings.Contains(out, "requested") || !strings.Contains(out, "owner_released") {
		t.Errorf("events = %q %v", out, err)
	}
	if _, _, err = tether("sandboxes", "get", "sbx_00000000000000000000000000"); err == nil || !strings.Contains(err.Error(), "404 NOT_FOUND") {
		t.Errorf("get of an unknown sandbox = %v", err)
	}
	// events --follow prints what happens until interrupted.
	var followed, followErr syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, env, &followed, &followErr, "events", "--follow") }()
	// The stream starts when it connects: create sandboxes until it shows one.
	deadline := time.Now().Add(20 * time.Second)
	var created []string
	for shown := false; !shown; {
		if time.Now().After(deadline) {
			t.Fatalf("events --follow never showed %v: %q %q", created, followed.String(), followErr.String())
		}
		if code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", `{}`); code == http.StatusAccepted {
			created = append(created, sb["id"].(string))
		}
		time.Sleep(200 * time.Millisecond)
		for _, id := range created {
			shown = shown || strings.Contains(followed.String(), id)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("events --follow ended with %v when interrupted", err)
	}

	// Keys over the API: create (the secret alone on stdout), use, list, revoke.
	secret, _, err := tether("keys", "create", "--name", "ci-bot")
	secret = strings.TrimSpace(secret)
	if err != nil || !strings.HasPrefix(secret, "tk_") {
		t.Fatalf("keys create = %q %v", secret, err)
	}
	if code, _, err := (harness.Client{Key: secret}).Do(http.MethodGet, s.base+"/v1/sandboxes", nil); err != nil || code != http.StatusOK {
		t.Errorf("the new key gets %d, %v", code, err)
	}
	out, _, err = tether("keys", "ls", "-o", "json")
	var keys []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if err != nil || json.Unmarshal([]byte(out), &keys) != nil {
		t.Fatalf("keys ls = %q %v", out, err)
	}
	var botID string
	for _, k := range keys {
		if k.Name == "ci-bot" {
			botID = k.ID
		}
	}
	if botID == "" || strings.Contains(out, secret) {
		t.Fatalf("keys ls = %q: want ci-bot, without its secret", out)
	}
	if out, _, err = tether("keys", "revoke", botID); err != nil || !strings.Contains(out, "revoked") {
		t.Errorf("keys revoke = %q %v", out, err)
	}

	env["TETHER_API_KEY"] = "wrong"
	if _, _, err = tether("sandboxes", "ls"); err == nil || !strings.Contains(err.Error(), "401 UNAUTHENTICATED") {
		t.Errorf("a bad key = %v", err)
	}
	delete(env, "TETHER_URL")
	if _, _, err = tether("sandboxes", "ls"); err == nil || !strings.Contains(err.Error(), "TETHER_URL") {
		t.Errorf("no server = %v", err)
	}
}
