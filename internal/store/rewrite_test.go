package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestNamedArgs: a named statement is rewritten as pgx rewrites it, each
// name once in order of first use, a cast after a name kept; names in
// literals (plain, escaped, dollar-quoted), quoted identifiers and
// comments, and operators that start with @ (@>, <@, @@), left alone.
func TestNamedArgs(t *testing.T) {
	const sql = `SELECT @b, @a, 'at @c', E'it\'s @c', $$ @c $$, $q$ @c $q$, "@c", labels @> @a::jsonb -- or @d
		, @b_2::text, tags <@ @a, v @@ q /* @e */ FROM t WHERE x = @b`
	sent, values, err := rewrite(sql).bind(namedArgs{"a": 1, "b": 2, "b_2": 3})
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
	for _, kept := range []string{"'at @c'", `E'it\'s @c'`, "$$ @c $$", "$q$ @c $q$", `"@c"`, "labels @> $2::jsonb", "-- or @d",
		"$3::text", "tags <@ $2", "v @@ q", "/* @e */"} {
		if !strings.Contains(sent, kept) {
			t.Errorf("rewrite = %q, want %q in it", sent, kept)
		}
	}
	if strings.Count(sent, "$1") != 2 || strings.Contains(sent, "@a") || strings.Contains(sent, "@b") {
		t.Errorf("rewrite = %q", sent)
	}
	// Again, from what was remembered.
	if again, _, err := rewrite(sql).bind(namedArgs{"a": 1, "b": 2, "b_2": 3}); err != nil || again != sent {
		t.Errorf("second rewrite = %q, %v", again, err)
	}
}

// TestNamedArgsBind: a statement's arguments may come in several maps;
// a name missing from all, given in two, or given but not in the
// statement is an error that names it.
func TestNamedArgsBind(t *testing.T) {
	p := rewrite(`SELECT @a, @b, @c`)
	_, values, err := p.bind(namedArgs{"a": 1, "c": 3}, namedArgs{"b": 2})
	if err != nil || !slices.Equal(values, []any{1, 2, 3}) {
		t.Errorf("bind across two maps = %v, %v; want [1 2 3]", values, err)
	}
	for name, c := range map[string]struct {
		args []namedArgs
		want string
	}{
		"missing": {[]namedArgs{{"a": 1, "c": 3}}, "@b is not given"},
		"twice":   {[]namedArgs{{"a": 1, "b": 2}, {"b": 2, "c": 3}}, "@b is given twice"},
		"extra":   {[]namedArgs{{"a": 1, "b": 2, "c": 3}, {"d": 4}}, "@d is not in the statement"},
		"none":    {nil, "@a is not given"},
	} {
		if _, _, err := p.bind(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: bind = %v, want an error with %q", name, err, c.want)
		}
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
// each call: pgx's NamedArgs lex the statement's text every time, bind
// (what query, queryRow and exec do) once. Compare with a round trip to
// Postgres (bench_test.go).
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
				if _, _, err := rewrite(c.sql).bind(c.args()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
