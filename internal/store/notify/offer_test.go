package notify

import (
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

// TestOfferKeepsTheFurthestChange checks a sandbox subscription: it holds
// one change, the furthest along, whatever order the changes arrive in, and
// the look-again signal outranks them all.
func TestOfferKeepsTheFurthestChange(t *testing.T) {
	t.Parallel()
	c := func(state domain.State, released bool) domain.Change {
		return domain.Change{ID: "x", State: state, Released: released}
	}
	for _, tc := range []struct {
		name string
		sent []domain.Change
		want domain.Change
	}{
		{"in order", []domain.Change{c(domain.StateCreating, false), c(domain.StateReady, false)}, c(domain.StateReady, false)},
		{"late ready after the end", []domain.Change{c(domain.StateTerminated, false), c(domain.StateReady, false)}, c(domain.StateTerminated, false)},
		{"late end after the release", []domain.Change{c(domain.StateCancelled, true), c(domain.StateCancelled, false)}, c(domain.StateCancelled, true)},
		{"look again stays", []domain.Change{{}, c(domain.StateReady, false)}, domain.Change{}},
		{"look again replaces", []domain.Change{c(domain.StateReady, false), {}}, domain.Change{}},
	} {
		ch := make(chan domain.Change, 1)
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
	ch := make(chan domain.Change, 4)
	for i := range 4 {
		offerAll(ch, domain.Change{ID: string(rune('a' + i)), State: domain.StateRequested})
	}
	if len(ch) != 4 {
		t.Fatalf("buffer holds %d changes, want 4", len(ch))
	}
	offerAll(ch, domain.Change{ID: "e", State: domain.StateRequested})
	if len(ch) != 1 {
		t.Fatalf("after overflow the buffer holds %d changes, want 1", len(ch))
	}
	if got := <-ch; got != (domain.Change{}) {
		t.Errorf("after overflow: %+v, want the look-again signal", got)
	}
}
