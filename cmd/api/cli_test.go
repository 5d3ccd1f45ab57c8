package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestOpsCommands drives the ops commands against a live server: they talk
// REST, print tables for people and JSON for scripts, and say what the
// server refused.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "ops-key", "PROVIDERS": "sim"})
	env := map[string]string{"TETHER_URL": s.base, "TETHER_API_KEY": "ops-key"}
	getenv := func(k string) string { return env[k] }
	tether := func(args ...string) (string, string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err := run(ctx, args, getenv, &out, &errOut)
		return out.String(), errOut.String(), err
	}

	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "ops-key", `{"owner":"agent-7","labels":{"team":"ops"}}`)
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
	go func() { done <- run(ctx, []string{"events", "--follow"}, getenv, &followed, &followErr) }()
	// The stream starts when it connects: create sandboxes until it shows one.
	deadline := time.Now().Add(20 * time.Second)
	var created []string
	for shown := false; !shown; {
		if time.Now().After(deadline) {
			t.Fatalf("events --follow never showed %v: %q %q", created, followed.String(), followErr.String())
		}
		if code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "ops-key", `{}`); code == http.StatusAccepted {
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
	if code, _ := s.do(t, http.MethodGet, "/v1/sandboxes", secret, ""); code != http.StatusOK {
		t.Errorf("the new key gets %d", code)
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
