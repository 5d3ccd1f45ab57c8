package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestExecTimeoutSemantics: timeout_seconds 0 is the server's maximum (an
// agent framework's "no timeout"), absent is the default, and the result
// says which limit applied.
func TestExecTimeoutSemantics(t *testing.T) {
	t.Parallel()
	e := setup(t, "MAX_EXEC_TIMEOUT=120s")
	id := e.createReady(map[string]any{"provider": "local"})
	for _, tc := range []struct {
		body     map[string]any
		timedOut bool
		limit    float64
	}{
		{map[string]any{"command": "sleep 2; echo done", "timeout_seconds": 0}, false, 120},
		{map[string]any{"command": "sleep 5", "timeout_seconds": 1}, true, 1},
		{map[string]any{"command": "echo quick"}, false, 60},
	} {
		code, res := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", tc.body)
		if code != http.StatusOK || res["timed_out"] != tc.timedOut || res["timeout_seconds"] != tc.limit {
			t.Errorf("exec %v = %d %v; want timed_out %v under %vs", tc.body, code, res, tc.timedOut, tc.limit)
		}
	}
	code, res := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "true", "timeout_seconds": 121})
	if code != http.StatusBadRequest || res["code"] != "INVALID_REQUEST" {
		t.Errorf("timeout over the maximum = %d %v, want 400 INVALID_REQUEST", code, res)
	}
}

// TestFileErrors: each file error has its own code, from a real case.
func TestFileErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	if code, res := e.exec(id, `mkdir -p /workspace/dir /workspace/closed && chmod 555 /workspace/closed`); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("prepare = %d %v", code, res)
	}
	files := func(method, sandboxID, path, body string) (int, map[string]any) {
		t.Helper()
		code, res, err := e.client.Do(method, e.replica.URL()+"/v1/sandboxes/"+sandboxID+"/files?path="+url.QueryEscape(path), rawBody(body, method))
		if err != nil {
			t.Fatal(err)
		}
		return code, res
	}
	for _, tc := range []struct {
		method, sandbox, path string
		status                int
		code                  string
	}{
		{http.MethodGet, id, "/workspace/missing", http.StatusNotFound, "FILE_NOT_FOUND"},
		{http.MethodGet, "sbx_00000000000000000000000000", "/workspace/x", http.StatusNotFound, "NOT_FOUND"},
		{http.MethodGet, id, "/workspace/dir", http.StatusBadRequest, "IS_DIRECTORY"},
		{http.MethodPut, id, "/workspace/dir", http.StatusBadRequest, "IS_DIRECTORY"},
		{http.MethodPut, id, "/workspace/closed/x", http.StatusForbidden, "PERMISSION_DENIED"},
		{http.MethodGet, id, "/etc/shadow", http.StatusForbidden, "PERMISSION_DENIED"},
		{http.MethodPut, id, "/etc/x", http.StatusBadRequest, "INVALID_PATH"},
		{http.MethodGet, id, "relative", http.StatusBadRequest, "INVALID_PATH"},
	} {
		if status, res := files(tc.method, tc.sandbox, tc.path, "x"); status != tc.status || res["code"] != tc.code {
			t.Errorf("%s %s = %d %v, want %d %s", tc.method, tc.path, status, res["code"], tc.status, tc.code)
		}
	}
}

// rawBody is body for a PUT, nothing otherwise; harness.Client sends it as
// a JSON string, which is the file's content here.
func rawBody(body, method string) any {
	if method != http.MethodPut || strings.TrimSpace(body) == "" {
		return nil
	}
	return body
}
