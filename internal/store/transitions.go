package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// Claim is a sandbox a worker holds: the worker may act on it while its
// lease lasts, and every write it makes is fenced on Epoch.
type Claim struct {
	Sandbox domain.Sandbox
	// From is the state the sandbox was in when claimed.
	From domain.State
	// Snapshot is the snapshot to take, for a snapshot claim
	// (ClaimSnapshots): its source is Sandbox (its id, tenant, provider
	// and the claim's epoch only); zero for other claims.
	Snapshot domain.Snapshot
}

// Share is how a worker shares its slots between tenants: no tenant may
// hold more than Cap of them, counting the Held ones it holds already, so
// that one tenant's slow work leaves slots for the others. A zero Cap
// shares nothing out: any tenant may take every slot.
type Share struct {
	Cap  int
	Held map[string]int
}

// args adds the share's named arguments to a claim's: @tenants and @held,
// the tenants and the slots each holds, and @cap, the cap (limit, the
// claim's own, when the share has none).
func (sh Share) args(args namedArgs, limit int) namedArgs {
	tenants, held := make([]string, 0, len(sh.Held)), make([]int32, 0, len(sh.Held))
	for t, n := range sh.Held {
		tenants, held = append(tenants, t), append(held, int32(n))
	}
	capacity := sh.Cap
	if capacity <= 0 {
		capacity = limit
	}
	args["tenants"], args["held"], args["cap"] = tenants, held, capacity
	return args
}

// fairPick is the CTEs "cand", "fair" and "picked" of a claim: up to @limit
// rows matching where, in order (the columns that order them, as their
// index has them), but at most the share's @cap per tenant minus what it
// holds (@tenants and @held: see Share.args). The candidates, the first
// 2×limit+32 claimable rows, are locked as they are
// read (SKIP LOCKED), so that concurrent claimers take disjoint sets; those
// not picked are free again when the statement commits. A tenant whose
// requests queue behind more than that of another tenant's waits for the
// queue to shorten, not for a free slot.
func fairPick(where string, order ...string) string {
	keys, cols := make([]string, len(order)), make([]string, len(order))
	for i, col := range order {
		keys[i] = fmt.Sprintf("k%d", i)
		cols[i] = col + " AS " + keys[i]
	}
	return `cand AS (
			SELECT id, tenant, state, ` + strings.Join(cols, ", ") + ` FROM sandboxes
			WHERE ` + where + `
			ORDER BY ` + strings.Join(keys, ", ") + `
			LIMIT @limit * 2 + 32
			FOR UPDATE SKIP LOCKED
		), fair AS (
			SELECT c.id FROM (
				SELECT id, tenant, row_number() OVER (PARTITION BY tenant ORDER BY ` + strings.Join(keys, ", ") + `) AS n FROM cand
			) c
			LEFT JOIN unnest(@tenants::text[], @held::int[]) AS h(tenant, held) ON h.tenant = c.tenant
			WHERE c.n <= @cap - COALESCE(h.held, 0)
		), picked AS (
			SELECT id, state FROM cand
			WHERE id IN (SELECT id FROM fair)
			ORDER BY ` + strings.Join(keys, ", ") + `
			LIMIT @limit
		)`
}

// The claim statements. Their named arguments: @provider; @now; @limit,
// how many to claim; @worker, who claims; @lease_until, when its lease
// ends; @node, the claiming node of a host-bound provider or ""; and the
// share's (see Share.args).
var (
	// claimCreatesSQL claims requested sandboxes and creating ones whose
	// lease lapsed (ClaimCreates).
	claimCreatesSQL = claimCreateSQL(`(state = 'requested' OR (state = 'creating' AND lease_expires_at < @now))`)
	// claimNewCreatesSQL claims requested sandboxes created at or after
	// @since (ClaimNewCreates).
	claimNewCreatesSQL = claimCreateSQL(`state = 'requested' AND created_at >= @since`)
)

