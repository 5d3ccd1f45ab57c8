package e2b

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/tetherhq/tether/provider"
)

// floodWatcher is a FileWatcher that arms, then emits n creates as fast
// as it can, then waits for its end.
type floodWatcher struct{ n int }

func (f floodWatcher) WatchFiles(ctx context.Context, _, _ string, _ bool, emit func(provider.FileEvent) error) error {
	if err := emit(provider.FileEvent{Kind: provider.FileWatchStart}); err != nil {
		return err
	}
	for i := range f.n {
		if err := emit(provider.FileEvent{Kind: provider.FileCreate, Path: "f" + string(rune('a'+i%26))}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// missingWatcher fails as a watch of a missing folder does.
type missingWatcher struct{}

func (missingWatcher) WatchFiles(context.Context, string, string, bool, func(provider.FileEvent) error) error {
	return provider.Errorf(provider.CodeFileNotFound, "no such folder")
}

// TestWatcherFull: a watcher whose events nobody takes stops at
// maxWatcherEvents; the next poll takes them, the one after says it ended
// full, and the watcher is gone.
func TestWatcherFull(t *testing.T) {
	t.Parallel()
	ws := newWatchers()
	w, err := ws.start(t.Context(), floodWatcher{n: maxWatcherEvents + 5}, "sbx_a", "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	<-w.done // the flood ended the watch once full
	evs, err := w.take()
	if err != nil || len(evs) != maxWatcherEvents {
		t.Fatalf("first poll: %d events, %v; want %d", len(evs), err, maxWatcherEvents)
	}
	if _, err := w.take(); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second poll: %v, want resource_exhausted", err)
	}
	ws.remove(w.id)
	if _, err := ws.lookup(w.id, "sbx_a"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("after remove: %v", err)
	}
}

// TestWatcherBounds: a watch that fails to arm is the provider's error
// and leaves no watcher; a sandbox holds at most maxWatchers; another
// sandbox's watcher is not found; remove ends the watch.
func TestWatcherBounds(t *testing.T) {
	t.Parallel()
	ws := newWatchers()
	if _, err := ws.start(t.Context(), missingWatcher{}, "sbx_a", "/nope", false); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("missing folder: %v", err)
	}
	if len(ws.byID) != 0 {
		t.Fatalf("a failed watch left %d watchers", len(ws.byID))
	}
	var first *watcher
	for i := range maxWatchers {
		w, err := ws.start(t.Context(), floodWatcher{}, "sbx_a", "/w", false)
		if err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
		if first == nil {
			first = w
		}
	}
	if _, err := ws.start(t.Context(), floodWatcher{}, "sbx_a", "/w", false); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("one past the cap: %v", err)
	}
	if _, err := ws.start(t.Context(), floodWatcher{}, "sbx_b", "/w", false); err != nil {
		t.Fatalf("another sandbox's: %v", err)
	}
	if _, err := ws.lookup(first.id, "sbx_b"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("another sandbox's lookup: %v", err)
	}
	ws.remove(first.id)
	select {
	case <-first.done:
	default:
		t.Fatal("remove returned before the watch ended")
	}
	if !errors.Is(first.err, context.Canceled) {
		t.Fatalf("the removed watch ended with %v", first.err)
	}
	for id := range ws.byID {
		ws.remove(id)
	}
}
