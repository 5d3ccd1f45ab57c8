package store_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestByIDWritesUseThePrimaryKey: the writes that find a sandbox by id
// (the executor's results, a renew, a pause's request and settling, the
// janitor's ends of lost and stranded sandboxes) find it through the
// primary key, in custom plans and in the generic plans that prepared
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
			used := sandboxIndex.FindAllStringSubmatch(plan, -1)
			for _, m := range used {
				if m[1] != "sandboxes_pkey" {
					t.Errorf("%s (%s) scans %s, not only the primary key:\n%s", name, mode, m[1], plan)
				}
			}
			if len(used) == 0 {
				t.Errorf("%s (%s) uses no index of sandboxes:\n%s", name, mode, plan)
			}
		}
	}
}

// sandboxIndex finds the indexes of sandboxes that a plan scans.
var sandboxIndex = regexp.MustCompile(`(?:using|on) (sandboxes_\w+)`)