// claimCreateSQL is a create claim of the sandboxes of @provider that the
// condition which selects among those a create may take: requested ones,
// and creating ones (of a host-bound provider, @node not "", only those of
// the claiming node or of none: a requested one has none, unless it starts
// from a snapshot that node holds). Each claimed sandbox moves to creating,
// its epoch and attempts are bumped, it is leased to @worker until
// @lease_until and placed on @node; a requested one gets its creating
// event.
func claimCreateSQL(which string) string {
	where := `provider = @provider AND state IN ('requested', 'creating') AND ` + which + `
			  AND (@node::text = '' OR node IS NULL OR node = @node)`
	return `
		WITH ` + fairPick(where, "created_at") + `, upd AS (
			UPDATE sandboxes s SET
				state = 'creating', epoch = s.epoch + 1, attempts = s.attempts + 1,
				lease_owner = @worker, lease_expires_at = @lease_until, updated_at = GREATEST(@now, s.created_at),
				node = NULLIF(@node::text, '')
			FROM picked
			WHERE s.id = picked.id
			RETURNING s.*, picked.state AS from_state
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			-- Never before the sandbox's creation: the claim's now was
			-- taken before its connection, and a create may have committed
			-- in between with a later clock.
			SELECT id, tenant, GREATEST(@now, created_at), from_state, 'creating', NULL, 'executor',
				'claimed by ' || @worker || COALESCE(' on node ' || NULLIF(@node::text, ''), '')
			FROM upd WHERE from_state = 'requested'
		)
		SELECT s.from_state, ` + sandboxColumns + ` FROM upd s`
}

// claimReleasesSQL claims terminal sandboxes of @provider not yet
// released that no live lease holds, those tried fewest times first, then
// longest ended first: a release whose destroy keeps failing (a device the
// host will not let go) waits behind those that just ended rather than
// holding them back (index sandboxes_release_queue); of a host-bound
// provider (@node not "") only the node's own and those never placed
// (ClaimReleases). Each claimed sandbox's epoch and release attempts are
// bumped, and it is leased to @worker until @lease_until.
var claimReleasesSQL = `
		WITH ` + fairPick(`provider = @provider AND NOT released AND state IN `+terminalStates+`
			  AND (lease_expires_at IS NULL OR lease_expires_at < @now)
			  AND (@node::text = '' OR node = @node OR node IS NULL)`, "release_attempts", "ended_at") + `, upd AS (
			UPDATE sandboxes s SET
				epoch = s.epoch + 1, release_attempts = s.release_attempts + 1,
				lease_owner = @worker, lease_expires_at = @lease_until, updated_at = @now
			FROM picked
			WHERE s.id = picked.id
			RETURNING s.*, picked.state AS from_state
		)
		SELECT s.from_state, ` + sandboxColumns + ` FROM upd s`

// claimArgs are a claim's named arguments, the share's included.
func (s *Store) claimArgs(provider, node, worker string, limit int, lease time.Duration, share Share) namedArgs {
	now := s.Now()
	return share.args(namedArgs{
		"provider": provider, "now": now, "limit": limit, "worker": worker, "lease_until": now.Add(lease), "node": node,
	}, limit)
}

// ClaimCreates claims up to limit sandboxes of the provider that need a
// create call: requested ones, and creating ones whose lease lapsed (their
// executor died, or they are due for a retry), oldest first within share.
// Each claimed sandbox moves to creating, its epoch is bumped and it is
// leased to worker until now+lease. Rows another worker is claiming are
// skipped, never waited for.
//
// node is the claiming node for a host-bound provider, "" for any other: a
// claim places the sandbox on that node, and a lapsed create is reclaimed
// only by its own node. Never by another, even once its node is dead: the
// interrupted call may have left the sandbox running there, and a second
// node's create would run it twice. The janitor ends those instead
// (StrandedSandboxes).
func (s *Store) ClaimCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share Share) ([]Claim, error) {
	return s.claimCreates(ctx, node, claimCreatesSQL, s.claimArgs(provider, node, worker, limit, lease, share))
}

// ClaimNewCreates is ClaimCreates for requested sandboxes created at or
// after since only: it starts its walk of the pending index there.
func (s *Store) ClaimNewCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, since time.Time, share Share) ([]Claim, error) {
	args := s.claimArgs(provider, node, worker, limit, lease, share)
	args["since"] = since
	return s.claimCreates(ctx, node, claimNewCreatesSQL, args)
}

