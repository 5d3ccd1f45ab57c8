package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
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
	if code, res := e.exec(id, `mkdir -p /workspace/dir /workspace/closed && chmod 555 /workspace/closed && echo s >/workspace/secret && chmod 000 /workspace/secret`); code != http.StatusOK || res["exit_code"] != 0.0 {
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
		{http.MethodGet, id, "/workspace/secret", http.StatusForbidden, "PERMISSION_DENIED"},
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

// sseEvent is one Server-Sent Event and when it arrived.
type sseEvent struct {
	name, data string
	at         time.Time
}

// streamExec posts an exec asking for an event stream and returns the
// response, whose events readEvents reads.
func (e *env) streamExec(ctx context.Context, id string, body map[string]any) *http.Response {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.replica.URL()+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("streaming exec = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp
}

// readEvents sends each event of the stream to out as it arrives.
func readEvents(r io.Reader, out chan<- sseEvent) {
	defer close(out)
	sc := bufio.NewScanner(r)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "" && ev.name != "":
			ev.at = time.Now()
			out <- ev
			ev = sseEvent{}
		}
	}
}

// TestStreamingExec: with Accept: text/event-stream, output arrives while
// the command runs, stdout and stderr apart, then one exit event; a client
// that disconnects ends the command.
func TestStreamingExec(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})

	resp := e.streamExec(t.Context(), id, map[string]any{"command": `echo one; sleep 1; echo two >&2; exit 3`})
	events := make(chan sseEvent)
	go readEvents(resp.Body, events)
	var got []sseEvent
	for ev := range events {
		got = append(got, ev)
	}
	_ = resp.Body.Close()
	if len(got) != 3 || got[0].name != "stdout" || got[0].data != `{"data":"one\n"}` ||
		got[1].name != "stderr" || got[1].data != `{"data":"two\n"}` || got[2].name != "exit" {
		t.Fatalf("events = %+v", got)
	}
	var exit map[string]any
	if err := json.Unmarshal([]byte(got[2].data), &exit); err != nil || exit["exit_code"] != 3.0 || exit["timed_out"] != false {
		t.Errorf("exit event = %s (%v)", got[2].data, err)
	}
	if gap := got[2].at.Sub(got[0].at); gap < 500*time.Millisecond {
		t.Errorf("stdout arrived only %s before the exit: not streamed", gap)
	}

	mark := marker(t)
	ctx, cancel := context.WithCancel(t.Context())
	resp = e.streamExec(ctx, id, map[string]any{"command": `echo started; ` + mark + `; echo never`})
	events = make(chan sseEvent)
	go readEvents(resp.Body, events)
	if ev := <-events; ev.name != "stdout" {
		t.Fatalf("first event = %+v, want stdout", ev)
	}
	for deadline := time.Now().Add(10 * time.Second); !running(mark); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never ran", mark)
		}
	}
	cancel()
	_ = resp.Body.Close()
	for range events { //nolint:revive // drain until the reader sees the closed body
	}
	waitGone(t, mark)
}
