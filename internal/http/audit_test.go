package http_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestPathsTheAuditCannotHoldAreRefused: a path that is not valid UTF-8
// (or holds a NUL) would read, write or archive a file while its activity
// record failed to insert; such paths are 400 INVALID_PATH and reach no
// provider.
func TestPathsTheAuditCannotHoldAreRefused(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	base := "/v1/sandboxes/" + n.onB
	for _, q := range []string{"/workspace/%ff/../secret.txt", "/workspace/a%00b"} {
		wantProblem(t, n.b.do(t, http.MethodPut, base+"/files?path="+q, "owned", as(keyA), octets), http.StatusBadRequest, "INVALID_PATH")
		wantProblem(t, n.b.do(t, http.MethodGet, base+"/files?path="+q, nil, as(keyA)), http.StatusBadRequest, "INVALID_PATH")
		wantProblem(t, n.b.do(t, http.MethodGet, base+"/archive?path="+q, nil, as(keyA)), http.StatusBadRequest, "INVALID_PATH")
	}
	n.provB.mu.Lock()
	defer n.provB.mu.Unlock()
	if len(n.provB.files) != 0 {
		t.Fatalf("the provider was reached: %v", n.provB.files)
	}
}

// TestFailedActivityRecordIsCounted: when Postgres refuses an activity
// record, the operation's failure to be audited shows in
// tether_activity_record_failures_total.
func TestFailedActivityRecordIsCounted(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	// A real refusal by Postgres: every new record breaks a constraint.
	if _, err := n.b.Store.Pool().Exec(t.Context(),
		`ALTER TABLE sandbox_activity ADD CONSTRAINT refuse_all CHECK (false) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, n.b.do(t, http.MethodPost, "/v1/sandboxes/"+n.onB+"/exec", map[string]any{"command": "id"}, as(keyA)), http.StatusOK)
	// The exec is answered while its record is written (and refused).
	var r *response
	eventually(t, 10*time.Second, "the failed record counted", func() bool {
		r = n.b.do(t, http.MethodGet, "/metrics", nil, noAuth())
		return bytes.Contains(r.Body, []byte("\ntether_activity_record_failures_total 1\n"))
	})
}

// TestExecAnswersBeforeItsRecord: an exec's answer does not wait for its
// activity record, yet a read of the activity on the replica that
// answered holds it; a forwarded exec is recorded before the node that
// relays it can answer.
func TestExecAnswersBeforeItsRecord(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	// Every record takes a second to write, inside its INSERT.
	if _, err := n.b.Store.Pool().Exec(t.Context(), `
		CREATE FUNCTION slow_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
		CREATE TRIGGER slow_record BEFORE INSERT ON sandbox_activity FOR EACH ROW EXECUTE FUNCTION slow_record()`); err != nil {
		t.Fatal(err)
	}
	records := func() int {
		var count int
		if err := n.b.Store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM sandbox_activity WHERE sandbox_id = $1`, n.onB).Scan(&count); err != nil {
			t.Fatal(err)
		}
		return count
	}
	exec := "/v1/sandboxes/" + n.onB + "/exec"
	wantStatus(t, n.b.do(t, http.MethodPost, exec, map[string]any{"command": "printf one"}, as(keyA)), http.StatusOK)
	if c := records(); c != 0 {
		t.Fatalf("%d records when the exec was answered; want the answer first", c)
	}
	// On another connection: one connection's next request is read only
	// once the handler before it returned, record and all.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, n.b.URL+"/v1/sandboxes/"+n.onB+"/activity", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := fresh.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("activity: %d %v %s", res.StatusCode, err, body)
	}
	if !bytes.Contains(body, []byte(`"command":"printf one"`)) {
		t.Fatalf("the activity read just after the answer lacks the exec: %s", body)
	}
	// Through node a: b records, then answers a, which relays the answer.
	wantStatus(t, n.a.do(t, http.MethodPost, exec, map[string]any{"command": "printf two"}, as(keyA)), http.StatusOK)
	if c := records(); c != 2 {
		t.Fatalf("%d records when the forwarded exec was answered; want 2", c)
	}
}

// TestExecRecordDoesNotWaitForItsClient: an exec whose client never reads
// the answer (16 MiB, several times what the sockets hold) is recorded all
// the same.
func TestExecRecordDoesNotWaitForItsClient(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, 1024, nil)
	u, err := url.Parse(n.b.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	body := `{"command":"output-bytes 16777216"}`
	if _, err := fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: tether\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n.onB, keyA, len(body), body); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the exec recorded while its client reads nothing", func() bool {
		var count int
		if err := n.b.Store.Pool().QueryRow(t.Context(),
			`SELECT count(*) FROM sandbox_activity WHERE sandbox_id = $1 AND target = 'output-bytes 16777216'`, n.onB).Scan(&count); err != nil {
			t.Fatal(err)
		}
		return count == 1
	})
}
