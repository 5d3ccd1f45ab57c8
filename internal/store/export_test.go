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

// ByIDWrite is a statement that writes sandboxes it finds by id, with
// arguments of the types it takes.
type ByIDWrite struct {
	SQL  string
	Args []any
}

// ByIDWrites are the writes that find sandboxes by id, for
// TestByIDWritesUseThePrimaryKey.
func ByIDWrites() map[string]ByIDWrite {
	now, ids, epochs, names := time.Now(), []string{"sbx_a", "sbx_b"}, []int64{1, 1}, []string{"x", "y"}
	end := func(more namedArgs) namedArgs {
		more["now"], more["reason"], more["actor"], more["message"] = now, "lost", "janitor", "m"
		more["key_id"], more["key_name"] = nil, nil
		return more
	}
	return map[string]ByIDWrite{
		"renew":              {renewSandboxSQL, []any{"sbx_a", "plans", now, time.Hour, now}},
		"unclaim transition": {unclaimTransitionSQL, []any{"sbx_a", int64(1), now, now, "boom"}},
		"request pause": {requestTransitionSQL, []any{namedArgs{"to": "pausing", "deadline": now, "now": now,
			"id": "sbx_a", "tenant": "plans", "from": "ready", "message": "m", "key_id": nil, "key_name": nil}}},
		"settle pause": {settleTransitionSQL, []any{namedArgs{"to": "paused", "from": "pausing", "id": "sbx_a",
			"epoch": int64(1), "now": now, "paused_ttl": time.Duration(0), "max_lifetime": time.Hour,
			"error": nil, "reason": nil, "keep_lease": false, "actor": "executor", "message": "m"}}},
		"end lost":      {endLostSQL, []any{end(namedArgs{"id": "sbx_a"})}},
		"end stranded":  {endStrandedSQL, []any{end(namedArgs{"id": "sbx_a", "node": "n1", "grace": time.Minute})}},
		"ready":         {markReadySQL(changeOf), []any{"sbx_a", int64(1), now, "x", "/w"}},
		"ready, whole":  {markReadySQL(wholeRow), []any{"sbx_a", int64(1), now, "x", "/w"}},
		"readies":       {markReadyManySQL(changeOf), []any{ids, epochs, names, names, now}},
		"failed":        {markFailedSQL, []any{"sbx_a", int64(1), now, "boom", "executor"}},
		"unclaim":       {unclaimSQL, []any{"sbx_a", int64(1), now, now, "boom", false}},
		"released":      {markReleasedSQL, []any{"sbx_a", int64(1), now}},
		"many released": {markReleasedManySQL, []any{ids, epochs, now}},
	}
}