func (s *Store) claimCreates(ctx context.Context, node, stmt string, args namedArgs) ([]Claim, error) {
	// A placement is a promise across hosts, so it commits durably: were
	// a claim lost in a crash of Postgres, another node could create the
	// sandbox while this one runs it (TestChaosNodes caught that). Other
	// claims may be lost and redone: their create is idempotent.
	var q querier = s.work
	if node != "" {
		q = s.pool
	}
	rows, err := query(ctx, q, stmt, args)
	if err != nil {
		return nil, wrap("claim creates", err)
	}
	return collectClaims(rows, "claim creates")
}

// ClaimReleases claims up to limit terminal sandboxes of the provider whose
// resources are not yet confirmed released and that no live lease holds,
// those tried fewest times first, then the longest ended, within share. For a host-bound provider (node not
// "") only the node's own sandboxes are claimed, and those never placed
// anywhere.
func (s *Store) ClaimReleases(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share Share) ([]Claim, error) {
	rows, err := query(ctx, s.work, claimReleasesSQL, s.claimArgs(provider, node, worker, limit, lease, share))
	if err != nil {
		return nil, wrap("claim releases", err)
	}
	return collectClaims(rows, "claim releases")
}

func collectClaims(rows pgx.Rows, op string) ([]Claim, error) {
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claim, error) {
		var c Claim
		sb, err := scanSandbox(r, &c.From)
		c.Sandbox = sb
		return c, err
	})
	if err != nil {
		return nil, wrap(op, err)
	}
	return claims, nil
}

// renewLeaseSQL extends @worker's lease on sandbox @id at @epoch to
// @lease_until.
var renewLeaseSQL = `
		UPDATE sandboxes SET lease_expires_at = @lease_until
		WHERE id = @id AND epoch = @epoch AND ` + byIDTest("lease_owner = @worker") + ` AND (state = 'creating' OR NOT released)
		RETURNING state`

// RenewLease extends the worker's lease on the sandbox to now+lease. It
// returns ErrFenced when the worker no longer holds the sandbox at this epoch
// — or, for a create, when the sandbox is no longer creating — so the worker
// must stop.
func (s *Store) RenewLease(ctx context.Context, id string, epoch int64, worker string, lease time.Duration) (domain.State, error) {
	now := s.Now()
	var state domain.State
	err := queryRow(ctx, s.work, renewLeaseSQL, namedArgs{
		"id": id, "epoch": epoch, "worker": worker, "lease_until": now.Add(lease),
	}).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: renew lease: %w", domain.ErrFenced)
	}
	if err != nil {
		return "", wrap("renew lease", err)
	}
	return state, nil
}

// MarkReady records a successful create: creating → ready, fenced on the
// epoch and on the sandbox still being creating. ErrFenced means the
// sandbox was cancelled or reclaimed meanwhile, and the resource the call
// made must be released. Concurrent calls share a statement.
func (s *Store) MarkReady(ctx context.Context, id string, epoch int64, res domain.Resource) (domain.Sandbox, error) {
	sb, err := s.readies.do(ctx, readyRow{id: id, epoch: epoch, res: res})
	if err != nil {
		return sb, wrap("mark ready", err)
	}
	return sb, nil
}

// SetReady is MarkReady for a caller that needs no sandbox back (the
// executor): the write is the same, but it reads back only what its
// announcement needs, not the whole row (27 columns to send and scan).
func (s *Store) SetReady(ctx context.Context, id string, epoch int64, res domain.Resource) error {
	if _, err := s.quietReadies.do(ctx, readyRow{id: id, epoch: epoch, res: res}); err != nil {
		return wrap("mark ready", err)
	}
	return nil
}

// readyRow is one MarkReady.
type readyRow struct {
	id    string
	epoch int64
	res   domain.Resource
}

// readBack is what a write reads back of each row it changed: the whole
// sandbox, or only what announcing the change needs (id, state, released).
type readBack struct {
	// returning is what the update returns (what the event's insert and
	// columns need), columns what is read of it.
	returning, columns string
	scan               func(pgx.Row) (domain.Sandbox, error)
}

var (
	wholeRow = readBack{returning: "s.*", columns: sandboxColumns, scan: func(r pgx.Row) (domain.Sandbox, error) { return scanSandbox(r) }}
	changeOf = readBack{returning: "s.id, s.tenant, s.state, s.released, s.provider_id", columns: "s.id, s.state, s.released", scan: scanChange}
)

