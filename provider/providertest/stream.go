package providertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// stream runs a call that passes events to an emit (AttachProcess,
// WatchFiles) on a goroutine of its own, and records them. It fails the
// test on calls of emit that overlap or come after the call returned.
type stream[E any] struct {
	t      *testing.T
	cancel context.CancelFunc
	// done is closed once the call returned err.
	done chan struct{}
	err  error

	mu       sync.Mutex
	events   []E
	changed  chan struct{}
	inside   atomic.Int32
	returned atomic.Bool
	// abandoned is set once the test gave up waiting for the call, which
	// may then no longer report to it.
	abandoned atomic.Bool
	// fail, if set, is what emit returns for the event (nil: go on).
	fail func(E) error
}

// startStream calls call with an emit that records, on a goroutine of
// its own, under a context that the returned stream's stop (and t's
// end) cancels.
func startStream[E any](t *testing.T, parent context.Context, fail func(E) error, call func(ctx context.Context, emit func(E) error) error) *stream[E] {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	st := &stream[E]{t: t, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}), fail: fail}
	go func() {
		defer close(st.done)
		st.err = call(ctx, st.emit)
		st.returned.Store(true)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-st.done:
		case <-time.After(time.Minute):
			st.abandoned.Store(true)
			t.Error("the call did not return within a minute of its context's end")
		}
	})
	return st
}

func (st *stream[E]) emit(e E) error {
	if st.abandoned.Load() {
		return errors.New("the test is over")
	}
	if st.inside.Add(1) != 1 {
		st.t.Error("emit was called concurrently")
	}
	defer st.inside.Add(-1)
	if st.returned.Load() {
		st.t.Error("emit was called after the call returned")
	}
	st.mu.Lock()
	st.events = append(st.events, e)
	close(st.changed)
	st.changed = make(chan struct{})
	st.mu.Unlock()
	if st.fail != nil {
		return st.fail(e)
	}
	return nil
}

// snapshot returns the events so far, and a channel closed at the next.
func (st *stream[E]) snapshot() ([]E, <-chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]E(nil), st.events...), st.changed
}

// waitFor waits, a bounded while, until ok holds of the events so far,
// and returns them; it fails t if it never does, saying what.
func (st *stream[E]) waitFor(what string, within time.Duration, ok func([]E) bool) []E {
	st.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		events, changed := st.snapshot()
		if ok(events) {
			return events
		}
		select {
		case <-changed:
		case <-st.done:
			if events, _ := st.snapshot(); ok(events) {
				return events
			}
			st.t.Fatalf("the stream ended (%v) before %s; it had %d events: %s", st.err, what, len(events), summary(events))
		case <-deadline.C:
			st.t.Fatalf("no %s within %s; the stream had %d events: %s", what, within, len(events), summary(events))
		}
	}
}

// summary describes events for a failure's message: the last ten, the
// data of each cut short.
func summary[E any](events []E) string {
	var b strings.Builder
	for _, e := range events[max(len(events)-10, 0):] {
		switch e := any(e).(type) {
		case provider.ProcessEvent:
			fmt.Fprintf(&b, "[%s pid %d at %d, %d bytes %q, dropped %d, exit %+v] ", e.Kind, e.PID, e.Offset, len(e.Data), cut(e.Data), e.Dropped, e.Exit)
		default:
			fmt.Fprintf(&b, "%+v ", e)
		}
	}
	return b.String()
}

// cut is data, or its first 40 bytes.
func cut(data []byte) []byte { return data[:min(len(data), 40)] }

// wait waits, a bounded while, for the call to return, and returns its
// error.
func (st *stream[E]) wait(within time.Duration) error {
	st.t.Helper()
	select {
	case <-st.done:
		return st.err
	case <-time.After(within):
		st.t.Fatalf("the call did not return within %s", within)
		return nil
	}
}

// stop cancels the call's context.
func (st *stream[E]) stop() { st.cancel() }
