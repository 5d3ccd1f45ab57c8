package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
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
func (s *Store) ScanBothWays(ctx context.Context, id string, client, extra bool) (fast, slow domain.Sandbox, fastRan bool, err error) {
	cols := sandboxColumns
	if client {
		cols = clientColumns
	}
	if extra {
		cols = "s.state, " + cols
	}
	q := `SELECT ` + cols + ` FROM sandboxes s WHERE s.id = @id`
	var fastFrom, slowFrom domain.State
	var dest []any
	if extra {
		dest = []any{&fastFrom}
	}
	if err := querySandbox(ctx, s.pool, q, namedArgs{"id": id}).read(func(rows pgx.Rows) error {
		var err error
		fast, fastRan, err = rawSandbox(rows, dest)
		return err
	}); err != nil {
		return fast, slow, fastRan, err
	}
	if extra {
		dest = []any{&slowFrom}
	}
	text, values, err := rewrite(q).bind(namedArgs{"id": id})
	if err != nil {
		return fast, slow, fastRan, err
	}
	slow, err = scanRow(s.pool.QueryRow(ctx, text, values...), dest)
	if fastFrom != slowFrom {
		err = fmt.Errorf("leading state: fast %q, slow %q", fastFrom, slowFrom)
	}
	return fast, slow, fastRan, err
}

// ByIDWrite is a statement that writes sandboxes (or snapshots) it finds
// by id, rewritten to positional arguments as it is sent, with arguments
// of the types it takes in their order.
type ByIDWrite struct {
	SQL  string
	Args []any
}

// byIDWrite is a ByIDWrite of the named statement sql with args, bound as
// query binds them.
func byIDWrite(sql string, args namedArgs) ByIDWrite {
	text, values, err := rewrite(sql).bind(args)
	if err != nil {
		panic(err)
	}
	return ByIDWrite{text, values}
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
		"ready": byIDWrite(markReadySQL(changeOf), namedArgs{"id": "sbx_a", "epoch": int64(1), "now": now,
			"provider_id": "x", "work_dir": "/w"}),
		"ready, whole": byIDWrite(markReadySQL(wholeRow), namedArgs{"id": "sbx_a", "epoch": int64(1), "now": now,
			"provider_id": "x", "work_dir": "/w"}),
		"readies": byIDWrite(markReadyManySQL(changeOf), namedArgs{"ids": ids, "epochs": epochs,
			"provider_ids": names, "work_dirs": names, "now": now}),
		"failed": byIDWrite(markFailedSQL, namedArgs{"id": "sbx_a", "epoch": int64(1), "now": now,
			"error": "boom", "actor": "executor"}),
		"unclaim": byIDWrite(unclaimSQL, namedArgs{"id": "sbx_a", "epoch": int64(1), "claimable_at": now, "now": now,
			"error": "boom", "refund": false}),
		"released":      byIDWrite(markReleasedSQL, namedArgs{"id": "sbx_a", "epoch": int64(1), "now": now}),
		"many released": byIDWrite(markReleasedManySQL, namedArgs{"ids": ids, "epochs": epochs, "now": now}),
		"renew lease": byIDWrite(renewLeaseSQL, namedArgs{"id": "sbx_a", "epoch": int64(1), "worker": "w",
			"lease_until": now}),
		"renew": byIDWrite(renewSandboxSQL, namedArgs{"id": "sbx_a", "tenant": "plans", "expires_at": now,
			"max_lifetime": time.Hour, "now": now}),
		"unclaim transition": byIDWrite(unclaimTransitionSQL, namedArgs{"id": "sbx_a", "epoch": int64(1),
			"claimable_at": now, "now": now, "error": "boom"}),
		"request pause": byIDWrite(requestTransitionSQL, namedArgs{"to": "pausing", "deadline": now, "now": now,
			"id": "sbx_a", "tenant": "plans", "from": "ready", "message": "m", "key_id": nil, "key_name": nil}),
		"settle pause": byIDWrite(settleTransitionSQL, namedArgs{"to": "paused", "from": "pausing", "id": "sbx_a",
			"epoch": int64(1), "now": now, "paused_ttl": time.Duration(0), "max_lifetime": time.Hour,
			"error": nil, "reason": nil, "keep_lease": false, "actor": "executor", "message": "m"}),
		"settle snapshot": byIDWrite(settleSnapshotSQL, namedArgs{"id": "snp_a", "epoch": int64(1), "to": "ready",
			"size": int64(1), "now": now, "error": nil, "actor": "executor", "release_lease": true}),
		"hand back snapshot": byIDWrite(handBackSnapshotSQL, namedArgs{"id": "snp_a", "epoch": int64(1),
			"error": "boom", "now": now}),
		"end lost":     byIDWrite(endLostSQL, end(namedArgs{"id": "sbx_a"})),
		"end stranded": byIDWrite(endStrandedSQL, end(namedArgs{"id": "sbx_a", "node": "n1", "grace": time.Minute})),
	}
}