// scanChange scans a row of changeOf's columns into a sandbox that has
// only the fields of a domain.Change.
func scanChange(r pgx.Row) (domain.Sandbox, error) {
	var sb domain.Sandbox
	var state string
	err := r.Scan(&sb.ID, &state, &sb.Released)
	sb.State = domain.State(state)
	return sb, err
}

func (rb readBack) collect(rows pgx.Rows) ([]domain.Sandbox, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Sandbox, error) { return rb.scan(r) })
}

// markReadySQL is a ready write of one sandbox (@id, at @epoch, at @now,
// with the provider's id @provider_id and working folder @work_dir),
// reading back rb.
func markReadySQL(rb readBack) string {
	return `
		WITH upd AS (
			UPDATE sandboxes s SET
				state = 'ready', ready_at = @now, updated_at = @now, error = NULL,
				provider_id = @provider_id, work_dir = @work_dir, lease_owner = NULL, lease_expires_at = NULL
			WHERE s.id = @id AND s.epoch = @epoch AND ` + byIDState("s.state", "('creating')") + `
			RETURNING ` + rb.returning + `
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, 'creating', 'ready', NULL, 'executor', 'provider created ' || coalesce(@provider_id, '') FROM upd
		)
		SELECT ` + rb.columns + ` FROM upd s`
}

func (s *Store) markReadyOne(rb readBack) func(ctx context.Context, r readyRow) (domain.Sandbox, error) {
	stmt := markReadySQL(rb)
	return func(ctx context.Context, r readyRow) (domain.Sandbox, error) {
		sb, err := rb.scan(querySandbox(ctx, s.work, stmt, namedArgs{
			"id": r.id, "epoch": r.epoch, "now": s.Now(),
			"provider_id": nullable(r.res.ProviderID), "work_dir": nullable(r.res.WorkDir),
		}))
		if errors.Is(err, pgx.ErrNoRows) {
			return sb, domain.ErrFenced
		}
		if err == nil {
			s.announce(sb)
		}
		return sb, err
	}
}

// markReadyManySQL is markReadySQL for many sandboxes: their ids, epochs,
// provider ids and working folders in four arrays (@ids, @epochs,
// @provider_ids, @work_dirs), at @now.
func markReadyManySQL(rb readBack) string {
	return `
		WITH n AS (
			SELECT * FROM unnest(@ids::text[], @epochs::bigint[], @provider_ids::text[], @work_dirs::text[])
				AS n(id, epoch, provider_id, work_dir)
		), locked AS (
			SELECT s.id FROM sandboxes s JOIN n ON n.id = s.id AND n.epoch = s.epoch
			WHERE ` + byIDState("s.state", "('creating')") + `
			ORDER BY s.id
			FOR UPDATE OF s
		), upd AS (
			UPDATE sandboxes s SET
				state = 'ready', ready_at = @now, updated_at = @now, error = NULL,
				provider_id = n.provider_id, work_dir = n.work_dir, lease_owner = NULL, lease_expires_at = NULL
			FROM locked JOIN n ON n.id = locked.id
			WHERE s.id = locked.id AND s.epoch = n.epoch AND ` + byIDState("s.state", "('creating')") + `
			RETURNING ` + rb.returning + `
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, 'creating', 'ready', NULL, 'executor', 'provider created ' || coalesce(provider_id, '')
			FROM upd ORDER BY id
		)
		SELECT ` + rb.columns + ` FROM upd s`
}

