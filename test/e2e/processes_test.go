package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// startProcess starts a process in the sandbox and returns its pid.
func (e *env) startProcess(id string, body map[string]any) int {
	e.t.Helper()
	code, p := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/processes", body)
	if code != http.StatusCreated {
		e.t.Fatalf("start %v = %d %v", body, code, p)
	}
	return int(p["pid"].(float64))
}

// stdin writes data, raw, to a process's stdin (path after the
// sandbox's processes/).
func (e *env) stdin(id, path, data string) int {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.replica.URL()+"/v1/sandboxes/"+id+"/processes/"+path, strings.NewReader(data))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// attach follows a process's output; the events come on the channel
// until the stream ends or ctx does.
func (e *env) attach(ctx context.Context, id string, pid int, from string) <-chan sseEvent {
	e.t.Helper()
	url := fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/output?from=%s", e.replica.URL(), id, pid, from)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the reader below closes it
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("attach = %d", resp.StatusCode)
	}
	out := make(chan sseEvent, 256)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		readEvents(resp.Body, out)
	}()
	return out
}

// until reads events, gathering the output, until one named name comes
// (returned) or the time is up.
func until(t *testing.T, events <-chan sseEvent, name string, output *strings.Builder) sseEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before %s; output so far %q", name, output.String())
			}
			if ev.name == "stdout" || ev.name == "stderr" || ev.name == "pty" {
				var chunk struct{ Data string }
				_ = json.Unmarshal([]byte(ev.data), &chunk)
				output.WriteString(chunk.Data)
			}
			if ev.name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event; output so far %q", name, output.String())
		}
	}
}

// waitOutput reads events until the output holds want.
func waitOutput(t *testing.T, events <-chan sseEvent, output *strings.Builder, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(output.String(), want) {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before %q; output %q", want, output.String())
			}
			if ev.name == "stdout" || ev.name == "stderr" || ev.name == "pty" {
				var chunk struct{ Data string }
				_ = json.Unmarshal([]byte(ev.data), &chunk)
				output.WriteString(chunk.Data)
			}
		case <-deadline:
			t.Fatalf("no %q in the output %q", want, output.String())
		}
	}
}

