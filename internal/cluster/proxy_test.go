package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is what node b's test handler saw of a forwarded call.
type seen struct {
	Caller        Caller
	Body          string
	RequestID     string
	Authorization string
}

// nodeB serves node b's end: it verifies each call, reads its body, and
// answers with what it saw; ?stream streams until its call ends, which it
// then reports on ended.
func nodeB(t *testing.T, n nodes) (url string, ended chan struct{}) {
	t.Helper()
	ended = make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as, err := n.b.Verify(r, route, nil)
		if err != nil {
			Refuse(w.Header(), RefusalOf(err))
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-Request-ID", "node-b's own")
		if r.URL.Query().Has("stream") {
			_, _ = io.WriteString(w, "started\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			ended <- struct{}{}
			return
		}
		_ = json.NewEncoder(w).Encode(seen{Caller: as, Body: string(body), RequestID: r.Header.Get("X-Request-ID"),
			Authorization: r.Header.Get("Authorization")})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ended
}

// incoming is a call as node a's server receives it.
func incoming(query, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes/sbx_1/exec"+query, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer the-callers-key")
	return r
}

// TestForward: a call forwarded to a live node arrives signed, with its
// body, as the caller, under the forwarding replica's request id and
// without the API key; the node's answer comes back as it is but for its
// own request id.
func TestForward(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	url, _ := nodeB(t, n)
	heartbeat(t, n.st, "b", url)
	w := httptest.NewRecorder()
	if err := n.a.Forward(w, incoming("", `{"command":"id"}`), Call{Node: "b", As: caller, RequestID: "req-1"}); err != nil {
		t.Fatalf("Forward: %v", err)
	}
	var got seen
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("the node answered %d %q (%v)", w.Code, w.Body, err)
	}
	want := seen{Caller: caller, Body: `{"command":"id"}`, RequestID: "req-1"}
	if got != want {
		t.Errorf("the node saw %+v; want %+v", got, want)
	}
	if id := w.Header().Get("X-Request-ID"); id != "" {
		t.Errorf("the answer carries the node's request id %q", id)
	}
}

// TestForwardFails: a dead or unknown node is ErrNodeDown, a node that
// refuses the call is ErrNodeRefused, one that does not answer ErrHop,
// and none writes anything.
func TestForwardFails(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	url, _ := nodeB(t, n)
	heartbeat(t, n.st, "b", url)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	heartbeat(t, n.st, "gone", closed.URL)
	// Node c holds another secret: node b refuses what it signs.
	c := New(Nodes{Self: "c", Secret: []byte("another secret, of another cluster"), Finder: n.st})
	for name, tc := range map[string]struct {
		from *Cluster
		node string
		want error
	}{
		"unknown node":   {n.a, "nobody", ErrNodeDown},
		"refused":        {c, "b", ErrNodeRefused},
		"did not answer": {n.a, "gone", ErrHop},
	} {
		w := httptest.NewRecorder()
		err := tc.from.Forward(w, incoming("", `{}`), Call{Node: tc.node, As: caller})
		if !errors.Is(err, tc.want) || w.Body.Len() > 0 || w.Code != http.StatusOK && w.Code != 0 {
			t.Errorf("%s: Forward = %v, wrote %d %q; want %v and nothing written", name, err, w.Code, w.Body, tc.want)
		}
	}
	// The refusal says why: here, the signature.
	var refused *RefusedError
	if err := c.Forward(httptest.NewRecorder(), incoming("", `{}`), Call{Node: "b", As: caller}); !errors.As(err, &refused) || refused.Why != RefusedCall {
		t.Errorf("a call signed with another secret: Forward = %v; want a refusal of the call", err)
	}
	if _, err := n.st.Pool().Exec(t.Context(), `UPDATE nodes SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if err := n.a.Forward(httptest.NewRecorder(), incoming("", `{}`), Call{Node: "b", As: caller}); !errors.Is(err, ErrNodeDown) {
		t.Errorf("a dead node: Forward = %v; want %v", err, ErrNodeDown)
	}
}

// firstWrite is a response recorder that calls then after its first write.
type firstWrite struct {
	*httptest.ResponseRecorder
	then func()
	once sync.Once
}

func (w *firstWrite) Write(p []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(p)
	w.once.Do(w.then)
	return n, err
}

// TestForwardCut: a streamed answer cut by Call.Cut reads as ended, ends
// the node's call with it, and Forward says so.
func TestForwardCut(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	url, ended := nodeB(t, n)
	heartbeat(t, n.st, "b", url)
	cut, stop := context.WithCancel(context.Background())
	defer stop()
	// Cut once the node's first bytes reached the client.
	w := &firstWrite{ResponseRecorder: httptest.NewRecorder(), then: stop}
	done := make(chan error, 1)
	go func() { done <- n.a.Forward(w, incoming("?stream", `{}`), Call{Node: "b", As: caller, Cut: cut}) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCut) {
			t.Fatalf("Forward = %v; want %v", err, ErrCut)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Forward did not return after the cut")
	}
	if w.Body.String() != "started\n" {
		t.Errorf("the cut answer is %q; want what the node sent before", w.Body)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the node's call did not end with the cut")
	}
}
