package notify

import (
	"testing"

	"github.com/tetherhq/tether/internal/sandbox"
)

// TestOfferKeepsTheFurthestChange checks a sandbox subscription: it holds
// one change, the furthest along, whatever order the changes arrive in, and
// the look-again signal outranks them all.
func TestOfferKeepsTheFurthestChange(t *testing.T) {
	t.Parallel()
	c := func(state sandbox.State, released bool) sandbox.Change {
		return sandbox.Change{ID: "x", State: state, Released: released}
	}
	for _, tc := range []struct {
		name string
		sent []sandbox.Change
		want sandbox.Change
	}{
		{"in order", []sandbox.Change{c(sandbox.StateCreating, false), c(sandbox.StateReady, false)}, c(sandbox.StateReady, false)},
		{"late ready after the end", []sandbox.Change{c(sandbox.StateTerminated, false), c(sandbox.StateReady, false)}, c(sandbox.StateTerminated, false)},
		{"late end after the release", []sandbox.Change{c(sandbox.StateCancelled, true), c(sandbox.StateCancelled, false)}, c(sandbox.StateCancelled, true)},
		{"look again stays", []sandbox.Change{{}, c(sandbox.StateReady, false)}, sandbox.Change{}},
		{"look again replaces", []sandbox.Change{c(sandbox.StateReady, false), {}}, sandbox.Change{}},
	} {
		ch := make(chan sandbox.Change, 1)
		for _, n := range tc.sent {
			offer(ch, n)
		}
		if got := <-ch; got != tc.want {
			t.Errorf("%s: holds %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestOfferAllOverflowsToLookAgain checks the executor's subscription: a
// full buffer becomes one look-again signal, never a lost change.
func TestOfferAllOverflowsToLookAgain(t *testing.T) {
	t.Parallel()
	ch := make(chan sandbox.Change, 4)
	for i := range 4 {
		offerAll(ch, sandbox.Change{ID: string(rune('a' + i)), State: sandbox.StateRequested})
	}
	if len(ch) != 4 {
		t.Fatalf("buffer holds %d changes, want 4", len(ch))
	}
	offerAll(ch, sandbox.Change{ID: "e", State: sandbox.StateRequested})
	if len(ch) != 1 {
		t.Fatalf("after overflow the buffer holds %d changes, want 1", len(ch))
	}
	if got := <-ch; got != (sandbox.Change{}) {
		t.Errorf("after overflow: %+v, want the look-again signal", got)
	}
}
