package sandbox_test

import (
	"testing"

	"github.com/tetherhq/tether/internal/sandbox"
)

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]sandbox.State]bool{
		{sandbox.StateRequested, sandbox.StateCreating}:  true,
		{sandbox.StateRequested, sandbox.StateCancelled}: true,
		{sandbox.StateCreating, sandbox.StateReady}:      true,
		{sandbox.StateCreating, sandbox.StateCancelled}:  true,
		{sandbox.StateCreating, sandbox.StateFailed}:     true,
		{sandbox.StateReady, sandbox.StateTerminated}:    true,
		{sandbox.StateReady, sandbox.StatePausing}:       true,
		{sandbox.StatePausing, sandbox.StatePaused}:      true,
		{sandbox.StatePausing, sandbox.StateReady}:       true,
		{sandbox.StatePausing, sandbox.StateTerminated}:  true,
		{sandbox.StatePausing, sandbox.StateFailed}:      true,
		{sandbox.StatePaused, sandbox.StateResuming}:     true,
		{sandbox.StatePaused, sandbox.StateTerminated}:   true,
		{sandbox.StateResuming, sandbox.StateReady}:      true,
		{sandbox.StateResuming, sandbox.StatePaused}:     true,
		{sandbox.StateResuming, sandbox.StateTerminated}: true,
		{sandbox.StateResuming, sandbox.StateFailed}:     true,
	}
	if len(sandbox.States) != 9 {
		t.Fatalf("States has %d states; this table knows 9", len(sandbox.States))
	}
	for _, from := range sandbox.States {
		for _, to := range sandbox.States {
			if got, want := sandbox.CanTransition(from, to), allowed[[2]sandbox.State{from, to}]; got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
		if from.Terminal() {
			if _, ok := sandbox.EndState(from); ok {
				t.Errorf("EndState(%s) ok for a terminal state", from)
			}
			continue
		}
		end, ok := sandbox.EndState(from)
		if !ok || !sandbox.CanTransition(from, end) {
			t.Errorf("EndState(%s) = %s, %v: not a legal way to end", from, end, ok)
		}
		// Only what never held a resource ends cancelled.
		if neverHeld := from == sandbox.StateRequested || from == sandbox.StateCreating; neverHeld != (end == sandbox.StateCancelled) {
			t.Errorf("EndState(%s) = %s", from, end)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	prev := sandbox.NewID()
	seen := map[string]bool{prev: true}
	for range 1000 {
		id := sandbox.NewID()
		if !sandbox.ValidID(id) {
			t.Fatalf("NewID() = %q is not ValidID", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		if id[:13] < prev[:13] { // the first 45 bits are the time
			t.Fatalf("ids go back in time: %s after %s", id, prev)
		}
		seen[id], prev = true, id
	}
	for _, bad := range []string{"", "sbx_", "sbx_short", "xyz_0123456789abcdefghjkmnpq", "sbx_0123456789abcdefghjkmnpI", "sbx_0123456789abcdefghjkmnpqr",
		"sbx_00000000000000000000000001"} { // the last: 2 bits past the 128 set, another spelling of sbx_…0
		if sandbox.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestSettledAndTransitioning(t *testing.T) {
	t.Parallel()
	unsettled := map[sandbox.State]bool{sandbox.StateRequested: true, sandbox.StateCreating: true,
		sandbox.StatePausing: true, sandbox.StateResuming: true}
	for _, s := range sandbox.States {
		if got := s.Settled(); got == unsettled[s] {
			t.Errorf("%s.Settled() = %v", s, got)
		}
		if got, want := s.Transitioning(), s == sandbox.StatePausing || s == sandbox.StateResuming; got != want {
			t.Errorf("%s.Transitioning() = %v", s, got)
		}
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if sandbox.State("frozen").Valid() {
		t.Error(`State("frozen").Valid() = true`)
	}
}
