package domain_test

import (
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]domain.State]bool{
		{domain.StateRequested, domain.StateCreating}:  true,
		{domain.StateRequested, domain.StateCancelled}: true,
		{domain.StateCreating, domain.StateReady}:      true,
		{domain.StateCreating, domain.StateCancelled}:  true,
		{domain.StateCreating, domain.StateFailed}:     true,
		{domain.StateReady, domain.StateTerminated}:    true,
		{domain.StateReady, domain.StatePausing}:       true,
		{domain.StatePausing, domain.StatePaused}:      true,
		{domain.StatePausing, domain.StateReady}:       true,
		{domain.StatePausing, domain.StateTerminated}:  true,
		{domain.StatePausing, domain.StateFailed}:      true,
		{domain.StatePaused, domain.StateResuming}:     true,
		{domain.StatePaused, domain.StateTerminated}:   true,
		{domain.StateResuming, domain.StateReady}:      true,
		{domain.StateResuming, domain.StatePaused}:     true,
		{domain.StateResuming, domain.StateTerminated}: true,
		{domain.StateResuming, domain.StateFailed}:     true,
	}
	if len(domain.States) != 9 {
		t.Fatalf("States has %d states; this table knows 9", len(domain.States))
	}
	for _, from := range domain.States {
		for _, to := range domain.States {
			if got, want := domain.CanTransition(from, to), allowed[[2]domain.State{from, to}]; got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
		if from.Terminal() {
			if _, ok := domain.EndState(from); ok {
				t.Errorf("EndState(%s) ok for a terminal state", from)
			}
			continue
		}
		end, ok := domain.EndState(from)
		if !ok || !domain.CanTransition(from, end) {
			t.Errorf("EndState(%s) = %s, %v: not a legal way to end", from, end, ok)
		}
		// Only what never held a resource ends cancelled.
		if neverHeld := from == domain.StateRequested || from == domain.StateCreating; neverHeld != (end == domain.StateCancelled) {
			t.Errorf("EndState(%s) = %s", from, end)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	prev := domain.NewID()
	seen := map[string]bool{prev: true}
	for range 1000 {
		id := domain.NewID()
		if !domain.ValidID(id) {
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
		if domain.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestSettledAndTransitioning(t *testing.T) {
	t.Parallel()
	unsettled := map[domain.State]bool{domain.StateRequested: true, domain.StateCreating: true,
		domain.StatePausing: true, domain.StateResuming: true}
	for _, s := range domain.States {
		if got := s.Settled(); got == unsettled[s] {
			t.Errorf("%s.Settled() = %v", s, got)
		}
		if got, want := s.Transitioning(), s == domain.StatePausing || s == domain.StateResuming; got != want {
			t.Errorf("%s.Transitioning() = %v", s, got)
		}
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if domain.State("frozen").Valid() {
		t.Error(`State("frozen").Valid() = true`)
	}
}
