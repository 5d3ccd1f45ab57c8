package store

// The SQL lists of the live and the terminal states, for `state IN ...`.
// Queries splice these very strings in, so that a query's predicate reads
// as the partial indexes' do (migrations) and the planner can use them;
// TestStateLists checks them against the domain's states.
const (
	liveStates     = `('requested', 'creating', 'ready')`
	terminalStates = `('cancelled', 'terminated', 'failed')`
)
