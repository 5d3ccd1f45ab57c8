package http_test

import (
	"bytes"
	"net/http"
	"testing"
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
	r := n.b.do(t, http.MethodGet, "/metrics", nil, noAuth())
	if !bytes.Contains(r.Body, []byte("\ntether_activity_record_failures_total 1\n")) {
		t.Fatalf("the failed record is not counted:\n%s", r.Body)
	}
}
