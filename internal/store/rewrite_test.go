package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestNamedArgs: a named statement is rewritten as pgx rewrites it, each
// name once in order of first use, names in literals and comments left
// alone; a missing or an extra argument is an error.
func TestNamedArgs(t *testing.T) {
	const sql = `SELECT @b, @a, 'at @c', labels @> @a::jsonb -- or @d
		, @b_2 FROM t WHERE x = @b`
	sent, values, err := namedArgs{"a": 1, "b": 2, "b_2": 3}.RewriteQuery(t.Context(), nil, sql, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, wantValues, err := pgx.StrictNamedArgs{"a": 1, "b": 2, "b_2": 3}.RewriteQuery(t.Context(), nil, sql, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent != want || !slices.Equal(values, wantValues) {
		t.Errorf("rewrite = %q %v, want pgx's %q %v", sent, values, want, wantValues)
	}
	if !strings.Contains(sent, "'at @c'") || !strings.Contains(sent, "-- or @d") || strings.Count(sent, "$1") != 2 {
		t.Errorf("rewrite = %q", sent)
	}
	// Again, from what was remembered.
	if again, _, err := (namedArgs{"a": 1, "b": 2, "b_2": 3}).RewriteQuery(t.Context(), nil, sql, nil); err != nil || again != sent {
		t.Errorf("second rewrite = %q, %v", again, err)
	}
	if _, _, err := (namedArgs{"a": 1, "b_2": 3}).RewriteQuery(t.Context(), nil, sql, nil); err == nil || !strings.Contains(err.Error(), "@b ") {
		t.Errorf("missing @b: %v, want an error naming it", err)
	}
	if _, _, err := (namedArgs{"a": 1, "b": 2, "b_2": 3, "c": 4}).RewriteQuery(t.Context(), nil, sql, nil); err == nil || !strings.Contains(err.Error(), "@c ") {
		t.Errorf("extra @c: %v, want an error naming it", err)
	}
}

// TestNamedStatements: every statement the package builds once rewrites
// with the arguments its callers give, so none leaves a name unbound.
func TestNamedStatements(t *testing.T) {
	end := []string{"now", "reason", "actor", "message", "key_id", "key_name"}
	claim := []string{"provider", "now", "limit", "worker", "lease_until", "node", "tenants", "held", "cap"}
	for name, c := range map[string]struct {
		sql   string
		names []string
	}{
		"endSandboxSQL":      {endSandboxSQL, append(end, "id", "tenant")},
		"endSandboxesSQL":    {endSandboxesSQL, []string{"ids", "tenants", "reasons", "actors", "messages", "key_ids", "key_names", "now"}},
		"endLapsedOwnersSQL": {endLapsedOwnersSQL, append(end, "limit")},
		"endLapsedOwnerSQL":  {endLapsedOwnerSQL, append(end, "tenant", "owner")},
		"endOwnerSQL":        {endOwnerSQL, append(end, "tenant", "owner")},
		"endExpiredSQL":      {endExpiredSQL, append(end, "limit")},
		"cancelOverdueSQL":   {cancelOverdueSQL, append(end, "limit")},
		"endLostSQL":         {endLostSQL, append(end, "id")},
		"endStrandedSQL":     {endStrandedSQL, append(end, "id", "node", "grace")},
		"failOverdueSQL":     {failOverdueSQL, []string{"now", "limit"}},
		"claimCreatesSQL":    {claimCreatesSQL, claim},
		"claimNewCreatesSQL": {claimNewCreatesSQL, append(claim, "since")},
		"claimReleasesSQL":   {claimReleasesSQL, claim},
		"insertSandboxSQL": {insertSandboxSQL, []string{"id", "tenant", "provider", "owner", "labels", "env", "setup", "params",
			"now", "expires_at", "create_deadline", "key_id", "key_name", "on_end", "from_snapshot", "node"}},
		"insertSandboxesSQL": {insertSandboxesSQL, []string{"ids", "tenants", "providers", "labels", "envs", "setups", "params",
			"created_at", "expires_at", "create_deadlines", "key_ids", "key_names"}},
	} {
		got := slices.Sorted(slices.Values(rewrite(c.sql).names))
		if want := slices.Sorted(slices.Values(c.names)); !slices.Equal(got, want) {
			t.Errorf("%s names %v, want %v", name, got, want)
		}
	}
}

// BenchmarkNamedArgsRewrite is what naming a statement's arguments costs
// each call: pgx's NamedArgs lex the statement's text every time, namedArgs
// once. Compare with a round trip to Postgres (bench_test.go).
func BenchmarkNamedArgsRewrite(b *testing.B) {
	now := time.Now()
	share := Share{Cap: 4, Held: map[string]int{"acme": 1}}
	cases := []struct {
		name string
		sql  string
		args func() namedArgs
	}{
		{"claimCreates", claimCreatesSQL, func() namedArgs {
			return share.args(namedArgs{"provider": "sim", "now": now, "limit": 8, "worker": "w",
				"lease_until": now, "node": ""}, 8)
		}},
		{"endSandbox", endSandboxSQL, func() namedArgs {
			return namedArgs{"now": now, "reason": "deleted", "actor": "client", "message": "m",
				"key_id": nil, "key_name": nil, "id": "sbx", "tenant": "acme"}
		}},
	}
	for _, c := range cases {
		b.Run(c.name+"/pgx", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := pgx.StrictNamedArgs(c.args()).RewriteQuery(b.Context(), nil, c.sql, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/once", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := c.args().RewriteQuery(b.Context(), nil, c.sql, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
