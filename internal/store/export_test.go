package store

// SharedCalls returns how many calls of each batched kind flew in a flight
// with others, so that tests of the batched statements can tell that they
// ran.
func (s *Store) SharedCalls() map[string]int64 {
	return map[string]int64{
		"creates":       s.creates.shared.Load(),
		"ends":          s.ends.shared.Load(),
		"readies":       s.readies.shared.Load(),
		"quiet readies": s.quietReadies.shared.Load(),
		"releases":      s.releases.shared.Load(),
	}
}

// The SQL state lists, for TestStateLists.
const (
	LiveStatesSQL     = liveStates
	TerminalStatesSQL = terminalStates
)

// SetAfterNotLive makes EndSandbox call f between an end that found nothing
// live and its read of the sandbox.
func (s *Store) SetAfterNotLive(f func()) { s.afterNotLive = f }
