package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestWire checks the load generator's client against net/http's server:
// fixed-length and chunked bodies, a request body, a server that closes
// the connection, and connections reused in between.
func TestWire(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, `{"id":"a","state":"ready"}`)
		case "/chunked":
			w.(http.Flusher).Flush() // forces chunked encoding
			_, _ = io.WriteString(w, `{"id":"b",`)
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, `"released":true}`)
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(b)
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, `{"id":"c"}`)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	a := newAPI(srv.URL, "k", 2)
	defer a.wire.close()
	for range 3 {
		for _, tc := range []struct {
			method, path, body string
			code               int
			want               sandboxView
		}{
			{"GET", "/small", "", 200, sandboxView{ID: "a", State: "ready"}},
			{"GET", "/chunked", "", 200, sandboxView{ID: "b", Released: true}},
			{"POST", "/echo", `{"id":"d","state":"requested"}`, 202, sandboxView{ID: "d", State: "requested"}},
			{"GET", "/close", "", 200, sandboxView{ID: "c"}},
		} {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			var got sandboxView
			code, err := a.do(t.Context(), tc.method, tc.path, body, &got)
			if err != nil || code != tc.code || got != tc.want {
				t.Fatalf("%s %s = %d %+v, %v; want %d %+v", tc.method, tc.path, code, got, err, tc.code, tc.want)
			}
		}
	}
	// One connection carries the requests up to each /close: three in all.
	if conns.Load() != 3 {
		t.Errorf("%d connections, want 3", conns.Load())
	}
	if code, err := newAPI(srv.URL, "wrong", 1).do(t.Context(), "GET", "/small", nil, nil); err != nil || code != 401 {
		t.Errorf("wrong key: %d, %v", code, err)
	}
}
