package lifecycle

import (
	"testing"

	"github.com/tetherhq/tether/internal/sandbox"
)

// TestWantsWork checks which notifications wake the executor for which
// claims: a dispatch that claims what cannot be there costs a query.
func TestWantsWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		change sandbox.Change
		want   wanted
	}{
		{sandbox.Change{}, everything},
		{sandbox.Change{ID: "a", State: sandbox.StateRequested}, wanted{creates: true}},
		{sandbox.Change{ID: "a", State: sandbox.StateCreating}, wanted{}},
		{sandbox.Change{ID: "a", State: sandbox.StateReady}, wanted{}},
		{sandbox.Change{ID: "a", State: sandbox.StatePausing}, wanted{transitions: true}},
		{sandbox.Change{ID: "a", State: sandbox.StateResuming}, wanted{transitions: true}},
		{sandbox.Change{ID: "a", State: sandbox.StatePaused}, wanted{}},
		{sandbox.Change{ID: "a", State: sandbox.StateTerminated}, wanted{releases: true}},
		{sandbox.Change{ID: "a", State: sandbox.StateCancelled}, wanted{releases: true}},
		{sandbox.Change{ID: "a", State: sandbox.StateFailed}, wanted{releases: true}},
		{sandbox.Change{ID: "a", State: sandbox.StateCancelled, Released: true}, wanted{}},
		{sandbox.Change{ID: "snap_a", State: sandbox.SnapshotChanged}, wanted{snapshots: true}},
	} {
		if got := wantsWork(tc.change); got != tc.want {
			t.Errorf("wantsWork(%+v) = %+v, want %+v", tc.change, got, tc.want)
		}
	}
	if got := (wanted{creates: true}).or(wanted{releases: true, full: true}).or(wanted{transitions: true}).or(wanted{snapshots: true}); got != everything {
		t.Errorf("or = %+v, want everything", got)
	}
}
