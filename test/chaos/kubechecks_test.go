//go:build kubernetes

package chaos

import (
	"slices"
	"testing"
)

// TestKubeLeaks: a pod, policy or other object of a sandbox that is not
// ready is a leak; a ready sandbox without exactly one pod is missing.
func TestKubeLeaks(t *testing.T) {
	t.Parallel()
	s := kubeState{
		ready:    map[string]bool{"live": true, "twice": true},
		pods:     map[string]int{"live": 1, "twice": 2, "gone": 1},
		policies: map[string]int{"live": 1, "gone": 1},
		others:   map[string]int{"service/live": 1, "service/gone": 1, "pvc/gone": 1},
	}
	if got := s.leaks(s.pods); !slices.Equal(got, []string{"gone×1"}) {
		t.Errorf("pod leaks = %v", got)
	}
	if got := s.leaks(s.policies); !slices.Equal(got, []string{"gone×1"}) {
		t.Errorf("policy leaks = %v", got)
	}
	got := s.otherLeaks()
	slices.Sort(got)
	if !slices.Equal(got, []string{"pvc/gone×1", "service/gone×1"}) {
		t.Errorf("other leaks = %v", got)
	}
	if got := s.missing(); !slices.Equal(got, []string{"twice (2 pods)"}) {
		t.Errorf("missing = %v", got)
	}
	if s.quiet() {
		t.Error("quiet with leaks")
	}
}
