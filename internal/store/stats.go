package store

import (
	"context"
	"time"
)

// Stats is a snapshot of the registry for metrics.
type Stats struct {
	// Live counts the live sandboxes by provider and state.
	Live map[[2]string]int64
	// Unreleased counts terminal sandboxes not yet confirmed released.
	Unreleased int64
	// OldestUnreleased is when the longest-waiting of those ended.
	OldestUnreleased *time.Time
	// Nodes are every registered node, with its count of live sandboxes
	// of every tenant.
	Nodes []Node
}

// Stats reads the registry's counters. It touches only the live and
// unreleased sandboxes, through their partial indexes, never the history.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Live: map[[2]string]int64{}}
	rows, err := s.pool.Query(ctx, `
		SELECT provider, state, count(*) FROM sandboxes
		WHERE state IN `+liveStates+` GROUP BY provider, state`)
	if err != nil {
		return st, wrap("stats", err)
	}
	for rows.Next() {
		var provider, state string
		var n int64
		if err := rows.Scan(&provider, &state, &n); err != nil {
			rows.Close()
			return st, wrap("stats", err)
		}
		st.Live[[2]string{provider, state}] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, wrap("stats", err)
	}
	err = s.pool.QueryRow(ctx, `
		SELECT count(*), min(ended_at) FROM sandboxes
		WHERE NOT released AND state IN `+terminalStates+``).Scan(&st.Unreleased, &st.OldestUnreleased)
	if err != nil {
		return st, wrap("stats", err)
	}
	rows, err = query(ctx, s.pool, `
		SELECT `+nodeColumns+`,
			(SELECT count(*) FROM sandboxes sb WHERE sb.node = n.id AND sb.state IN `+liveStates+`)
		FROM nodes n ORDER BY n.id`, namedArgs{"grace": s.nodeGrace})
	if err != nil {
		return st, wrap("stats", err)
	}
	if st.Nodes, err = collectNodes(rows); err != nil {
		return st, wrap("stats", err)
	}
	return st, nil
}
