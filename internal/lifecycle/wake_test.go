package lifecycle

import (
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

// TestWantsWork checks which notifications wake the executor for which
// claims: a dispatch that claims what cannot be there costs a query.
func TestWantsWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		change domain.Change
		want   wanted
	}{
		{domain.Change{}, everything},
		{domain.Change{ID: "a", State: domain.StateRequested}, wanted{creates: true}},
		{domain.Change{ID: "a", State: domain.StateCreating}, wanted{}},
		{domain.Change{ID: "a", State: domain.StateReady}, wanted{}},
		{domain.Change{ID: "a", State: domain.StatePausing}, wanted{transitions: true}},
		{domain.Change{ID: "a", State: domain.StateResuming}, wanted{transitions: true}},
		{domain.Change{ID: "a", State: domain.StatePaused}, wanted{}},
		{domain.Change{ID: "a", State: domain.StateTerminated}, wanted{releases: true}},
		{domain.Change{ID: "a", State: domain.StateCancelled}, wanted{releases: true}},
		{domain.Change{ID: "a", State: domain.StateFailed}, wanted{releases: true}},
		{domain.Change{ID: "a", State: domain.StateCancelled, Released: true}, wanted{}},
		{domain.Change{ID: "snap_a", State: domain.SnapshotChanged}, wanted{snapshots: true}},
	} {
		if got := wantsWork(tc.change); got != tc.want {
			t.Errorf("wantsWork(%+v) = %+v, want %+v", tc.change, got, tc.want)
		}
	}
	if got := (wanted{creates: true}).or(wanted{releases: true, full: true}).or(wanted{transitions: true}).or(wanted{snapshots: true}); got != everything {
		t.Errorf("or = %+v, want everything", got)
	}
}
