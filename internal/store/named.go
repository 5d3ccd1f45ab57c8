package store

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements name their arguments (@name) rather than number them, so that
// each reads on its own and fragments compose without counting. A call
// runs its statement through query, queryRow or exec with its arguments as
// namedArgs:
//
//	rows, err := query(ctx, s.work, claimReleasesSQL, namedArgs{"provider": p, ...})
//
// pgx's own NamedArgs rewrite a statement into the positional one Postgres
// is sent on every call: a lexer pass over the text that costs the claim
// statement some 20 µs and 60 allocations (BenchmarkNamedArgsRewrite).
// These rewrite each statement once, with pgx's lexer, and remember it; a
// call then only puts its arguments in order, before pgx sees them.
//
// A statement's arguments may come in several namedArgs, one for each
// fragment that names them (an end's and its pick's, see endMany), or to
// keep each within eight names: the namedArgs never reach pgx, so a
// literal of up to eight names stays on the caller's stack, and a call
// allocates what one with positional arguments does (BenchmarkGetSandbox,
// BenchmarkRecordActivity). Go makes a map of more names on the heap.

// namedArgs are (some of) a statement's named arguments. Every name the
// statement uses must be given, once, and no other: a misspelt name is an
// error, not a NULL.
type namedArgs map[string]any

// querier is a pool or a transaction, for a statement whose rows are read.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// rowQuerier is a pool or a transaction, for a statement of one row.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// execer is a pool or a transaction, for a statement whose rows are not.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// query runs the named statement sql on q with args.
func query(ctx context.Context, q querier, sql string, args ...namedArgs) (pgx.Rows, error) {
	text, values, err := rewrite(sql).bind(args...)
	if err != nil {
		return nil, err
	}
	return q.Query(ctx, text, values...)
}

// queryRow is query for a statement of one row, as pgx's QueryRow.
func queryRow(ctx context.Context, q rowQuerier, sql string, args ...namedArgs) pgx.Row {
	text, values, err := rewrite(sql).bind(args...)
	if err != nil {
		return firstRow{err: err}
	}
	return q.QueryRow(ctx, text, values...)
}

// querySandbox is queryRow for a statement of sandbox rows (of
// sandboxColumns), whose first row scanSandbox reads by the fast path
// (rawscan.go).
func querySandbox(ctx context.Context, q querier, sql string, args ...namedArgs) firstRow {
	rows, err := query(ctx, q, sql, args...)
	return firstRow{rows: rows, err: err}
}

// exec runs the named statement sql on q with args, for its command tag.
func exec(ctx context.Context, q execer, sql string, args ...namedArgs) (pgconn.CommandTag, error) {
	text, values, err := rewrite(sql).bind(args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return q.Exec(ctx, text, values...)
}

// positional is a named statement rewritten: its text with $1, $2, ... for
// the names, and the names in that order (names[0] is $1).
type positional struct {
	sql   string
	names []string
}

// bind returns the statement's text and the values of args in its order.
func (p positional) bind(args ...namedArgs) (string, []any, error) {
	values := make([]any, len(p.names))
	for i, name := range p.names {
		found := false
		for _, a := range args {
			v, ok := a[name]
			if ok && found {
				return "", nil, fmt.Errorf("the statement's argument @%s is given twice", name)
			}
			if ok {
				values[i], found = v, true
			}
		}
		if !found {
			return "", nil, fmt.Errorf("the statement's argument @%s is not given", name)
		}
	}
	given := 0
	for _, a := range args {
		given += len(a)
	}
	if given != len(p.names) {
		for _, a := range args {
			for name := range a {
				if !slices.Contains(p.names, name) {
					return "", nil, fmt.Errorf("argument @%s is not in the statement", name)
				}
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
