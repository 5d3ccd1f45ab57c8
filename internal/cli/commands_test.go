package cli_test

import (
	"encoding/json"
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
}
