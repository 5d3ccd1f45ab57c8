package cli_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sandboxJSON is what the tests read of a sandbox printed with -o json.
type sandboxJSON struct {
	ID           string            `json:"id"`
	State        string            `json:"state"`
	Owner        *string           `json:"owner"`
	Labels       map[string]string `json:"labels"`
	ExpiresAt    time.Time         `json:"expires_at"`
	Error        *string           `json:"error"`
	FromSnapshot *string           `json:"from_snapshot"`
}

// decode is out, printed with -o json, decoded into v; the test fails if
// it is not.
func decode[T any](t *testing.T, out string, err error) T {
	t.Helper()
	var v T
	if err != nil {
		t.Fatalf("command failed: %v (stdout %q)", err, out)
	}
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil {
		t.Fatalf("stdout is not the JSON expected: %v\n%s", jerr, out)
	}
	return v
}

// TestCLICommands drives the commands that cover the rest of the API
// against a live server (sim): create, pause and resume, renew, a
// sandbox's events, snapshots, pools and previews.
func TestCLICommands(t *testing.T) {
	t.Parallel()
	s := start(t, "k", "PROVIDERS=sim")
	tether := tetherIn(t, s)
	// sandbox is the sandbox `tether ARGS... -o json` prints.
	sandbox := func(args ...string) sandboxJSON {
		t.Helper()
		out, _, err := tether(append(args, "-o", "json")...)
		return decode[sandboxJSON](t, out, err)
	}
	// create is a new ready sandbox's id.
	create := func(args ...string) string {
		t.Helper()
		return sandbox(append([]string{"sandboxes", "create", "--wait", "20s"}, args...)...).ID
	}

	t.Run("Create", func(t *testing.T) {
		out, errOut, err := tether("sandboxes", "create", "--provider", "sim", "--owner", "agent-1", "--ttl", "10m", "--label", "team=a", "--label", "x=y=z",
			"--env", "A=B", "--param", "create_delay_ms=300", "--wait", "20s", "-o", "json")
		sb := decode[sandboxJSON](t, out, err)
		if sb.State != "ready" || sb.Owner == nil || *sb.Owner != "agent-1" || sb.Labels["team"] != "a" || sb.Labels["x"] != "y=z" ||
			time.Until(sb.ExpiresAt) < 9*time.Minute || time.Until(sb.ExpiresAt) > 11*time.Minute || !strings.Contains(errOut, "waiting") {
			t.Errorf("create --wait = %+v (stderr %q); want it ready, with its owner, labels and a 10m TTL", sb, errOut)
		}
		// -q prints the id alone; the table the sandbox.
		out, _, err = tether("sandboxes", "create", "-q", "--params", `{"create_delay_ms":0}`, "--param", "destroy_delay_ms=1")
		id := strings.TrimSpace(out)
		if err != nil || !strings.HasPrefix(id, "sbx_") || strings.ContainsAny(id, " \n") {
			t.Errorf("create -q = %q %v; want the id alone", out, err)
		}
		if out, _, err = tether("sandboxes", "create", "--label", "k=v"); err != nil || !strings.Contains(out, "STATE") || !strings.Contains(out, "k=v") {
			t.Errorf("create = %q %v; want the sandbox as a table", out, err)
		}
		// The same idempotency key is the same sandbox.
		a, _, errA := tether("sandboxes", "create", "-q", "--idempotency-key", "cli-test-1")
		b, _, errB := tether("sandboxes", "create", "-q", "--idempotency-key", "cli-test-1")
		if errA != nil || errB != nil || a != b {
			t.Errorf("two creates with one idempotency key = %q %v, %q %v", a, errA, b, errB)
		}
		// A wait that ends in failure fails, saying why; so do bad flags
		// and what the server refuses.
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--param", "fail=create", "--wait", "20s"}, "is failed, not ready"},
			{[]string{"--params", "[1]"}, "want a JSON object"},
			{[]string{"--param", "novalue"}, "want KEY=VALUE"},
			{[]string{"--ttl", "1.5s"}, "whole seconds"},
			{[]string{"--label", "bad key=v"}, "400 INVALID_REQUEST"},
			{[]string{"--provider", "nope"}, "400 UNKNOWN_PROVIDER"},
			{[]string{"extra"}, "unexpected arguments"},
		} {
			if out, _, err := tether(append([]string{"sandboxes", "create"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create %q = %q %v; want an error saying %q", tc.args, out, err, tc.want)
			}
		}
	})

	t.Run("PauseResumeRenewEvents", func(t *testing.T) {
		id := create()
		sb := sandbox("sandboxes", "pause", id, "--wait", "20s")
		if sb.State != "paused" {
			t.Errorf("pause --wait = %+v; want paused", sb)
		}
		if out, _, err := tether("sandboxes", "ls", "--state", "paused"); err != nil || !strings.Contains(out, id) {
			t.Errorf("ls --state paused = %q %v", out, err)
		}
		if _, _, err := tether("sandboxes", "pause", id); err != nil {
			t.Errorf("a second pause = %v; want it idempotent", err)
		}
		sb = sandbox("sandboxes", "resume", id, "--wait", "20s")
		if sb.State != "ready" {
			t.Errorf("resume --wait = %+v; want ready", sb)
		}
		sb = sandbox("sandboxes", "renew", id, "--ttl", "2h")
		if d := time.Until(sb.ExpiresAt); d < 119*time.Minute || d > 121*time.Minute {
			t.Errorf("renew --ttl 2h: expires in %s", d)
		}
		out, _, err := tether("sandboxes", "events", id)
		for _, want := range []string{"requested", "creating", "pausing", "paused", "resuming", "ready"} {
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("sandboxes events = %q %v; want %s in it", out, err, want)
			}
		}
		if _, _, err := tether("sandboxes", "rm", id); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tether("sandboxes", "pause", id); err == nil || !strings.Contains(err.Error(), "409 SANDBOX_STATE_CONFLICT") {
			t.Errorf("pause of an ended sandbox = %v; want the server's conflict", err)
		}
		if _, _, err := tether("sandboxes", "renew", id); err == nil || !strings.Contains(err.Error(), "want ID --ttl D") {
			t.Errorf("renew without --ttl = %v", err)
		}
	})

	t.Run("Snapshots", func(t *testing.T) {
		id := create()
		type snapshotJSON struct {
			ID              string `json:"id"`
			State           string `json:"state"`
			SourceSandboxID string `json:"source_sandbox_id"`
		}
		out, errOut, err := tether("snapshots", "create", id, "--wait", "20s", "-o", "json")
		snap := decode[snapshotJSON](t, out, err)
		if snap.State != "ready" || snap.SourceSandboxID != id || !strings.Contains(errOut, "waiting") {
			t.Fatalf("snapshots create --wait = %+v (%q)", snap, errOut)
		}
		if out, _, err := tether("snapshots", "ls", "--sandbox", id); err != nil || !strings.Contains(out, snap.ID) || !strings.Contains(out, "SIZE") {
			t.Errorf("snapshots ls --sandbox = %q %v", out, err)
		}
		if out, _, err := tether("snapshots", "list", "--sandbox", "sbx_00000000000000000000000000", "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
			t.Errorf("snapshots list of another sandbox = %q %v; want none", out, err)
		}
		if out, _, err := tether("snapshots", "get", snap.ID); err != nil || !strings.Contains(out, "ready") {
			t.Errorf("snapshots get = %q %v", out, err)
		}
		sb := sandbox("sandboxes", "create", "--from-snapshot", snap.ID, "--wait", "20s")
		if sb.State != "ready" || sb.FromSnapshot == nil || *sb.FromSnapshot != snap.ID {
			t.Errorf("create --from-snapshot = %+v", sb)
		}
		q, _, err := tether("snapshots", "create", "-q", id)
		if err != nil || !strings.HasPrefix(strings.TrimSpace(q), "snp_") {
			t.Errorf("snapshots create -q = %q %v", q, err)
		}
		if out, _, err := tether("snapshots", "rm", snap.ID); err != nil || !strings.Contains(out, "delete") {
			t.Errorf("snapshots rm = %q %v", out, err)
		}
		if _, _, err := tether("snapshots", "get", "snp_00000000000000000000000000"); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("snapshots get of an unknown snapshot = %v", err)
		}
	})

	t.Run("Pools", func(t *testing.T) {
		type poolJSON struct {
			Name     string         `json:"name"`
			MinReady int            `json:"min_ready"`
			MaxSize  int            `json:"max_size"`
			Ready    int            `json:"ready"`
			Params   map[string]any `json:"params"`
		}
		out, _, err := tether("pools", "create", "warm", "--min-ready", "1", "--max-size", "2", "--param", "create_delay_ms=0", "-o", "json")
		p := decode[poolJSON](t, out, err)
		if p.Name != "warm" || p.MinReady != 1 || p.MaxSize != 2 || p.Params["create_delay_ms"] != 0.0 {
			t.Fatalf("pools create = %+v", p)
		}
		deadline := time.Now().Add(20 * time.Second)
		for p.Ready < 1 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			out, _, err = tether("pools", "get", "warm", "-o", "json")
			p = decode[poolJSON](t, out, err)
		}
		if p.Ready < 1 {
			t.Fatalf("the pool never had a ready member: %+v", p)
		}
		if out, _, err := tether("pools", "ls"); err != nil || !strings.Contains(out, "warm") || !strings.Contains(out, "MIN READY") {
			t.Errorf("pools ls = %q %v", out, err)
		}
		sb := sandbox("sandboxes", "create", "--pool", "warm", "--owner", "agent-p", "--pool-only")
		if sb.State != "ready" || sb.Owner == nil || *sb.Owner != "agent-p" {
			t.Errorf("create --pool = %+v; want a ready member, now agent-p's", sb)
		}
		out, _, err = tether("pools", "resize", "warm", "--min-ready", "0", "-o", "json")
		if p = decode[poolJSON](t, out, err); p.MinReady != 0 || p.MaxSize != 2 {
			t.Errorf("pools resize --min-ready 0 = %+v", p)
		}
		if _, _, err := tether("pools", "resize", "warm"); err == nil || !strings.Contains(err.Error(), "--min-ready N, --max-size M or both") {
			t.Errorf("pools resize without a size = %v", err)
		}
		if out, _, err := tether("pools", "delete", "warm"); err != nil || !strings.Contains(out, "pool warm deleted") {
			t.Errorf("pools delete = %q %v", out, err)
		}
		if _, _, err := tether("pools", "get", "warm"); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("pools get of a deleted pool = %v", err)
		}
		if _, _, err := tether("pools", "create", "Bad_Name"); err == nil || !strings.Contains(err.Error(), "400 INVALID_REQUEST") {
			t.Errorf("pools create of a bad name = %v", err)
		}
	})

	t.Run("Previews", func(t *testing.T) {
		id := create("--param", "ports=[8000]")
		url, errOut, err := tether("previews", "create", id, "8000", "--ttl", "10m")
		url = strings.TrimSpace(url)
		if err != nil || !strings.HasPrefix(url, "http") || !strings.Contains(errOut, "shown once") {
			t.Fatalf("previews create = %q %q %v", url, errOut, err)
		}
		resp, err := http.Get(url + "hello")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Sim-Port") != "8000" {
			t.Errorf("GET the preview = %d %v; want the sandbox's port 8000", resp.StatusCode, resp.Header)
		}
		out, _, err := tether("previews", "ls", id, "-o", "json")
		var previews []struct {
			ID    string  `json:"id"`
			Token *string `json:"token"`
		}
		if err != nil || json.Unmarshal([]byte(out), &previews) != nil || len(previews) != 1 || previews[0].Token != nil {
			t.Fatalf("previews ls -o json = %q %v; want one, without its token", out, err)
		}
		if out, _, err := tether("previews", "ls", id); err != nil || !strings.Contains(out, previews[0].ID) || strings.Contains(out, url) {
			t.Errorf("previews ls = %q %v", out, err)
		}
		if out, _, err := tether("previews", "revoke", id, previews[0].ID); err != nil || !strings.Contains(out, previews[0].ID) || strings.Contains(out, "REVOKED\n"+previews[0].ID+" -") {
			t.Errorf("previews revoke = %q %v", out, err)
		}
		resp, err = http.Get(url + "hello")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("GET a revoked preview = %d; want it refused", resp.StatusCode)
		}
		if _, _, err := tether("previews", "create", id, "http"); err == nil || !strings.Contains(err.Error(), "want a number") {
			t.Errorf("previews create of a bad port = %v", err)
		}
	})
}
