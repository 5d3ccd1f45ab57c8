package e2e

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// TestAuditTrail: a key made over the API works at once; what is done with
// it (a sandbox's events, its execs and file transfers on the local
// provider) names it; revoking it (with itself) shuts it out within
// AUTH_CACHE_TTL.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	e := setup(t, "AUTH_CACHE_TTL=1s")

	code, list := e.do(http.MethodGet, "/v1/keys", nil)
	items, _ := list["items"].([]any)
	if code != http.StatusOK || len(items) != 1 || items[0].(map[string]any)["name"] != "bootstrap" {
		t.Fatalf("keys = %d %v, want the bootstrap key alone", code, list)
	}
	code, created := e.do(http.MethodPost, "/v1/keys", map[string]any{"name": "agent-a"})
	if code != http.StatusCreated {
		t.Fatalf("create key = %d %v", code, created)
	}
	secret, _ := created["secret"].(string)
	keyID, _ := created["key"].(map[string]any)["id"].(string)
	if secret == "" || keyID == "" {
		t.Fatalf("create key = %v, want a secret and an id", created)
	}

	a := &env{t: t, replica: e.replica, client: harness.Client{Key: secret}, stateDir: e.stateDir}
	id := a.createReady(map[string]any{"provider": "local", "params": map[string]any{"memory_mb": 64}})
	if code, res := a.exec(id, "printf hello"); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("exec = %d %v", code, res)
	}
	path := "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape("/workspace/a.txt")
	if code, res, err := a.client.Do(http.MethodPut, e.replica.URL()+path, rawBody("12345", http.MethodPut)); err != nil || code != http.StatusNoContent {
		t.Fatalf("put file = %d %v %v", code, res, err)
	}
	if code, res := a.exec(id, "exit 3"); code != http.StatusOK || res["exit_code"] != 3.0 {
		t.Fatalf("exec exit 3 = %d %v", code, res)
	}
	// A memory hog past the sandbox's 64 MiB: killed, and the record says so.
	if code, res := a.exec(id, `python3 -c 'b = bytearray(256 << 20)'`); code != http.StatusOK || res["oom_killed"] != true {
		t.Fatalf("memory hog = %d %v, want it killed by the memory limit", code, res)
	}

	// The activity, read with the bootstrap key (same tenant).
	code, act := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil)
	items, _ = act["items"].([]any)
	if code != http.StatusOK || len(items) != 4 {
		t.Fatalf("activity = %d %v, want 4 records", code, act)
	}
	want := []map[string]any{
		{"kind": "exec", "command": "printf hello", "exit_code": 0.0, "bytes": 5.0, "path": nil, "error": nil},
		{"kind": "file_write", "path": "/workspace/a.txt", "bytes": 7.0, // "12345", JSON-encoded by the client
			"exit_code": nil, "command": nil},
		{"kind": "exec", "command": "exit 3", "exit_code": 3.0, "timed_out": false, "oom_killed": false},
		{"kind": "exec", "exit_code": 137.0, "oom_killed": true},
	}
	for i, it := range items {
		rec := it.(map[string]any)
		if rec["key_id"] != keyID || rec["key_name"] != "agent-a" {
			t.Errorf("activity %d = %v, want key %s (agent-a)", i, rec, keyID)
		}
		for k, v := range want[i] {
			if rec[k] != v {
				t.Errorf("activity %d: %s = %v, want %v (%v)", i, k, rec[k], v, rec)
			}
		}
	}
	code, evs := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/events", nil)
	items, _ = evs["items"].([]any)
	if code != http.StatusOK || len(items) < 1 {
		t.Fatalf("events = %d %v", code, evs)
	}
	if first := items[0].(map[string]any); first["actor_key_id"] != keyID || first["actor_key_name"] != "agent-a" {
		t.Errorf("request event = %v, want it to name key %s (agent-a)", first, keyID)
	}
	for _, it := range items[1:] {
		if ev := it.(map[string]any); ev["actor"] != "client" && ev["actor_key_id"] != nil {
			t.Errorf("%s's event %v names a key", ev["actor"], ev)
		}
	}

	// The key revokes itself, and is refused within AUTH_CACHE_TTL.
	if code, res := a.do(http.MethodDelete, "/v1/keys/"+keyID, nil); code != http.StatusOK || res["revoked_at"] == nil {
		t.Fatalf("revoke = %d %v", code, res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, err := a.client.Do(http.MethodGet, e.replica.URL()+"/v1/keys", nil)
		if err == nil && code == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked key still answers %d (%v) after 10s", code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
