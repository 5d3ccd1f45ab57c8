package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamed is one event the stream sent.
type streamed struct {
	pos       string
	id        int64
	sandboxID string
	to        string
}

// readStream reads the tenant's event stream from after (empty: from now)
// until it has got n events or ctx ends, and returns them.
func readStream(ctx context.Context, t *testing.T, b *bundle, key, after string, n int) []streamed {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []streamed
	sc := bufio.NewScanner(resp.Body)
	var cur streamed
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.pos = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			var e struct {
				ID        int64  `json:"id"`
				SandboxID string `json:"sandbox_id"`
				To        string `json:"to"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
				t.Fatalf("event data: %v: %s", err, line)
			}
			cur.id, cur.sandboxID, cur.to = e.ID, e.SandboxID, e.To
		case line == "" && cur.pos != "":
			out = append(out, cur)
			cur = streamed{}
		}
	}
	return out
}

// TestEventStreamExactlyOnce: five writers create and end 1,000 sandboxes
// while a client reads the stream, drops the connection half way and
// resumes with Last-Event-ID: it gets every event exactly once, each
// sandbox's in their order.
func TestEventStreamExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, withQuotas(1_000_000, 1_000_000, 1_000_000))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	const total = 2000 // 1,000 sandboxes: requested, then cancelled
	// Where the stream stands before the writers begin.
	start, err := b.Store.StreamStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan []streamed, 1)
	go func() { first <- readStream(ctx, t, b, keyA, fmt.Sprintf("%d-%d", start.Tx, start.ID), total/2) }()

	var wg sync.WaitGroup
	for w := range 5 {
		wg.Go(func() {
			for i := range 200 {
				body := `{}`
				if i%3 == 0 {
					body = fmt.Sprintf(`{"owner":"writer-%d"}`, w) // a transaction of its own, not a batch
				}
				sb := b.create(t, keyA, body)
				wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil, as(keyA)), http.StatusAccepted)
			}
		})
	}
	got := <-first
	if len(got) != total/2 {
		t.Fatalf("the first connection got %d events before the test cut it, want %d", len(got), total/2)
	}
	got = append(got, readStream(ctx, t, b, keyA, got[len(got)-1].pos, total-len(got))...)
	wg.Wait()

	seen := map[int64]bool{}
	order := map[string][]string{}
	for _, e := range got {
		if seen[e.id] {
			t.Errorf("event %d was sent twice", e.id)
		}
		seen[e.id] = true
		order[e.sandboxID] = append(order[e.sandboxID], e.to)
	}
	var inDB int
	if err := b.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM sandbox_events WHERE tenant = $1`, tenantA).Scan(&inDB); err != nil {
		t.Fatal(err)
	}
	if len(seen) != total || inDB != total {
		t.Errorf("the stream sent %d distinct events; the tenant has %d; want %d", len(seen), inDB, total)
	}
	for id, states := range order {
		if strings.Join(states, ">") != "requested>cancelled" {
			t.Errorf("sandbox %s: events in stream order %v", id, states)
			break
		}
	}
}