// markReadyMany is markReadyOne for many sandboxes in one statement. It
// locks the rows in id order, so that two statements that lock several
// rows at once wait for each other instead of deadlocking.
func (s *Store) markReadyMany(rb readBack) func(ctx context.Context, rows []readyRow) (map[string]domain.Sandbox, error) {
	stmt := markReadyManySQL(rb)
	return func(ctx context.Context, rows []readyRow) (map[string]domain.Sandbox, error) {
		ids, epochs := make([]string, len(rows)), make([]int64, len(rows))
		provIDs, workDirs := make([]*string, len(rows)), make([]*string, len(rows))
		for i, r := range rows {
			ids[i], epochs[i], provIDs[i], workDirs[i] = r.id, r.epoch, nullable(r.res.ProviderID), nullable(r.res.WorkDir)
		}
		pgRows, err := query(ctx, s.work, stmt, namedArgs{
			"ids": ids, "epochs": epochs, "provider_ids": provIDs, "work_dirs": workDirs, "now": s.Now(),
		})
		if err != nil {
			return nil, err
		}
		ready, err := rb.collect(pgRows)
		if err != nil {
			return nil, err
		}
		s.announce(ready...)
		return byID(ready), nil
	}
}

// markFailedSQL records a failed create: sandbox @id at @epoch, at @now,
// with the error @error, by @actor.
var markFailedSQL = `
		WITH upd AS (
			UPDATE sandboxes s SET
				state = 'failed', reason = 'create_failed', error = @error, ended_at = @now, updated_at = @now
			WHERE s.id = @id AND s.epoch = @epoch AND ` + byIDState("s.state", "('creating')") + `
			RETURNING s.*
		), ev AS (
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT id, tenant, @now, 'creating', 'failed', 'create_failed', @actor, @error FROM upd
		)
		SELECT ` + sandboxColumns + ` FROM upd s`

// MarkFailed records a creation that will not succeed: creating → failed
// with reason create_failed, fenced on the epoch. The worker keeps its lease
// so that it can release what the attempts may have left.
func (s *Store) MarkFailed(ctx context.Context, id string, epoch int64, actor domain.Actor, message string) (domain.Sandbox, error) {
	now := s.Now()
	sb, err := scanSandbox(querySandbox(ctx, s.work, markFailedSQL, namedArgs{
		"id": id, "epoch": epoch, "now": now, "error": message, "actor": string(actor),
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		return sb, fmt.Errorf("store: mark failed: %w", domain.ErrFenced)
	}
	if err != nil {
		return sb, wrap("mark failed", err)
	}
	s.announce(sb)
	return sb, nil
}

// unclaimSQL hands creating sandbox @id at @epoch back, claimable from
// @claimable_at, at @now, with the error @error; @refund refunds the
// attempt.
var unclaimSQL = `
		UPDATE sandboxes SET lease_owner = NULL, lease_expires_at = @claimable_at, updated_at = @now,
			error = coalesce(@error, error),
			attempts = CASE WHEN @refund THEN greatest(attempts - 1, 0) ELSE attempts END
		WHERE id = @id AND epoch = @epoch AND ` + byIDState("state", "('creating')")

// Unclaim hands a creating sandbox back: its lease ends and it may be
// claimed again from at (now, for a shutdown; later, for a retry with
// backoff). lastErr, if set, is shown in the sandbox's error field until it
// settles. refund takes back the attempt the claim counted, for a hand-back
// that made no attempt worth counting (a shutdown). A host-bound sandbox
// keeps its node, which alone may take it up again while it lives: the
// interrupted call may have left the sandbox running there, and another
// node's create would run it twice (TestChaosNodes caught that).
func (s *Store) Unclaim(ctx context.Context, id string, epoch int64, at time.Time, lastErr string, refund bool) error {
	tag, err := exec(ctx, s.work, unclaimSQL, namedArgs{
		"id": id, "epoch": epoch, "claimable_at": at.UTC(), "now": s.Now(), "error": nullable(lastErr), "refund": refund,
	})
	if err != nil {
		return wrap("unclaim", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: unclaim: %w", domain.ErrFenced)
	}
	// Claimable again: executors may look.
	s.announce(domain.Sandbox{ID: id, State: domain.StateCreating})
	return nil
}

// MarkReleased records that the provider confirmed the terminal sandbox's
// resources gone, fenced on the epoch of the worker that destroyed them.
// Concurrent calls share a statement.
func (s *Store) MarkReleased(ctx context.Context, id string, epoch int64) error {
	if _, err := s.releases.do(ctx, releasedRow{id: id, epoch: epoch}); err != nil {
		return wrap("mark released", err)
	}
	return nil
}

// releasedRow is one MarkReleased.
type releasedRow struct {
	id    string
	epoch int64
}

// markReleasedSQL records sandbox @id released, fenced on @epoch, at
// @now.
var markReleasedSQL = `
		UPDATE sandboxes SET released = true, released_at = @now, updated_at = @now,
			lease_owner = NULL, lease_expires_at = NULL, release_error = NULL
		WHERE id = @id AND epoch = @epoch AND ` + byIDState("state", terminalStates) + ` AND NOT released
		RETURNING state`

func (s *Store) markReleasedOne(ctx context.Context, r releasedRow) (domain.State, error) {
	now := s.Now()
	var state domain.State
	err := queryRow(ctx, s.work, markReleasedSQL, namedArgs{"id": r.id, "epoch": r.epoch, "now": now}).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", domain.ErrFenced
	}
	if err != nil {
		return "", err
	}
	s.announce(domain.Sandbox{ID: r.id, State: state, Released: true})
	return state, nil
}

// markReleasedManySQL is markReleasedSQL for many sandboxes: their ids and
// epochs in two arrays (@ids, @epochs), at @now.
var markReleasedManySQL = `
		WITH locked AS (
			SELECT s.id FROM sandboxes s
			JOIN unnest(@ids::text[], @epochs::bigint[]) AS n(id, epoch) ON n.id = s.id AND n.epoch = s.epoch
			WHERE ` + byIDState("s.state", terminalStates) + ` AND NOT s.released
			ORDER BY s.id
			FOR UPDATE OF s
		)
		UPDATE sandboxes s SET released = true, released_at = @now, updated_at = @now,
			lease_owner = NULL, lease_expires_at = NULL, release_error = NULL
		FROM locked
		WHERE s.id = locked.id AND ` + byIDState("s.state", terminalStates) + ` AND NOT s.released
		RETURNING s.id, s.state`

// markReleasedMany is markReleasedOne for many sandboxes in one statement,
// locking them in id order like markReadyMany.
func (s *Store) markReleasedMany(ctx context.Context, rows []releasedRow) (map[string]domain.State, error) {
	ids, epochs := make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], epochs[i] = r.id, r.epoch
	}
	pgRows, err := query(ctx, s.work, markReleasedManySQL, namedArgs{"ids": ids, "epochs": epochs, "now": s.Now()})
	if err != nil {
		return nil, err
	}
	released := map[string]domain.State{}
	changes := make([]domain.Sandbox, 0, len(rows))
	var id string
	var state domain.State
	if _, err := pgx.ForEachRow(pgRows, []any{&id, &state}, func() error {
		released[id] = state
		changes = append(changes, domain.Sandbox{ID: id, State: state, Released: true})
		return nil
	}); err != nil {
		return nil, err
	}
	s.announce(changes...)
	return released, nil
}

