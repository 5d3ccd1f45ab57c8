package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/store"
)

// The floor: the registry's own writes, without Tether. pgbench runs, on a
// database with Tether's schema (its indexes, triggers and foreign keys),
// the writes that the contract asks of each sandbox, in the shape of the
// store's statements: a create is a durable insert of the sandbox and its
// first event, a claim (requested → creating, with its event) and a ready
// write (creating → ready, with its event), both on the workers' commits
// that do not wait for the WAL flush; a lifecycle adds a durable end
// (ready → terminated, with its event), a release claim and the released
// write. No HTTP, no Go, no reads, no notifications, and each claim finds
// its sandboxes by id rather than walking the queue: what a Tether phase
// could reach if everything but these writes cost nothing. Each client
// writes `batch` sandboxes per statement, as Tether does when writes
// coincide; 1 is a Tether whose writes never share a statement. Like the
// store's, the writes test a sandbox's state behind IS TRUE, so that the
// planner finds their rows by the primary key and not by walking a work
// queue's partial index (see store.byIDState).

// floorDB is the floor's database.
const floorDB = "bench_floor"

// floorKind is what one run of a floor script does for each sandbox.
type floorKind string

const (
	floorCreate    floorKind = "create"    // requested → creating → ready
	floorLifecycle floorKind = "lifecycle" // … → terminated, released
)

// floorID is a new sandbox id of the floor's, from a sequence, so that
// ids land at the end of the indexes as Tether's time-ordered ids do.
const floorID = `'sbx_' || lpad(nextval('floor_ids')::text, 26, '0')`

// floorSQL is the pgbench script of one floor transaction: batch sandboxes
// through kind.
func floorSQL(kind floorKind, batch int) string {
	async := func(stmt string) []string {
		return []string{"BEGIN;", "SET LOCAL synchronous_commit = off;", stmt, "COMMIT;"}
	}
	event := func(from, to, reason, actor, message string) string {
		return `INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, now(), ` + from + `, '` + to + `', ` + reason + `, '` + actor + `', '` + message + `' FROM upd ORDER BY id`
	}
	lines := []string{`WITH ins AS (
			INSERT INTO sandboxes (id, tenant, state, provider, created_at, updated_at, expires_at, create_deadline)
			SELECT ` + floorID + `, 'floor', 'requested', 'sim',
				now(), now(), now() + interval '1 hour', now() + interval '5 minutes'
			FROM generate_series(1, ` + strconv.Itoa(batch) + `)
			RETURNING id, tenant
		), upd AS (SELECT * FROM ins)
		, ev AS (` + event("NULL", "requested", "'requested'", "client", "sandbox requested") + `)
		SELECT array_agg(id ORDER BY id)::text AS ids FROM ins \gset`}
	lines = append(lines, async(`WITH upd AS (
			UPDATE sandboxes s SET state = 'creating', epoch = s.epoch + 1, attempts = s.attempts + 1,
				lease_owner = 'floor', lease_expires_at = now() + interval '15 seconds', updated_at = now()
			WHERE s.id = ANY(:ids::text[]) AND (s.state = 'requested') IS TRUE
			RETURNING s.id, s.tenant
		) `+event("'requested'", "creating", "NULL", "executor", "claimed by floor")+`;`)...)
	lines = append(lines, async(`WITH upd AS (
			UPDATE sandboxes s SET state = 'ready', ready_at = now(), updated_at = now(), error = NULL,
				provider_id = 'sim-' || s.id, work_dir = '/workspace', lease_owner = NULL, lease_expires_at = NULL
			WHERE s.id = ANY(:ids::text[]) AND s.epoch = 1 AND (s.state = 'creating') IS TRUE
			RETURNING s.id, s.tenant
		) `+event("'creating'", "ready", "NULL", "executor", "provider created")+`;`)...)
	if kind == floorLifecycle {
		lines = append(lines, `WITH upd AS (
			UPDATE sandboxes s SET state = 'terminated', reason = 'requested', ended_at = now(), updated_at = now()
			WHERE s.id = ANY(:ids::text[]) AND (s.state = 'ready') IS TRUE
			RETURNING s.id, s.tenant
		) `+event("'ready'", "terminated", "'requested'", "client", "terminated")+`;`)
		lines = append(lines, async(`UPDATE sandboxes s SET epoch = s.epoch + 1, release_attempts = s.release_attempts + 1,
				lease_owner = 'floor', lease_expires_at = now() + interval '15 seconds', updated_at = now()
			WHERE s.id = ANY(:ids::text[]) AND (s.state = 'terminated') IS TRUE AND NOT s.released;`)...)
		lines = append(lines, async(`UPDATE sandboxes s SET released = true, released_at = now(), updated_at = now(),
				lease_owner = NULL, lease_expires_at = NULL, release_error = NULL
			WHERE s.id = ANY(:ids::text[]) AND (s.state = 'terminated') IS TRUE AND s.epoch = 2 AND NOT s.released;`)...)
	}
	// pgbench reads one command a line where it may: join each
	// statement's lines.
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

// floorEnd is where each kind leaves every sandbox it wrote, and how many
// events each then has.
func floorEnd(kind floorKind) (state string, released bool, events int) {
	if kind == floorLifecycle {
		return "terminated", true, 4
	}
	return "ready", false, 3
}

// floorResult is one floor measurement.
type floorResult struct {
	Kind  floorKind
	Batch int
	// Rate is sandboxes through kind per second.
	Rate float64
}

// prepareFloor gives the floor's database Tether's schema and its tenant.
func prepareFloor(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	if _, err := store.New(pool).Migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("floor: migrate: %w", err)
	}
	// A history to start from, as Tether's database has by its phases:
	// on empty tables the planner's first plans (those of the foreign
	// key's checks among them) are for empty tables.
	if _, err := pool.Exec(ctx, `CREATE SEQUENCE IF NOT EXISTS floor_ids;
		INSERT INTO tenants (name) VALUES ('floor') ON CONFLICT DO NOTHING;
		WITH ins AS (
			INSERT INTO sandboxes (id, tenant, state, provider, reason, released, created_at, updated_at,
				ready_at, ended_at, released_at, expires_at, create_deadline, epoch)
			SELECT `+floorID+`, 'floor', 'terminated', 'sim', 'requested', true,
				now(), now(), now(), now(), now(), now() + interval '1 hour', now() + interval '5 minutes', 2
			FROM generate_series(1, 10000)
			RETURNING id, tenant
		)
		INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
		SELECT id, tenant, now(), NULL, 'requested', 'requested', 'client', 'sandbox requested' FROM ins;
		ANALYZE sandboxes, sandbox_events`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("floor: %w", err)
	}
	return pool, nil
}