// TestBackgroundProcess: a background sh server started through the API
// is followed by two clients (one from its start, one from now), takes
// stdin, ends on SIGTERM with its trap's exit code, which both clients
// and a wait read; nothing of Tether's environment reaches a process.
func TestBackgroundProcess(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	pid := e.startProcess(id, map[string]any{
		"command": `trap 'echo got-term; exit 3' TERM; echo ready; exec 3<&0; cat <&3 & wait`,
		"stdin":   true, "tag": "server",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := e.attach(ctx, id, pid, "start")
	var out1, out2 strings.Builder
	waitOutput(t, first, &out1, "ready\n")
	second := e.attach(ctx, id, pid, "now")
	until(t, second, "start", &out2)
	if code, _ := e.stdin(id, "server/stdin", "hello from a client\n"), 0; code != http.StatusNoContent {
		t.Fatalf("stdin = %d", code)
	}
	waitOutput(t, first, &out1, "hello from a client\n")
	waitOutput(t, second, &out2, "hello from a client\n")
	if code, _ := e.do(http.MethodPost, fmt.Sprintf("/v1/sandboxes/%s/processes/%d/signal", id, pid), map[string]any{"signal": "TERM"}); code != http.StatusNoContent {
		t.Fatalf("signal = %d", code)
	}
	for _, c := range []struct {
		events <-chan sseEvent
		out    *strings.Builder
	}{{first, &out1}, {second, &out2}} {
		exit := until(t, c.events, "exit", c.out)
		if !strings.Contains(exit.data, `"code":3`) || !strings.Contains(c.out.String(), "got-term\n") {
			t.Fatalf("exit %s, output %q", exit.data, c.out.String())
		}
	}
	_, p := e.do(http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/processes/%d?wait=10s", id, pid), nil)
	if p["running"] != false || p["exit"].(map[string]any)["code"] != float64(3) {
		t.Fatalf("after its end: %v", p)
	}

	envPID := e.startProcess(id, map[string]any{"argv": []string{"env"}, "env": map[string]string{"MINE": "yes"}})
	var env strings.Builder
	until(t, e.attach(ctx, id, envPID, "start"), "exit", &env)
	if !strings.Contains(env.String(), "MINE=yes\n") {
		t.Fatalf("the process's environment lacks its own: %q", env.String())
	}
	for _, leak := range []string{"DATABASE_URL", "BOOTSTRAP_API_KEY", "LOCAL_STATE_DIR", key} {
		if strings.Contains(env.String(), leak) {
			t.Fatalf("the process's environment holds Tether's %s: %q", leak, env.String())
		}
	}
	code, acts := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil)
	kinds := []string{}
	for _, a := range acts["items"].([]any) {
		kinds = append(kinds, a.(map[string]any)["kind"].(string))
	}
	if code != http.StatusOK || strings.Join(kinds, ",") != "process_start,process_input,process_signal,process_start" {
		t.Fatalf("activity %d %v", code, kinds)
	}
}

// terminal is a client of a process's terminal WebSocket.
type terminal struct {
	t      *testing.T
	conn   *websocket.Conn
	screen strings.Builder
	exit   map[string]any
}

// openTerminal dials a terminal the way a browser does: the key in the
// subprotocol list.
func (e *env) openTerminal(id string, pid int) *terminal {
	e.t.Helper()
	url := "ws" + strings.TrimPrefix(e.replica.URL(), "http") + fmt.Sprintf("/v1/sandboxes/%s/processes/%d/terminal", id, pid)
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer." + key}})
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		e.t.Fatalf("dial the terminal: %v (%v)", err, resp)
	}
	if conn.Subprotocol() != "tether.v1" {
		e.t.Fatalf("subprotocol %q, want tether.v1", conn.Subprotocol())
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return &terminal{t: e.t, conn: conn}
}

func (tm *terminal) send(kind int, data string) {
	tm.t.Helper()
	if err := tm.conn.WriteMessage(kind, []byte(data)); err != nil {
		tm.t.Fatal(err)
	}
}

// waitFor reads frames until the screen's bytes hold want; with want
// empty, until the exit frame.
func (tm *terminal) waitFor(want string) {
	tm.t.Helper()
	_ = tm.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for want == "" || !strings.Contains(tm.screen.String(), want) {
		kind, data, err := tm.conn.ReadMessage()
		if err != nil {
			tm.t.Fatalf("waiting for %q: %v; screen %q", want, err, tm.screen.String())
		}
		if kind == websocket.BinaryMessage {
			tm.screen.Write(data)
			continue
		}
		var ctl map[string]any
		_ = json.Unmarshal(data, &ctl)
		if ex, ok := ctl["exit"].(map[string]any); ok {
			tm.exit = ex
			return
		}
		if ctl["error"] != nil {
			tm.t.Fatalf("error frame %s", data)
		}
	}
}

// TestTerminal: a shell in a terminal over the WebSocket honours its size
// and a resize (stty size), runs a full-screen program (vi) whose screen
// comes back and which writes its file, and ends with an exit frame.
func TestTerminal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	pid := e.startProcess(id, map[string]any{"argv": []string{"sh"}, "pty": map[string]int{"rows": 24, "cols": 80},
		"env": map[string]string{"PS1": "$ "}})
	tm := e.openTerminal(id, pid)
	tm.send(websocket.BinaryMessage, "stty size; echo TE''RM=$TERM\r")
	tm.waitFor("TERM=xterm-256color")
	if !strings.Contains(tm.screen.String(), "24 80") {
		t.Fatalf("stty size before the resize: %q", tm.screen.String())
	}
	tm.send(websocket.TextMessage, `{"resize":{"rows":30,"cols":100}}`)
	tm.send(websocket.BinaryMessage, "stty size\r")
	tm.waitFor("30 100")

	// vi, full screen: its screen of tildes comes back, what is typed is
	// shown, and :wq writes the file.
	tm.send(websocket.BinaryMessage, "vi /workspace/typed.txt\r")
	tm.waitFor("~")
	tm.send(websocket.BinaryMessage, "ihello from vi")
	tm.waitFor("hello from vi")
	tm.send(websocket.BinaryMessage, "\x1b:wq\r")
	tm.waitFor("written")
	tm.waitFor("\x1b[?1049l") // vi left the alternate screen
	tm.send(websocket.BinaryMessage, "echo vi-done\r")
	tm.waitFor("vi-done\r\n")
	if code, res := e.exec(id, "cat /workspace/typed.txt"); code != http.StatusOK || res["output"] != "hello from vi\n" {
		t.Fatalf("the file vi wrote: %d %v", code, res)
	}
	// A second client attaching later sees the screen drawn again.
	again := e.openTerminal(id, pid)
	again.waitFor("hello from vi")
	tm.send(websocket.BinaryMessage, "exit 5\r")
	tm.waitFor("")
	if tm.exit == nil || tm.exit["code"] != float64(5) {
		t.Fatalf("exit frame %v", tm.exit)
	}
	_ = again.conn.Close()
	// Each session is recorded once it ended: what was typed, and the pid.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, acts := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil)
		typed := ""
		for _, it := range acts["items"].([]any) {
			if a := it.(map[string]any); a["kind"] == "terminal" && a["pid"] == float64(pid) && a["input"] != nil {
				typed += a["input"].(string)
			}
		}
		if strings.Contains(typed, "vi /workspace/typed.txt") && strings.Contains(typed, "exit 5") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no terminal record of what was typed: %v", acts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWatch: a watch of /workspace streams a folder made, a file made,
// written, renamed and removed below it, with their paths.
func TestWatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+id+"/watch?path=/workspace&recursive=true", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the reader below closes it
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %v %v", err, resp)
	}
	events := make(chan sseEvent, 256)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		readEvents(resp.Body, events)
	}()
	var none strings.Builder
	until(t, events, "start", &none)
	// A new folder is watched before its create is sent, so what is
	// written in it once the client saw the create is seen as written.
	// (Written at once with the mkdir, it may come as a create alone.)
	if code, _ := e.exec(id, "mkdir /workspace/d"); code != http.StatusOK {
		t.Fatal("exec failed")
	}
	want := []string{"create d", "create d/f.txt", "write d/f.txt", "rename d/f.txt", "create g.txt", "remove g.txt"}
	var got []string
	wrote := false
	timeout := time.After(30 * time.Second)
	for len(got) == 0 || got[len(got)-1] != "remove g.txt" {
		if len(got) == 1 && got[0] == "create d" && !wrote {
			wrote = true
			if code, _ := e.exec(id, "echo x > /workspace/d/f.txt && mv /workspace/d/f.txt /workspace/g.txt && rm /workspace/g.txt"); code != http.StatusOK {
				t.Fatal("exec failed")
			}
		}
		select {
		case ev := <-events:
			var ch struct{ Kind, Path string }
			_ = json.Unmarshal([]byte(ev.data), &ch)
			if ev.name != ch.Kind {
				t.Fatalf("event %s carries kind %s", ev.name, ch.Kind)
			}
			if s := ch.Kind + " " + ch.Path; len(got) == 0 || got[len(got)-1] != s { // repeated writes are one
				got = append(got, s)
			}
		case <-timeout:
			t.Fatalf("changes so far %v; want %v", got, want)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("changes %v; want %v", got, want)
	}
}

