package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The store writes through two pools of different promise, and gives them
// two types so that the compiler knows which is which: a durablePool where
// a write must survive a Postgres crash once it returns, an asyncPool where
// it may be lost. A durable pool may stand in for an asynchronous one
// (durablePool.async), never the reverse.

// durablePool is a pool whose commits wait for the WAL flush (its sessions
// keep the server's synchronous_commit, on by default): a write that
// returned survives a crash. It runs everything a client was promised — a
// create accepted, a delete accepted, an owner lease renewed or released,
// an API key registered — and every transaction (inTx), so that what
// commits together is durable together; reads use it too. A durable commit
// also makes every earlier asynchronous one durable.
type durablePool struct{ *pgxpool.Pool }

// async returns p for the workers' writes: what may commit asynchronously
// may always commit durably.
func (p durablePool) async() asyncPool { return asyncPool{p.Pool} }

// inTx runs fn in a transaction that commits if fn returns nil and rolls
// back otherwise. fn must do all its work through tx.
func (p durablePool) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// asyncPool is a pool whose commits may return before the WAL flush (one
// ConnectWorkers opened, with synchronous_commit=off): a Postgres crash may
// lose the last moments of its writes. It runs the workers' own writes
// only — claims, lease renewals and hand-backs, executors' results,
// releases, janitor sweeps, leadership — each of which is idempotent and
// fenced, so a lost one is redone: the leases lapse and the work is
// claimed again (provider calls are idempotent on the sandbox id). It runs
// single statements, each its own transaction, and has no transactions of
// its own: a write that must be durable cannot land on it by accident.
type asyncPool struct{ pool *pgxpool.Pool }

// Exec runs sql on the pool, like pgxpool.Pool.Exec.
func (p asyncPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.pool.Exec(ctx, sql, args...)
}

// Query runs sql on the pool, like pgxpool.Pool.Query.
func (p asyncPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.pool.Query(ctx, sql, args...)
}

// QueryRow runs sql on the pool, like pgxpool.Pool.QueryRow.
func (p asyncPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.pool.QueryRow(ctx, sql, args...)
}

// idleInTransactionTimeout is how long Postgres lets one of Tether's
// sessions idle inside a transaction (see connect).
const idleInTransactionTimeout = "10s"

// Connect opens a pool to databaseURL.
func Connect(ctx context.Context, databaseURL string, maxConns int32) (*pgxpool.Pool, error) {
	return connect(ctx, databaseURL, maxConns, nil)
}

// ConnectWorkers opens a pool like Connect whose sessions commit without
// waiting for the WAL flush (synchronous_commit=off), for WithWorkPool.
func ConnectWorkers(ctx context.Context, databaseURL string, maxConns int32) (*pgxpool.Pool, error) {
	return connect(ctx, databaseURL, maxConns, map[string]string{"synchronous_commit": "off"})
}

func connect(ctx context.Context, databaseURL string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("store: connect: DATABASE_URL is not a valid Postgres connection string")
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	// A replica cut off from Postgres between two statements of a
	// transaction leaves its session idle in it, holding the transaction's
	// row locks, until Postgres notices the connection is dead (its TCP
	// keepalive: hours by default); every other replica's write to those
	// rows (an owner's lease, a sandbox) waits that long. Tether's
	// transactions are a few statements with nothing between them, so
	// Postgres ends a session idle in one for longer than this. A
	// DATABASE_URL may set another (?idle_in_transaction_session_timeout=).
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleInTransactionTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, wrap("connect", err)
	}
	return pool, nil
}
