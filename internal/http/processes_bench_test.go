package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/test/harness"
)

// localBundle is the API with the local provider beside the sims, and a
// ready local sandbox of tenant A; skipped where local cannot run (not
// root, no bubblewrap).
func localBundle(b *testing.B) (*bundle, string) {
	b.Helper()
	p, err := local.New(harness.ReachableTempDir(b))
	if err != nil {
		b.Fatal(err)
	}
	if info := p.Info(b.Context()); !info.Available {
		b.Skipf("local cannot run here: %s", info.Reason)
	}
	bd := setup(b, withExecutor(), withProvider(p))
	var sb struct{ ID, State string }
	if code := bd.call(b, http.MethodPost, "/v1/sandboxes", `{"provider":"local"}`, &sb); code != http.StatusAccepted {
		b.Fatalf("create = %d", code)
	}
	// Destroyed here, before the state folder goes (the executor's
	// release would come after it).
	b.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID) })
	if code := bd.call(b, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=60s", "", &sb); code != http.StatusOK || sb.State != "ready" {
		b.Fatalf("the local sandbox is %s (%d)", sb.State, code)
	}
	return bd, sb.ID
}

// call makes one request as tenant A, decoding a JSON answer into out.
func (bd *bundle) call(b *testing.B, method, path, body string, out any) int {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), method, bd.URL+path, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	resp, err := bd.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		_ = json.Unmarshal(raw, out)
	}
	return resp.StatusCode
}

// median and p99 of a sample (sorted in place).
func quantile(took []time.Duration, q float64) time.Duration {
	slices.Sort(took)
	return took[min(len(took)-1, int(float64(len(took))*q))]
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkBackgroundStartVsExec sets a background start through the
// API (POST .../processes of `true`, answered once it runs) beside its
// baseline in the same run, the foreground round trip of an exec of
// `true` (POST .../exec), taking turns, and reports both medians and
// their ratio (target: at most 1.2).
//
//	go test -run '^$' -bench BackgroundStartVsExec -benchtime 200x ./internal/http/
func BenchmarkBackgroundStartVsExec(b *testing.B) {
	bd, id := localBundle(b)
	var starts, execs []time.Duration
	for b.Loop() {
		began := time.Now()
		if code := bd.call(b, http.MethodPost, "/v1/sandboxes/"+id+"/exec", `{"command":"true"}`, nil); code != http.StatusOK {
			b.Fatalf("exec = %d", code)
		}
		execs = append(execs, time.Since(began))
		began = time.Now()
		if code := bd.call(b, http.MethodPost, "/v1/sandboxes/"+id+"/processes", `{"argv":["true"]}`, nil); code != http.StatusCreated {
			b.Fatalf("start = %d", code)
		}
		starts = append(starts, time.Since(began))
	}
	start, exec := quantile(starts, 0.5), quantile(execs, 0.5)
	b.ReportMetric(msOf(start), "start-p50-ms")
	b.ReportMetric(msOf(exec), "exec-p50-ms")
	b.ReportMetric(float64(start)/float64(exec), "start/exec")
}

// BenchmarkTerminalEcho measures a keystroke's echo over the terminal's
// WebSocket on loopback: a byte sent as a binary frame to the terminal of
// cat (raw, without the terminal's own echo) until cat's copy comes back
// as a binary frame; it reports the median and the 99th percentile
// (target: p99 at most 5 ms).
//
//	go test -run '^$' -bench TerminalEcho -benchtime 1000x ./internal/http/
func BenchmarkTerminalEcho(b *testing.B) {
	bd, id := localBundle(b)
	var p struct{ PID int }
	body := `{"argv":["sh","-c","stty raw -echo && echo ready && exec cat"],"pty":{"rows":24,"cols":80}}`
	if code := bd.call(b, http.MethodPost, "/v1/sandboxes/"+id+"/processes", body, &p); code != http.StatusCreated {
		b.Fatalf("start = %d", code)
	}
	url := "ws" + strings.TrimPrefix(bd.URL, "http") + "/v1/sandboxes/" + id + "/processes/" + strconv.Itoa(p.PID) + "/terminal"
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + keyA}})
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var screen []byte
	for !bytes.Contains(screen, []byte("ready")) { // stty ran: no echo from here on
		_, data, err := conn.ReadMessage()
		if err != nil {
			b.Fatal(err)
		}
		screen = append(screen, data...)
	}
	var took []time.Duration
	for b.Loop() {
		began := time.Now()
		if err := conn.WriteMessage(websocket.BinaryMessage, []byte("x")); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			kind, data, err := conn.ReadMessage()
			if err != nil {
				b.Fatal(err)
			}
			got = kind == websocket.BinaryMessage && bytes.Contains(data, []byte("x"))
		}
		took = append(took, time.Since(began))
	}
	b.ReportMetric(msOf(quantile(took, 0.5)), "p50-ms")
	b.ReportMetric(msOf(quantile(took, 0.99)), "p99-ms")
}
