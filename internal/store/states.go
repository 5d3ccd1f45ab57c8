package store

// The SQL lists of the live and the terminal states, for `state IN ...`.
// Queries that walk a set of sandboxes (a queue, the live ones) splice
// these very strings in, so that their predicate reads as the partial
// indexes' do (migrations) and the planner can use them; a statement that
// finds its rows by id hides its state test from the planner instead
// (byIDState). TestStateLists checks the lists against the domain's
// states.
const (
	liveStates     = `('requested', 'creating', 'ready', 'pausing', 'paused', 'resuming')`
	terminalStates = `('cancelled', 'terminated', 'failed')`
	// inFlightStates are those in which an executor's provider call may be
	// in flight under a lease: a create, a pause or a resume.
	inFlightStates = `('creating', 'pausing', 'resuming')`
	// placedStates are the live states of a sandbox whose create was
	// claimed: it is (or may be) running on its node.
	placedStates = `('creating', 'ready', 'pausing', 'paused', 'resuming')`
	// settledHeld are the states of a sandbox the provider holds with no
	// call in flight: one it no longer has is lost.
	settledHeld = `('ready', 'paused')`
)

// byIDState is the state test of a statement that finds its rows by id:
// `col IN states`, which it equals (state is never NULL), behind IS TRUE,
// which the planner cannot read as a partial index's predicate. With the
// plain test it may walk a work queue's partial index (sandboxes_pending,
// sandboxes_release_queue) instead of the primary key: the statistics show
// such an index nearly empty, while under churn it holds hundreds of
// entries, live and dead, every one of them read, and most fetched from
// the table, for each row written. TestByIDWritesUseThePrimaryKey checks
// the plans.
func byIDState(col, states string) string {
	return byIDTest(col + " IN " + states)
}

// byIDTest is any other test of a statement that finds its rows by id
// behind IS TRUE, for byIDState's reason: a lease test (lease_owner IS NOT
// NULL is the predicate of sandboxes_leased, lease_owner = $n implies it),
// or a state test against a parameter, which a custom plan sees as a
// constant. It must be a test that is never NULL, or one whose NULL drops
// the row anyway (a conjunct of WHERE).
func byIDTest(test string) string {
	return "(" + test + ") IS TRUE"
}
