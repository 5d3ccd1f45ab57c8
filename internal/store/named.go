package store

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Statements name their arguments (@name) rather than number them, so that
// each reads on its own and fragments compose without counting: a query
// passes its arguments as namedArgs.
//
// pgx's own NamedArgs rewrite a statement into the positional one Postgres
// is sent on every call: a lexer pass over the text that costs the claim
// statement some 20 µs and 60 allocations (BenchmarkNamedArgsRewrite).
// namedArgs rewrite each statement once, with pgx's lexer, and remember
// it; a call then only puts its arguments in order.

// namedArgs are a statement's named arguments, for a pgx query method (as
// namedArgs, which it is but for remembering the rewrite):
//
//	rows, err := q.Query(ctx, claimReleasesSQL, namedArgs{"provider": p, ...})
//
// Every name the statement uses must be given, and no other: a misspelt
// name is an error, not a NULL.
type namedArgs map[string]any

// RewriteQuery implements pgx.QueryRewriter.
func (a namedArgs) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, extra []any) (string, []any, error) {
	if len(extra) > 0 {
		return "", nil, fmt.Errorf("store: %d positional arguments after named ones", len(extra))
	}
	return rewrite(sql).bind(a)
}

// positional is a named statement rewritten: its text with $1, $2, ... for
// the names, and the names in that order (names[0] is $1).
type positional struct {
	sql   string
	names []string
}

// bind returns the statement's text and a's values in its order.
func (p positional) bind(a namedArgs) (string, []any, error) {
	values := make([]any, len(p.names))
	for i, name := range p.names {
		v, ok := a[name]
		if !ok {
			return "", nil, fmt.Errorf("store: the statement's argument @%s is not given", name)
		}
		values[i] = v
	}
	if len(a) != len(p.names) {
		for name := range a {
			if !slices.Contains(p.names, name) {
				return "", nil, fmt.Errorf("store: argument @%s is not in the statement", name)
			}
		}
	}
	return p.sql, values, nil
}

// maxRewrites bounds the statements remembered. The store's statements are
// fixed texts, and the list's few hundred combinations of filters at most;
// past the bound a statement is rewritten on every call, as by pgx.
const maxRewrites = 1024

var (
	rewrites   sync.Map // named statement → positional
	remembered atomic.Int64
)

// rewrite returns the statement sql rewritten, remembering it.
func rewrite(sql string) positional {
	if p, ok := rewrites.Load(sql); ok {
		return p.(positional)
	}
	p := rewriteNamed(sql)
	if remembered.Add(1) <= maxRewrites {
		rewrites.Store(sql, p)
	}
	return p
}

// argName matches what may be a named argument, as pgx's lexer reads one;
// the lexer decides which are (those in literals and comments are not).
var argName = regexp.MustCompile(`@[A-Za-z_][A-Za-z0-9_]*`)

// slot stands for a named argument while rewriteNamed learns their order.
type slot string

// rewriteNamed rewrites sql with pgx's lexer, giving each name a slot
// that tells which position pgx gave it.
func rewriteNamed(sql string) positional {
	probe := pgx.NamedArgs{}
	for _, m := range argName.FindAllString(sql, -1) {
		probe[m[1:]] = slot(m[1:])
	}
	// A NamedArgs rewrite, unlike a strict one, never fails.
	text, slots, _ := probe.RewriteQuery(context.Background(), nil, sql, nil)
	names := make([]string, len(slots))
	for i, s := range slots {
		name, _ := s.(slot) // every name the lexer finds, argName found
		names[i] = string(name)
	}
	return positional{sql: text, names: names}
}
