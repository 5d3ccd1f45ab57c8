// Package store is Tether's durable registry: sandboxes, their event history,
// tenants and API keys, idempotency keys, in Postgres through pgx.
//
// All SQL lives in this package, and LISTEN/NOTIFY in its package notify.
// Every statement names its arguments (@name, see namedArgs), so that each
// reads on its own.
// Every state change is one statement that updates the sandbox row and
// appends its event row, so the two always commit together; the database
// itself refuses an illegal transition (a trigger mirrors
// domain.CanTransition). Driver errors are translated here: no rows
// becomes domain.ErrNotFound, a lost fence becomes domain.ErrFenced.
//
// Writes go through one of two pools: a durable one for everything a
// client was promised, and one whose commits may be asynchronous for the
// workers' own fenced, idempotent writes (see WithWorkPool).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/migrations"
)

// Store is the Postgres-backed registry. It is safe for concurrent use.
type Store struct {
	// pool runs the reads, every transaction, and every write a client was
	// promised; its commits are durable.
	pool durablePool
	// work runs the workers' own writes (claims, results, releases, janitor
	// sweeps). It may commit asynchronously: see WithWorkPool.
	work asyncPool
	// announcer tells subscribers about changes after they commit.
	announcer Announcer
	// creates, ends, readies and releases group concurrent writes of a
	// kind into one statement each: ownerless creates, single sandboxes
	// ended (DELETE), executors' ready results, and confirmed releases.
	creates *batcher[newSandboxRow, domain.Sandbox]
	ends    *batcher[endRow, domain.Sandbox]
	readies *batcher[readyRow, domain.Sandbox]
	// quietReadies are SetReady's: the same writes, reading back only
	// what their announcements need.
	quietReadies *batcher[readyRow, domain.Sandbox]
	releases     *batcher[releasedRow, domain.State]
	// now is the clock every timestamp the store writes comes from; tests
	// inject their own to move time without sleeping.
	now func() time.Time
	// outage is this replica's part in crediting outages (see CreditOutage).
	outage outage
	// nodeGrace is how old a node's last heartbeat may be while it counts
	// as alive (see WithNodeGrace).
	nodeGrace time.Duration
	// pausedTTL, if positive, stops a paused sandbox's TTL clock and is
	// how long it may stay paused; maxLifetime, if positive, caps the
	// deadlines a pause and a resume set (see WithPausedTTL).
	pausedTTL, maxLifetime time.Duration
	// creds makes and checks API keys and preview tokens (Credentials).
	creds credentials
	// afterNotLive, if set, runs in EndSandbox between an end that found
	// nothing live and the read that follows it: tests commit a create
	// there (SetAfterNotLive).
	afterNotLive func()
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store take every timestamp from now instead of the
// wall clock.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithNodeGrace sets how long a node may go without a heartbeat before it
// counts as dead (NODE_GRACE; default DefaultNodeGrace).
func WithNodeGrace(d time.Duration) Option {
	return func(s *Store) { s.nodeGrace = d }
}

// WithPausedTTL sets PAUSED_TTL and MAX_LIFETIME for pauses. With
// pausedTTL 0 (the default) a paused sandbox's TTL keeps running. With
// pausedTTL positive, a sandbox that becomes paused keeps the TTL it had
// left and its expires_at becomes pausedTTL from then (the longest it may
// stay paused); when it resumes, expires_at becomes the kept TTL from
// then. Either deadline is capped at the sandbox's creation plus
// maxLifetime, if that is positive.
func WithPausedTTL(pausedTTL, maxLifetime time.Duration) Option {
	return func(s *Store) { s.pausedTTL, s.maxLifetime = pausedTTL, maxLifetime }
}

// Announcer is told about every change the store commits (a
// notify.Notifier).
type Announcer interface {
	Announce(changes ...domain.Change)
}

// WithAnnouncer makes the store announce its committed changes to a.
func WithAnnouncer(a Announcer) Option {
	return func(s *Store) { s.announcer = a }
}

// announce tells the announcer about the sandboxes' new states.
func (s *Store) announce(sbs ...domain.Sandbox) {
	if s.announcer == nil || len(sbs) == 0 {
		return
	}
	changes := make([]domain.Change, len(sbs))
	for i, sb := range sbs {
		changes[i] = domain.Change{ID: sb.ID, State: sb.State, Released: sb.Released}
	}
	s.announcer.Announce(changes...)
}

// announceSnapshots tells subscribers that the snapshots left creating
// (domain.SnapshotChanged), so that a ?wait= on one answers at once.
func (s *Store) announceSnapshots(sns ...domain.Snapshot) {
	if s.announcer == nil || len(sns) == 0 {
		return
	}
	changes := make([]domain.Change, 0, len(sns))
	for _, sn := range sns {
		if sn.State != domain.SnapshotCreating {
			changes = append(changes, domain.Change{ID: sn.ID, State: domain.SnapshotChanged})
		}
	}
	s.announcer.Announce(changes...)
}

// WithWorkPool runs the workers' writes on their own pool, typically one
// opened by ConnectWorkers, whose commits do not wait for the WAL flush.
// That is safe because every worker write is idempotent and fenced: if a
// Postgres crash loses the last moments of them, the leases lapse and the
// work is redone (provider calls are idempotent on the sandbox id). What a
// client was promised (a create accepted, a delete accepted) always commits
// durably on the main pool, and a durable commit also makes every earlier
// asynchronous one durable.
func WithWorkPool(pool *pgxpool.Pool) Option {
	return func(s *Store) { s.work = asyncPool{pool} }
}

// createFlights is how many statements of client writes (creates, ends)
// may be in flight at once; writes beyond them queue and leave together in
// the next one. Each waits for a durable commit, so one flight at a time
// makes the largest batches, the way a database groups commits.
const createFlights = 1

// workFlights is createFlights for the workers' writes, which commit
// asynchronously and so land sooner.
const workFlights = 2

// New returns a Store over an open pool. The caller keeps ownership of the
// pools and closes them after the store's last use. Without WithWorkPool,
// the workers' writes share pool and commit durably too.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	durable := durablePool{pool}
	s := &Store{pool: durable, work: durable.async(), now: time.Now, nodeGrace: DefaultNodeGrace}
	s.outage.policy = defaultOutagePolicy()
	for _, o := range opts {
		o(s)
	}
	s.creates = newBatcher(createFlights, batchWrite[newSandboxRow, domain.Sandbox]{
		key: func(r newSandboxRow) string { return r.id }, one: s.createOne, many: s.createMany,
		missing: func(r newSandboxRow) error { return fmt.Errorf("sandbox %s missing from the batch insert", r.id) },
	})
	s.ends = newBatcher(createFlights, batchWrite[endRow, domain.Sandbox]{
		key: func(r endRow) string { return endKey(r.tenant, r.id) }, one: s.endOne, many: s.endBatch,
		missing: func(endRow) error { return errNotLive },
	})
	s.readies = newBatcher(workFlights, batchWrite[readyRow, domain.Sandbox]{
		key: func(r readyRow) string { return r.id }, one: s.markReadyOne(wholeRow), many: s.markReadyMany(wholeRow),
		missing: func(readyRow) error { return domain.ErrFenced },
	})
	s.quietReadies = newBatcher(workFlights, batchWrite[readyRow, domain.Sandbox]{
		key: func(r readyRow) string { return r.id }, one: s.markReadyOne(changeOf), many: s.markReadyMany(changeOf),
		missing: func(readyRow) error { return domain.ErrFenced },
	})
	s.releases = newBatcher(workFlights, batchWrite[releasedRow, domain.State]{
		key: func(r releasedRow) string { return r.id }, one: s.markReleasedOne, many: s.markReleasedMany,
		missing: func(releasedRow) error { return domain.ErrFenced },
	})
	return s
}

