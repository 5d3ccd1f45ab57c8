package store_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestResultWritesUseThePrimaryKey: the executor's result writes find their
// sandboxes through the primary key, in custom plans and in the generic
// plans that prepared statements settle on, on a registry whose work queues
// look empty to the planner, as they do between analyses while churn fills
// their partial indexes with entries. A plain `state = 'creating'` let the
// planner walk sandboxes_pending instead: after one bench run its scans had
// read 243 entries each, where the primary key's read one.
func TestResultWritesUseThePrimaryKey(t *testing.T) {
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
		ANALYZE sandboxes`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for name, w := range store.ByIDWrites() {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			rows, err := conn.Query(ctx, "EXPLAIN "+w.SQL, w.Args...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "sandboxes_pkey") || strings.Contains(plan, "sandboxes_pending") || strings.Contains(plan, "sandboxes_unreleased") {
				t.Errorf("%s (%s) does not find its rows by the primary key alone:\n%s", name, mode, plan)
			}
		}
	}
}
