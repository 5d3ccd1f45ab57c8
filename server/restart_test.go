package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// records returns the server's log records so far.
func (s *server) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(s.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// logged returns the level of the first record whose message starts with
// msg, or "" if none.
func (s *server) logged(t *testing.T, msg string) string {
	t.Helper()
	for _, rec := range s.records(t) {
		if m, _ := rec["msg"].(string); strings.HasPrefix(m, msg) {
			level, _ := rec["level"].(string)
			return level
		}
	}
	return ""
}

// TestRestartLogsWhatIsTrue: the only Tether stops and starts again, with
// the same BOOTSTRAP_API_KEY, after longer than the outage tolerance. The
// first start registers the key (INFO); the second finds it registered
// (DEBUG, and never "registered" again), and credits the time it was
// stopped to leases at INFO as time before its start: nothing warns of an
// outage, or of anything else.
func TestRestartLogsWhatIsTrue(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewURL(t)
	env := func() map[string]string {
		return map[string]string{"DATABASE_URL": dbURL, "BOOTSTRAP_API_KEY": "boot-key", "PROVIDERS": "sim",
			"JANITOR_INTERVAL": "1s", "SIM_STATE_DIR": t.TempDir()}
	}
	first := start(t, env())
	if code, sb := first.do(t, "POST", "/v1/sandboxes", "boot-key", `{"owner":"agent"}`); code != 202 {
		t.Fatalf("create = %d %v", code, sb)
	}
	pool, err := store.Connect(t.Context(), dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var reached *time.Time
		_ = pool.QueryRow(t.Context(), `SELECT reached_at FROM outage_credit`).Scan(&reached)
		if reached != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sweep recorded reaching Postgres")
		}
	}
	first.stop(t)
	if level := first.logged(t, "bootstrap API key registered"); level != "INFO" {
		t.Errorf("the first start logged the key's registration at %q, want INFO", level)
	}

	time.Sleep(3 * time.Second) // stopped for longer than the tolerance, 2 janitor intervals
	second := start(t, env())
	for deadline := time.Now().Add(10 * time.Second); second.logged(t, "janitor: leases credited") == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restart credited nothing to leases:\n%s", second.logs)
		}
	}
	second.stop(t)
	if level := second.logged(t, "janitor: leases credited"); level != "INFO" {
		t.Errorf("the restart's lease credit was logged at %s, want INFO", level)
	}
	if level := second.logged(t, "bootstrap API key already registered"); level != "DEBUG" {
		t.Errorf("the second start logged the key already registered at %q, want DEBUG", level)
	}
	if level := second.logged(t, "bootstrap API key registered"); level != "" {
		t.Errorf("the second start logged the key registered (%s), though it was already", level)
	}
	for _, rec := range second.records(t) {
		// (The tests' Postgres may be reached as a superuser: that warning
		// is TestSuperuserWarning's.)
		msg, _ := rec["msg"].(string)
		if (rec["level"] == "WARN" || rec["level"] == "ERROR") && !strings.HasPrefix(msg, "connected to Postgres as a superuser") {
			t.Errorf("the restart logged %s %q", rec["level"], rec["msg"])
		}
	}
}