// Pool returns the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool.Pool }

// Now returns the store's current time.
func (s *Store) Now() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return wrap("ping", err)
	}
	return nil
}

// migrator returns a goose provider over the embedded migrations, with a
// session lock so that replicas starting together migrate once.
func (s *Store) migrator() (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(s.pool.Pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		_ = db.Close()
		return nil, nil, wrap("migration lock", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, nil, wrap("migrations", err)
	}
	return p, db, nil
}

// Migrate applies every pending migration and returns the versions applied.
func (s *Store) Migrate(ctx context.Context) ([]int64, error) {
	p, db, err := s.migrator()
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	results, err := p.Up(ctx)
	if err != nil {
		return nil, wrap("migrate", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// SchemaCurrent reports whether every embedded migration has been applied.
func (s *Store) SchemaCurrent(ctx context.Context) (bool, error) {
	p, db, err := s.migrator()
	if err != nil {
		return false, err
	}
	defer func() { _ = db.Close() }()
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return false, wrap("schema version", err)
	}
	return current >= target, nil
}

// Superuser reports whether the role Tether connects as is a Postgres
// superuser: it should not be, since Tether needs only its own schema, and a
// leaked URL of a superuser is the whole database server.
func (s *Store) Superuser(ctx context.Context) (bool, error) {
	var super bool
	err := s.pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super)
	if err != nil {
		return false, wrap("check role", err)
	}
	return super, nil
}

// wrap names the failed operation and translates the driver error.
func wrap(op string, err error) error {
	return fmt.Errorf("store: %s: %w", op, interpret(err))
}

// coded returns err as it is when it is an error for the client (a
// *domain.Error), else wrapped with the operation.
func coded(op string, err error) error {
	var c *domain.Error
	if errors.As(err, &c) {
		return err
	}
	return wrap(op, err)
}

// interpret translates driver errors that carry meaning for callers: no
// rows is not found, a refused transition is a lost fence, and a database
// that cannot be reached (or is shutting down), or that rolled a
// transaction back to be run again, is unavailable — worth a retry, not a
// bug.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.ConstraintName == "sandbox_transition":
			return fmt.Errorf("%w: %s", domain.ErrFenced, pgErr.Message)
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutting down, not yet up
			pgErr.Code == "53300", // too many connections
			// A transaction Postgres rolled back whole, to be run again:
			// a deadlock with another's, a serialization failure, or
			// one left idle past idle_in_transaction_session_timeout.
			pgErr.Code == "40P01", pgErr.Code == "40001", pgErr.Code == "25P03":
			return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
		}
		return err
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "conn closed") {
		return fmt.Errorf("%w: %w", domain.ErrUnavailable, err)
	}
	return err
}
