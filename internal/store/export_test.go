package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

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

// ScanBothWays reads sandbox id by scanSandbox's fast path and by pgx's
// Scan, as a client read (clientColumns) or a worker's, with a leading
// state column (as claims read) if extra; fastRan says whether the fast
// path decoded the row rather than deferring to pgx.
func (s *Store) ScanBothWays(ctx context.Context, id string, client, extra bool) (fast, slow sandbox.Sandbox, fastRan bool, err error) {
	cols := sandboxColumns
	if client {
		cols = clientColumns
	}
	if extra {
		cols = "s.state, " + cols
	}
	q := `SELECT ` + cols + ` FROM sandboxes s WHERE s.id = $1`
	var fastFrom, slowFrom sandbox.State
	var dest []any
	if extra {
		dest = []any{&fastFrom}
	}
	if err := queryRow(ctx, s.pool, q, id).read(func(rows pgx.Rows) error {
		var err error
		fast, fastRan, err = rawSandbox(rows, dest)
		return err
	}); err != nil {
		return fast, slow, fastRan, err
	}
	if extra {
		dest = []any{&slowFrom}
	}
	slow, err = scanRow(s.pool.QueryRow(ctx, q, id), dest)
	if fastFrom != slowFrom {
		err = fmt.Errorf("leading state: fast %q, slow %q", fastFrom, slowFrom)
	}
	return fast, slow, fastRan, err
}

// ByIDWrite is a statement that writes sandboxes (or snapshots) it finds
// by id, with positional arguments of the types it takes.
type ByIDWrite struct {
	SQL  string
	Args []any
}

// byIDWrite is a ByIDWrite of sql with args, a statement of named
// arguments rewritten to positional ones.
func byIDWrite(sql string, args ...any) ByIDWrite {
	if len(args) == 1 {
		if named, ok := args[0].(namedArgs); ok {
			rewritten, values, err := named.RewriteQuery(context.Background(), nil, sql, nil)
			if err != nil {
				panic(err)
			}
			return ByIDWrite{rewritten, values}
		}
	}
	return ByIDWrite{sql, args}
}

// ByIDWrites are the writes that find sandboxes (or snapshots) by id, for
// TestByIDWritesUseThePrimaryKey.
func ByIDWrites() map[string]ByIDWrite {
	now, ids, epochs, names := time.Now(), []string{"sbx_a", "sbx_b"}, []int64{1, 1}, []string{"x", "y"}
	end := func(more namedArgs) namedArgs {
		more["now"], more["reason"], more["actor"], more["message"] = now, "lost", "janitor", "m"
		more["key_id"], more["key_name"] = nil, nil
		return more
	}
	return map[string]ByIDWrite{
		"ready":              byIDWrite(markReadySQL(changeOf), "sbx_a", int64(1), now, "x", "/w"),
		"ready, whole":       byIDWrite(markReadySQL(wholeRow), "sbx_a", int64(1), now, "x", "/w"),
		"readies":            byIDWrite(markReadyManySQL(changeOf), ids, epochs, names, names, now),
		"failed":             byIDWrite(markFailedSQL, "sbx_a", int64(1), now, "boom", "executor"),
		"unclaim":            byIDWrite(unclaimSQL, "sbx_a", int64(1), now, now, "boom", false),
		"released":           byIDWrite(markReleasedSQL, "sbx_a", int64(1), now),
		"many released":      byIDWrite(markReleasedManySQL, ids, epochs, now),
		"renew lease":        byIDWrite(renewLeaseSQL, "sbx_a", int64(1), "w", now),
		"renew":              byIDWrite(renewSandboxSQL, "sbx_a", "plans", now, time.Hour, now),
		"unclaim transition": byIDWrite(unclaimTransitionSQL, "sbx_a", int64(1), now, now, "boom"),
		"request pause": byIDWrite(requestTransitionSQL, namedArgs{"to": "pausing", "deadline": now, "now": now,
			"id": "sbx_a", "tenant": "plans", "from": "ready", "message": "m", "key_id": nil, "key_name": nil}),
		"settle pause": byIDWrite(settleTransitionSQL, namedArgs{"to": "paused", "from": "pausing", "id": "sbx_a",
			"epoch": int64(1), "now": now, "paused_ttl": time.Duration(0), "max_lifetime": time.Hour,
			"error": nil, "reason": nil, "keep_lease": false, "actor": "executor", "message": "m"}),
		"settle snapshot": byIDWrite(settleSnapshotSQL, namedArgs{"id": "snp_a", "epoch": int64(1), "to": "ready",
			"size": int64(1), "now": now, "error": nil, "actor": "executor", "release_lease": true}),
		"hand back snapshot": byIDWrite(handBackSnapshotSQL, "snp_a", int64(1), "boom", now),
		"end lost":           byIDWrite(endLostSQL, end(namedArgs{"id": "sbx_a"})),
		"end stranded":       byIDWrite(endStrandedSQL, end(namedArgs{"id": "sbx_a", "node": "n1", "grace": time.Minute})),
	}
}
