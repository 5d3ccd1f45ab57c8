package e2b_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/e2b"
)

// slowAPI stands in for /v1 with a create that never gets ready: a POST
// of a sandbox answers 202 with sbx_slow, a GET of it waits until its
// caller goes away and answers nothing (as gin does then), a DELETE is
// recorded.
type slowAPI struct {
	mu      sync.Mutex
	created chan struct{}
	deletes []string
}

func (f *slowAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"id":"sbx_slow","state":"requested","provider":"sim","created_at":"2026-01-01T00:00:00Z"}`)
		close(f.created)
	case r.Method == http.MethodGet:
		<-r.Context().Done()
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.deletes = append(f.deletes, r.URL.Path)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}
}

// TestCancelledCreateDeletes: a create whose caller goes away while its
// sandbox is being made deletes that sandbox, and answers the 499 /v1
// logs for such a caller, not a 500.
func TestCancelledCreateDeletes(t *testing.T) {
	t.Parallel()
	api := &slowAPI{created: make(chan struct{})}
	h := e2b.New(e2b.Options{API: api})
	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/e2b/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	req.Header.Set("X-API-Key", "k")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, req)
	}()
	select {
	case <-api.created:
	case <-time.After(10 * time.Second):
		t.Fatal("the create did not reach /v1")
	}
	cancel()
	<-done
	if w.Code != 499 {
		t.Errorf("status %d, want 499: %s", w.Code, w.Body)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.deletes) != 1 || api.deletes[0] != "/v1/sandboxes/sbx_slow" {
		t.Fatalf("deletes %v, want the sandbox the create made", api.deletes)
	}
}
