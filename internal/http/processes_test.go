package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// processJSON is a process as the API answers it.
type processJSON struct {
	PID     int               `json:"pid"`
	Tag     string            `json:"tag"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	Stdin   bool              `json:"stdin"`
	Running bool              `json:"running"`
	Exit    *struct {
		Code   int  `json:"code"`
		Signal int  `json:"signal"`
		Exited bool `json:"exited"`
	} `json:"exit"`
	KeptBytes int64 `json:"kept_bytes"`
}

// procActivityJSON is an activity record as the API answers it.
type procActivityJSON struct {
	Kind    string  `json:"kind"`
	PID     *int    `json:"pid"`
	Command *string `json:"command"`
	Input   *string `json:"input"`
	Signal  *string `json:"signal"`
	Bytes   *int64  `json:"bytes"`
	Error   *string `json:"error"`
	KeyID   *string `json:"key_id"`
}

func (b *bundle) startProcess(t *testing.T, id string, body map[string]any) processJSON {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/processes", body)
	wantStatus(t, r, http.StatusCreated)
	var p processJSON
	r.decode(t, &p)
	if want := "/v1/sandboxes/" + id + "/processes/" + strconv.Itoa(p.PID); r.Header.Get("Location") != want {
		t.Fatalf("Location = %q, want %q", r.Header.Get("Location"), want)
	}
	return p
}

func (b *bundle) procActivity(t *testing.T, key, id string) []procActivityJSON {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/activity?limit=500", nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var out struct {
		Items []procActivityJSON `json:"items"`
	}
	r.decode(t, &out)
	return out.Items
}

// sse is one Server-Sent Event.
type sse struct{ name, data string }

// follow opens a process's output stream and passes its events on.
func (b *bundle) follow(t *testing.T, path string) <-chan sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := b.client.Do(req) //nolint:bodyclose // the reader below closes it
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s = %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sse, 64)
	go func() {
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				out <- ev
				ev = sse{}
			}
		}
	}()
	return out
}

// sseEvents reads the stream to its end (or the timeout).
func sseEvents(t *testing.T, in <-chan sse) []sse {
	t.Helper()
	var got []sse
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the stream did not end; so far: %v", got)
		}
	}
}

// TestProcessLifecycle: a process started in the background is listed,
// takes input, is followed by two clients at once (one from its start,
// one from now), ends when its stdin closes; every start and input is
// in the activity, with the pid and the caller.
func TestProcessLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readySandbox(t, keyA, map[string]any{}).ID
	p := b.startProcess(t, id, map[string]any{"command": "cat", "stdin": true, "tag": "reader", "env": map[string]string{"A": "1"}})
	if !p.Running || p.PID <= 0 || p.Tag != "reader" || !p.Stdin || p.Env["A"] != "1" || strings.Join(p.Argv, " ") != "sh -c cat" {
		t.Fatalf("started %+v", p)
	}
	base := "/v1/sandboxes/" + id + "/processes/"
	fromStart := b.follow(t, base+"reader/output?from=start")
	fromNow := b.follow(t, base+strconv.Itoa(p.PID)+"/output")
	for _, s := range []<-chan sse{fromStart, fromNow} {
		if ev := <-s; ev.name != "start" || ev.data != `{"pid":`+strconv.Itoa(p.PID)+`}` {
			t.Fatalf("first event %+v", ev)
		}
	}
	wantNoContent(t, b.do(t, http.MethodPost, base+strconv.Itoa(p.PID)+"/stdin", "hello\n", octets))
	wantNoContent(t, b.do(t, http.MethodPost, base+"reader/stdin?close=true", "bye\n", octets))
	for _, s := range []<-chan sse{fromStart, fromNow} {
		got := sseEvents(t, s)
		var out strings.Builder
		for _, ev := range got[:len(got)-1] {
			var chunk struct{ Data string }
			if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil || ev.name != "stdout" {
				t.Fatalf("event %+v", ev)
			}
			out.WriteString(chunk.Data)
		}
		if out.String() != "hello\nbye\n" || got[len(got)-1].name != "exit" || !strings.Contains(got[len(got)-1].data, `"code":0`) {
			t.Fatalf("events %v", got)
		}
	}
	r := b.do(t, http.MethodGet, base+strconv.Itoa(p.PID)+"?wait=5s", nil)
	wantStatus(t, r, http.StatusOK)
	var ended processJSON
	r.decode(t, &ended)
	if ended.Running || ended.Exit == nil || !ended.Exit.Exited || ended.Exit.Code != 0 || ended.KeptBytes != 10 {
		t.Fatalf("ended %+v", ended)
	}
	r = b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/processes", nil)
	wantStatus(t, r, http.StatusOK)
	var list struct{ Items []processJSON }
	r.decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].PID != p.PID {
		t.Fatalf("list %+v", list)
	}
	acts := b.procActivity(t, keyA, id)
	if len(acts) != 3 || acts[0].Kind != "process_start" || *acts[0].Command != "cat" || *acts[0].PID != p.PID ||
		acts[1].Kind != "process_input" || *acts[1].Input != "hello\n" || *acts[1].Bytes != 6 ||
		acts[2].Kind != "process_input" || *acts[2].PID != p.PID || acts[2].KeyID == nil {
		t.Fatalf("activity %+v", acts)
	}
}

// TestProcessSignalAndWait: a signal ends a process, its exit says which,
// and the signal is in the activity; a second signal finds it ended.
func TestProcessSignalAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readySandbox(t, keyA, map[string]any{}).ID
	p := b.startProcess(t, id, map[string]any{"argv": []string{"sleep", "100"}})
	path := "/v1/sandboxes/" + id + "/processes/" + strconv.Itoa(p.PID)
	r := b.do(t, http.MethodGet, path+"?wait=1", nil)
	var got processJSON
	r.decode(t, &got)
	if !got.Running {
		t.Fatalf("after a wait of 1s: %s", r)
	}
	wantNoContent(t, b.do(t, http.MethodPost, path+"/signal", map[string]any{"signal": "SIGTERM"}))
	r = b.do(t, http.MethodGet, path+"?wait=10s", nil)
	r.decode(t, &got)
	if got.Running || got.Exit == nil || got.Exit.Signal != 15 || got.Exit.Exited || got.Exit.Code != -1 {
		t.Fatalf("after SIGTERM: %s", r)
	}
	wantProblem(t, b.do(t, http.MethodPost, path+"/signal", map[string]any{"signal": "KILL"}), http.StatusConflict, "PROCESS_STATE_CONFLICT")
	acts := b.procActivity(t, keyA, id)
	if len(acts) != 3 || acts[1].Kind != "process_signal" || *acts[1].Signal != "TERM" || *acts[1].PID != p.PID ||
		acts[2].Error == nil || *acts[2].Error != "PROCESS_STATE_CONFLICT" {
		t.Fatalf("activity %+v", acts)
	}
}

// TestProcessBadInput: bad input is the documented problem, and neither
// starts, writes nor records anything.
func TestProcessBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readySandbox(t, keyA, map[string]any{}).ID
	base := "/v1/sandboxes/" + id + "/processes"
	for _, body := range []any{
		map[string]any{}, map[string]any{"command": "true", "argv": []string{"true"}},
		map[string]any{"argv": []string{""}}, map[string]any{"command": "a\x00b"},
		map[string]any{"command": "true", "tag": "1abc"}, map[string]any{"command": "true", "cwd": "relative"},
		map[string]any{"command": "true", "env": map[string]string{"1BAD": "x"}},
		map[string]any{"command": "true", "pty": map[string]int{"rows": 0, "cols": 80}},
		map[string]any{"command": "true", "timeout_seconds": -1}, map[string]any{"command": "true", "unknown": 1},
		"not json",
	} {
		wantProblem(t, b.do(t, http.MethodPost, base, body), http.StatusBadRequest, "INVALID_REQUEST")
	}
	wantProblem(t, b.do(t, http.MethodGet, base+"?x=1", nil), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodGet, base+"/-1", nil), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodGet, base+"/999999", nil), http.StatusNotFound, "PROCESS_NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodGet, base+"/nosuchtag/output", nil), http.StatusNotFound, "PROCESS_NOT_FOUND")
	p := b.startProcess(t, id, map[string]any{"command": "sleep 100"})
	one := base + "/" + strconv.Itoa(p.PID)
	wantProblem(t, b.do(t, http.MethodGet, one+"/output?from=middle", nil), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodGet, one+"?wait=forever", nil), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/signal", map[string]any{"signal": "NOPE"}), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/signal", map[string]any{"signal": "65"}), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/stdin", "", octets), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/stdin?close=maybe", "x", octets), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/resize", map[string]any{"rows": 0, "cols": 1}), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodPost, one+"/stdin", strings.Repeat("x", defaultMaxBody+1), octets), http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
	// Input to a process without stdin: the process's state, and recorded
	// (the sandbox refused it).
	wantProblem(t, b.do(t, http.MethodPost, one+"/stdin", "x", octets), http.StatusConflict, "PROCESS_STATE_CONFLICT")
	// sim has no terminals and no watches.
	wantProblem(t, b.do(t, http.MethodPost, base, map[string]any{"command": "true", "pty": map[string]int{"rows": 24, "cols": 80}}), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, b.do(t, http.MethodPost, one+"/resize", map[string]any{"rows": 24, "cols": 80}), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/watch?path=/workspace", nil), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/watch?path=relative", nil), http.StatusBadRequest, "INVALID_PATH")
	wantProblem(t, b.do(t, http.MethodGet, one+"/terminal", nil), http.StatusBadRequest, "INVALID_REQUEST")
	acts := b.procActivity(t, keyA, id)
	if len(acts) != 2 || acts[0].Kind != "process_start" || acts[1].Kind != "process_input" || *acts[1].Error != "PROCESS_STATE_CONFLICT" {
		t.Fatalf("activity %+v; want the start and the refused input only", acts)
	}
	r := b.do(t, http.MethodGet, base, nil)
	var list struct{ Items []processJSON }
	r.decode(t, &list)
	if len(list.Items) != 1 {
		t.Fatalf("processes %s; want the one started", r)
	}
}

// TestProcessesOfAnotherTenant: a tenant reaches only its own sandboxes'
// processes: another's are 404 NOT_FOUND on every route, terminal
// included, and nothing is started, written, signalled or recorded.
func TestProcessesOfAnotherTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readySandbox(t, keyA, map[string]any{}).ID
	p := b.startProcess(t, id, map[string]any{"command": "cat", "stdin": true})
	base := "/v1/sandboxes/" + id + "/processes"
	one := base + "/" + strconv.Itoa(p.PID)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, base, map[string]any{"command": "sleep 9"}},
		{http.MethodGet, base, nil},
		{http.MethodGet, one, nil},
		{http.MethodGet, one + "/output?from=start", nil},
		{http.MethodPost, one + "/stdin?close=true", "stolen"},
		{http.MethodPost, one + "/signal", map[string]any{"signal": "KILL"}},
		{http.MethodPost, one + "/resize", map[string]any{"rows": 1, "cols": 1}},
		{http.MethodGet, "/v1/sandboxes/" + id + "/watch?path=/workspace", nil},
	} {
		wantProblem(t, b.do(t, c.method, c.path, c.body, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	}
	ws := "ws" + strings.TrimPrefix(b.URL, "http") + one + "/terminal"
	_, resp, err := websocket.DefaultDialer.Dial(ws, http.Header{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer." + keyB}})
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("tenant b's terminal: %v %v; want 404", err, resp)
	}
	r := b.do(t, http.MethodGet, one, nil)
	var got processJSON
	r.decode(t, &got)
	if !got.Running {
		t.Fatalf("tenant a's process %s; want it running, untouched", r)
	}
	if acts := b.procActivity(t, keyA, id); len(acts) != 1 {
		t.Fatalf("activity %+v; want tenant a's start only", acts)
	}
}

// TestTerminalSubprotocolKey: a terminal's WebSocket authenticates by the
// key in its subprotocol list as by its Authorization header; a bad key
// is 401, and no other route takes a key that way.
func TestTerminalSubprotocolKey(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	id := b.readySandbox(t, keyA, map[string]any{}).ID
	p := b.startProcess(t, id, map[string]any{"command": "sleep 100"})
	ws := "ws" + strings.TrimPrefix(b.URL, "http") + "/v1/sandboxes/" + id + "/processes/" + strconv.Itoa(p.PID) + "/terminal"
	dial := func(h http.Header) int {
		t.Helper()
		conn, resp, err := websocket.DefaultDialer.Dial(ws, h)
		if resp != nil {
			_ = resp.Body.Close()
		}
		if err == nil {
			_ = conn.Close()
			t.Fatal("a terminal of a sim process (no PTY) was opened")
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return resp.StatusCode
	}
	// The key is good (the sim's lack of terminals answers, not the auth).
	if got := dial(http.Header{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer." + keyA}}); got != http.StatusNotImplemented {
		t.Fatalf("with the key in the subprotocols: %d; want 501", got)
	}
	if got := dial(http.Header{"Authorization": {"Bearer " + keyA}}); got != http.StatusNotImplemented {
		t.Fatalf("with Authorization: %d; want 501", got)
	}
	for _, h := range []http.Header{
		{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer.wrong"}},
		{"Sec-WebSocket-Protocol": {"tether.v1"}},
		{},
	} {
		if got := dial(h); got != http.StatusUnauthorized {
			t.Fatalf("%v: %d; want 401", h, got)
		}
	}
	// A port's WebSocket never takes the key from its subprotocols (they
	// go on to the app).
	port := "ws" + strings.TrimPrefix(b.URL, "http") + "/v1/sandboxes/" + id + "/ports/8080/"
	_, resp, err := websocket.DefaultDialer.Dial(port, http.Header{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer." + keyA}})
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a port with the key in the subprotocols: %v %v; want 401", err, resp)
	}
}

// wantNoContent asserts r is a 204.
func wantNoContent(t *testing.T, r *response) {
	t.Helper()
	if r.Status != http.StatusNoContent {
		t.Fatalf("status = %d, want 204 (body %s)", r.Status, r.Body)
	}
}