// floor runs kind's script at each batch size, clients as in the Tether
// phases, for the phase's length each, and checks that every sandbox it
// wrote went the whole way: a script whose writes matched nothing would
// otherwise look fast.
func (s *simBench) floor(ctx context.Context, kind floorKind, batches ...int) error {
	for _, batch := range batches {
		if err := s.settle(ctx); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		rate, err := s.floorRun(ctx, kind, batch)
		if err != nil {
			return fmt.Errorf("floor: %s, %d a statement: %w", kind, batch, err)
		}
		s.floors = append(s.floors, floorResult{Kind: kind, Batch: batch, Rate: rate})
	}
	return nil
}

// floorRun is one run of the floor: sandboxes through kind per second,
// batch a statement.
func (s *simBench) floorRun(ctx context.Context, kind floorKind, batch int) (float64, error) {
	script, err := writeScript("pgbench-floor-*.sql", floorSQL(kind, batch))
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.Remove(script) }()
	// Fresh statistics: pgbench's prepared statements are planned on
	// them, and a plan made for the empty tables of the first run
	// (before autovacuum's analyze) would measure the planner.
	var before int64
	if _, err := s.floorPool.Exec(ctx, `ANALYZE sandboxes, sandbox_events`); err != nil {
		return 0, err
	}
	if err := s.floorPool.QueryRow(ctx, `SELECT count(*) FROM sandboxes`).Scan(&before); err != nil {
		return 0, err
	}
	name := fmt.Sprintf("pgbench floor: %s writes, %d a statement, %d clients", kind, batch, s.o.workers)
	s.logf("%s", name)
	var tps float64
	s.cpu(name, s.pid(), func() {
		tps, err = s.pb.measureOn(ctx, floorDB, tpsRe, "-M", "prepared", "-n", "-f", script,
			"-c", s.pb.clients, "-j", "2", "-T", s.pb.secs)
	})
	if err != nil {
		return 0, err
	}
	if err := checkFloor(ctx, s.floorPool, kind, before); err != nil {
		return 0, err
	}
	return tps * float64(batch), nil
}

// checkFloor fails unless every sandbox a floor run wrote (all but the
// first before) ended where kind leaves it, with its events.
func checkFloor(ctx context.Context, pool *pgxpool.Pool, kind floorKind, before int64) error {
	state, released, events := floorEnd(kind)
	var n, wrong int64
	err := pool.QueryRow(ctx, `
		WITH run AS (SELECT * FROM sandboxes ORDER BY id OFFSET $1)
		SELECT count(*),
			count(*) FILTER (WHERE state <> $2 OR released <> $3
				OR (SELECT count(*) FROM sandbox_events e WHERE e.sandbox_id = run.id) <> $4)
		FROM run`, before, state, released, events).Scan(&n, &wrong)
	switch {
	case err != nil:
		return fmt.Errorf("floor: check: %w", err)
	case n == 0:
		return fmt.Errorf("floor: %s: pgbench wrote no sandbox", kind)
	case wrong > 0:
		return fmt.Errorf("floor: %s: %d of %d sandboxes did not end %s (released %v) with %d events", kind, wrong, n, state, released, events)
	}
	return nil
}

// floorTargets are the floor's rows of the report: each run's rate against
// the baseline the Tether phase of its kind is compared with, and that
// phase's target, for information.
func floorTargets(runs []floorResult, b baselines) []target {
	var ts []target
	for _, r := range runs {
		var t target
		name := fmt.Sprintf("floor: the %s writes alone, %d a statement (no Tether)", r.Kind, r.Batch)
		if r.Kind == floorLifecycle {
			t = atLeast(name, r.Rate, "/s", b.TPCBTPS, "TPC-B tps", 0.25)
		} else {
			t = atLeast(name, r.Rate, "/s", b.InsertTPS, "insert tps", 0.40)
		}
		t.Info = true
		ts = append(ts, t)
	}
	return ts
}