// TestProcessesSurviveTetherKill: kill -9 of Tether while a process runs
// and a client follows it: the process goes on, the client attaches
// again after the restart and sees its output (from the start) and its
// exit, and nothing of it is left once the sandbox ends.
func TestProcessesSurviveTetherKill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	mark := "proc-mark-" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 10)
	pid := e.startProcess(id, map[string]any{
		"command": "echo before; exec 3<&0; cat <&3; echo after; : " + mark + "; exit 7",
		"stdin":   true,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out strings.Builder
	events := e.attach(ctx, id, pid, "start")
	waitOutput(t, events, &out, "before\n")
	e.replica.Kill()
	for range events { // the client's stream ends with Tether
	}
	if !running(mark) {
		t.Fatal("the process died with Tether")
	}
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	out.Reset()
	events = e.attach(ctx, id, pid, "start")
	waitOutput(t, events, &out, "before\n")
	if code, _ := e.stdin(id, strconv.Itoa(pid)+"/stdin?close=true", "during\n"), 0; code != http.StatusNoContent {
		t.Fatalf("stdin after the restart = %d", code)
	}
	exit := until(t, events, "exit", &out)
	if out.String() != "before\nduring\nafter\n" || !strings.Contains(exit.data, `"code":7`) {
		t.Fatalf("after the restart: output %q, exit %s", out.String(), exit.data)
	}
	// Another process still runs when the sandbox ends: it goes with it.
	e.startProcess(id, map[string]any{"command": "sleep 1000; : " + mark})
	if code, _ := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil); code != http.StatusAccepted {
		t.Fatal("delete failed")
	}
	e.waitFor(id, "released", released)
	waitGone(t, mark)
}