// ReleaseFailed records a failed destroy: the sandbox may be claimed for
// release again from retryAt.
func (s *Store) ReleaseFailed(ctx context.Context, id string, epoch int64, retryAt time.Time, cause string) error {
	tag, err := exec(ctx, s.work, `
		UPDATE sandboxes SET lease_owner = NULL, lease_expires_at = @retry_at, updated_at = @now, release_error = @error
		WHERE id = @id AND epoch = @epoch AND NOT released`,
		namedArgs{"id": id, "epoch": epoch, "retry_at": retryAt.UTC(), "now": s.Now(), "error": cause})
	if err != nil {
		return wrap("release failed", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: release failed: %w", domain.ErrFenced)
	}
	return nil
}

// RescueLapsedLeases clears the leases that expired without being renewed
// (their worker died or hung) and returns how many. Clearing a lease
// announces the sandbox, so executors claim it again at once; their claim
// bumps the epoch, fencing out the old worker for good.
func (s *Store) RescueLapsedLeases(ctx context.Context) (int64, error) {
	tag, err := exec(ctx, s.work, `
		UPDATE sandboxes SET lease_owner = NULL
		WHERE lease_owner IS NOT NULL AND lease_expires_at < @now`, namedArgs{"now": s.Now()})
	if err != nil {
		return 0, wrap("rescue lapsed leases", err)
	}
	if tag.RowsAffected() > 0 && s.announcer != nil {
		s.announcer.Announce(domain.Change{}) // look again: work was freed
	}
	return tag.RowsAffected(), nil
}
