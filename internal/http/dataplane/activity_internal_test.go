package dataplane

import (
	"testing"
	"time"
)

// TestRecordsOnTheirWay: a read waits for the records on their way when
// it began, only those (so that a busy sandbox cannot hold it up), and
// only the sandbox's own.
func TestRecordsOnTheirWay(t *testing.T) {
	t.Parallel()
	r := newRecordsOnTheirWay()
	first := r.expect("sbx_a")
	other := r.expect("sbx_b")
	defer other()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.await(t.Context(), "sbx_a")
	}()
	select {
	case <-returned:
		t.Fatal("the read did not wait for the record on its way")
	case <-time.After(50 * time.Millisecond):
	}
	later := r.expect("sbx_a") // expected after the read began
	first()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the read waits for a record expected after it began")
	}
	later()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending["sbx_a"]; ok || len(r.pending) != 1 {
		t.Fatalf("pending = %v; want only sbx_b's record", r.pending)
	}
}
