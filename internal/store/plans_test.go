package store_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestByIDWritesUseThePrimaryKey: the writes that find a sandbox (or a
// snapshot) by id — the executor's results and lease renewals, a renew, a
// pause's request and settling, a snapshot's settling and hand-back, the
// janitor's ends of lost and stranded sandboxes — find it through the
// primary key alone, in custom plans and in the generic plans that prepared
// statements settle on, on a registry whose work queues look empty to the
// planner, as they do between analyses while churn fills their partial
// indexes with entries. A plain `state = 'creating'` let the planner walk
// sandboxes_pending instead: after one bench run its scans had read 243
// entries each, where the primary key's read one.
func TestByIDWritesUseThePrimaryKey(t *testing.T) {
	ctx := t.Context()
	pool := storetest.NewPool(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO tenants (name) VALUES ('plans');
		INSERT INTO sandboxes (id, tenant, state, provider, reason, released, ready_at, ended_at, expires_at, create_deadline)
		SELECT 'sbx_' || lpad(i::text, 26, '0'), 'plans',
			CASE WHEN i % 2 = 0 THEN 'ready' ELSE 'terminated' END, 'sim',
			CASE WHEN i % 2 = 0 THEN NULL ELSE 'requested' END, i % 2 = 1,
			now(), CASE WHEN i % 2 = 0 THEN NULL ELSE now() END, now() + interval '1 hour', now()
		FROM generate_series(1, 4000) AS i;
		INSERT INTO snapshots (id, tenant, source_id, provider, kind, state, created_at, updated_at, deadline, ready_at)
		SELECT 'snp_' || lpad(i::text, 26, '0'), 'plans', 'sbx_' || lpad((2 * i)::text, 26, '0'), 'sim', 'manual', 'ready',
			now(), now(), now(), now()
		FROM generate_series(1, 2000) AS i;
		ANALYZE sandboxes, snapshots`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for name, w := range store.ByIDWrites() {
		for _, generic := range []bool{false, true} {
			plan, err := explain(ctx, conn, w, generic)
			if err != nil {
				t.Fatalf("%s (generic %v): %v", name, generic, err)
			}
			if seq := seqScan.FindString(plan); seq != "" {
				t.Errorf("%s (generic %v): %s:\n%s", name, generic, seq, plan)
			}
			used := registryIndex.FindAllStringSubmatch(plan, -1)
			for _, m := range used {
				if m[1] != "sandboxes_pkey" && m[1] != "snapshots_pkey" {
					t.Errorf("%s (generic %v) scans %s, not only a primary key:\n%s", name, generic, m[1], plan)
				}
			}
			if len(used) == 0 {
				t.Errorf("%s (generic %v) uses no index of sandboxes or snapshots:\n%s", name, generic, plan)
			}
		}
	}
}

var (
	// registryIndex finds the indexes of sandboxes and snapshots that a
	// plan scans, and seqScan a scan of either table without one.
	registryIndex = regexp.MustCompile(`(?:using|on) ((?:sandboxes|snapshots)_\w+)`)
	seqScan       = regexp.MustCompile(`Seq Scan on (?:sandboxes|snapshots)\b`)
)

// explain returns w's plan: a custom plan, planned with w's arguments, or
// the generic plan of w prepared (PREPARE, then EXPLAIN EXECUTE under
// plan_cache_mode force_generic_plan), which a statement's later runs use.
func explain(ctx context.Context, conn *pgx.Conn, w store.ByIDWrite, generic bool) (string, error) {
	mode, sql, args := "force_custom_plan", "EXPLAIN "+w.SQL, w.Args
	if generic {
		mode = "force_generic_plan"
		if _, err := conn.Exec(ctx, "PREPARE byid AS "+w.SQL); err != nil {
			return "", fmt.Errorf("prepare: %w", err)
		}
		defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE byid") }()
		// A generic plan is the same whatever the arguments: NULLs do.
		sql = "EXPLAIN EXECUTE byid(" + strings.TrimSuffix(strings.Repeat("NULL, ", len(w.Args)), ", ") + ")"
		args = nil
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		return "", err
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}
