package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestShutdownAnswersLongPolls: SIGTERM (here: the context) with long-polls
// in flight answers every one of them at once and exits within seconds.
func TestShutdownAnswersLongPolls(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "k",
		"PROVIDERS": "sim", "SHUTDOWN_TIMEOUT": "2s"})
	// A creation that takes a minute: the sandbox stays creating.
	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{"params":{"create_delay_ms":60000}}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)
	var wg, wrote sync.WaitGroup
	answers := make(chan int, 5)
	for range 5 {
		wrote.Add(1)
		wg.Go(func() {
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Done() }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, s.base+"/v1/sandboxes/"+id+"?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer k")
			// A connection of its own: a request sent on a kept-alive
			// connection that the server has not read yet may meet its
			// close at shutdown, as HTTP allows; that is not a long-poll.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Do(req)
			if err != nil {
				t.Logf("long-poll: %v", err)
				answers <- 0
				return
			}
			var got map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&got)
			_ = resp.Body.Close()
			if got["id"] != id {
				answers <- -resp.StatusCode
				return
			}
			answers <- resp.StatusCode
		})
	}
	// Shut down once the server serves all five (a request still in the
	// kernel's accept queue when the listener closes is refused, as with
	// any server).
	wrote.Wait()
	for deadline := time.Now().Add(10 * time.Second); inFlight(s) < 5+1; time.Sleep(10 * time.Millisecond) { // +1: the metrics request
		if time.Now().After(deadline) {
			t.Fatal("the long-polls never reached the server")
		}
	}
	start := time.Now()
	s.stop(t)
	took := time.Since(start)
	wg.Wait()
	close(answers)
	for code := range answers {
		if code != http.StatusOK {
			t.Errorf("a long-poll was answered %d at shutdown, want 200 with the sandbox", code)
		}
	}
	if took > 5*time.Second {
		t.Errorf("shutdown took %s with long-polls in flight, want under 5s", took)
	}
	if strings.Contains(s.logs.String(), "http shutdown incomplete") {
		t.Error("the HTTP shutdown did not complete")
	}
}

// TestIdleConnectionsDoNotLockOut: clients that hold keep-alive connections
// open without using them cannot keep a new client out.
func TestIdleConnectionsDoNotLockOut(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim", "MAX_CONNS": "4"})
	for range 8 {
		c := &http.Client{Transport: &http.Transport{}} // a connection of its own, kept alive
		resp, err := c.Get(s.base + "/healthz")
		if err != nil {
			continue // past the cap: waiting to be accepted is fine
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		t.Cleanup(c.CloseIdleConnections)
	}
	fresh := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer fresh.CloseIdleConnections()
	start := time.Now()
	resp, err := fresh.Get(s.base + "/healthz")
	if err != nil {
		t.Fatalf("a new client was locked out by idle connections: %v", err)
	}
	_ = resp.Body.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a new client waited %s behind idle connections", took)
	}
}

// inFlight is the server's count of requests being served.
func inFlight(s *server) int {
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "tether_http_requests_in_flight "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}
