package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// Snapshots. A client's request (RequestSnapshot) records a creating
// snapshot of a ready or paused sandbox; an executor claims it
// (ClaimSnapshots) by taking a lease on the source sandbox (its epoch
// bumped, as a create's claim does), so that no release can destroy the
// sandbox while the copy runs, and settles it fenced on that epoch
// (FinishSnapshot, FailSnapshot, HandBackSnapshot). An exit snapshot is
// recorded and taken by the release worker of a sandbox created with
// on_end "snapshot" (EnsureExitSnapshot), under the release's claim.
//
// Each change is also an event in the source sandbox's history, from and
// to the sandbox's state at the time (reasons snapshot_*), so that the
// event stream, the audit log and webhooks carry it.

// snapshotColumns is the select list of every snapshot read, in
// scanSnapshot's order, qualified with the alias n.
const snapshotColumns = `n.id, n.tenant, n.source_id, n.provider, n.node, n.kind, n.memory, n.state, n.size_bytes, n.error,
	n.epoch, n.attempts, n.created_at, n.updated_at, n.deadline, n.ready_at, n.expires_at, n.deleted_at`

func scanSnapshot(row pgx.Row) (domain.Snapshot, error) {
	var (
		sn            domain.Snapshot
		node, errText *string
	)
	err := row.Scan(&sn.ID, &sn.Tenant, &sn.SourceID, &sn.Provider, &node, &sn.Kind, &sn.Memory, &sn.State, &sn.Size, &errText,
		&sn.Epoch, &sn.Attempts, &sn.CreatedAt, &sn.UpdatedAt, &sn.Deadline, &sn.ReadyAt, &sn.ExpiresAt, &sn.DeletedAt)
	sn.Node, sn.Error = deref(node), deref(errText)
	return sn, err
}

func collectSnapshots(rows pgx.Rows) ([]domain.Snapshot, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Snapshot, error) { return scanSnapshot(r) })
}

// snapshotEventSQL appends, for each snapshot the CTE named changed
// returns (source_id, tenant, id and the columns message uses), an event
// to its source sandbox's history with @reason and @actor, from and to the
// sandbox's state, at @now.
func snapshotEventSQL(changed, reason, actor, message string) string {
	return `
			INSERT INTO sandbox_events (sandbox_id, tenant, at, from_state, to_state, reason, actor, message)
			SELECT c.source_id, c.tenant, @now, s.state, s.state, ` + reason + `, ` + actor + `, ` + message + `
			FROM ` + changed + ` c JOIN sandboxes s ON s.id = c.source_id`
}

// snapshotQuotaLock serializes, per tenant, the quota check and the
// insert of its snapshots (a transaction's advisory lock).
const snapshotQuotaLock = `SELECT pg_advisory_xact_lock(hashtext('tether.snapshots'), hashtext(@tenant))`

// snapshotUsage reads the tenant's snapshots that hold (or will hold)
// data, creating and ready ones, and their bytes; and the tenant's own
// quotas where it has them.
func snapshotUsage(ctx context.Context, tx pgx.Tx, tenant string) (count int, bytes int64, maxCount *int, maxBytes *int64, err error) {
	err = queryRow(ctx, tx, `
		SELECT (SELECT count(*) FROM snapshots WHERE tenant = @tenant AND state IN ('creating', 'ready')),
		       (SELECT coalesce(sum(size_bytes), 0) FROM snapshots WHERE tenant = @tenant AND state IN ('creating', 'ready')),
		       (SELECT max_snapshots FROM tenants WHERE name = @tenant),
		       (SELECT max_snapshot_bytes FROM tenants WHERE name = @tenant)`, namedArgs{"tenant": tenant}).Scan(&count, &bytes, &maxCount, &maxBytes)
	return count, bytes, maxCount, maxBytes, err
}

// checkSnapshotQuota returns QUOTA_EXCEEDED when one more snapshot of the
// tenant would pass its count, or its snapshots' bytes are at their cap.
func checkSnapshotQuota(ctx context.Context, tx pgx.Tx, tenant string, maxCount int, maxBytes int64) error {
	if _, err := exec(ctx, tx, snapshotQuotaLock, namedArgs{"tenant": tenant}); err != nil {
		return err
	}
	count, bytes, tc, tb, err := snapshotUsage(ctx, tx, tenant)
	if err != nil {
		return err
	}
	if tc != nil {
		maxCount = *tc
	}
	if tb != nil {
		maxBytes = *tb
	}
	if maxCount > 0 && count >= maxCount {
		return domain.Errorf(domain.CodeQuotaExceeded,
			"tenant %s holds %d snapshots, its cap (SNAPSHOT_MAX_PER_TENANT); delete some first", tenant, count)
	}
	if maxBytes > 0 && bytes >= maxBytes {
		return domain.Errorf(domain.CodeQuotaExceeded,
			"tenant %s's snapshots hold %d bytes, at its cap of %d (SNAPSHOT_MAX_BYTES_PER_TENANT); delete some first", tenant, bytes, maxBytes)
	}
	return nil
}

// insertSnapshotSQL inserts a creating snapshot of the sandbox @source
// with its event (reason snapshot_requested, by @actor).
var insertSnapshotSQL = `
		WITH ins AS (
			INSERT INTO snapshots AS n (id, tenant, source_id, provider, node, kind, memory, state, epoch,
				created_at, updated_at, deadline, expires_at)
			SELECT @id, s.tenant, s.id, s.provider, s.node, @kind, @memory, 'creating', @epoch, @now, @now, @deadline, @expires_at::timestamptz
			FROM sandboxes s WHERE s.id = @source
			RETURNING n.*
		), ev AS (` + snapshotEventSQL("ins", "'snapshot_requested'", "@actor", "'snapshot ' || c.id || ' requested'") + `
		)
		SELECT ` + snapshotColumns + ` FROM ins n`

// RequestSnapshot records a creating snapshot of the tenant's ready or
// paused sandbox, within the tenant's snapshot quota. An unknown sandbox is
// NOT_FOUND; one in another state, SANDBOX_STATE_CONFLICT; over the quota,
// QUOTA_EXCEEDED. Nothing is written then.
func (s *Store) RequestSnapshot(ctx context.Context, r domain.SnapshotRequest) (domain.Snapshot, error) {
	var sn domain.Snapshot
	now := s.Now()
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var state domain.State
		err := queryRow(ctx, tx, `SELECT state FROM sandboxes WHERE id = @id AND tenant = @tenant FOR SHARE`,
			namedArgs{"id": r.SourceID, "tenant": r.Tenant}).Scan(&state)
		if err != nil {
			return err
		}
		if state != domain.StateReady && state != domain.StatePaused {
			return domain.StateConflict(r.SourceID, state, "snapshot (the sandbox must be ready or paused)")
		}
		if err := checkSnapshotQuota(ctx, tx, r.Tenant, r.MaxCount, r.MaxBytes); err != nil {
			return err
		}
		args := snapshotInsertArgs(domain.NewSnapshotID(), r.SourceID, domain.SnapshotManual, domain.ActorClient, 0, now, r.Timeout, r.Retention)
		args["memory"] = r.Memory
		sn, err = scanSnapshot(queryRow(ctx, tx, insertSnapshotSQL, args))
		return err
	})
	if err != nil {
		return sn, coded("request snapshot", err)
	}
	return sn, nil
}

func snapshotInsertArgs(id, source string, kind domain.SnapshotKind, actor domain.Actor, epoch int64, now time.Time, timeout, retention time.Duration) namedArgs {
	var expires *time.Time
	if retention > 0 {
		e := now.Add(retention)
		expires = &e
	}
	return namedArgs{"id": id, "source": source, "kind": string(kind), "actor": string(actor), "epoch": epoch,
		"now": now, "deadline": now.Add(timeout), "expires_at": expires, "memory": false}
}

// EnsureExitSnapshot returns the exit snapshot of the ended sandbox sb,
// recording it creating if it has none (within the tenant's quota: over
// it, it is recorded failed), and takes it for the release claim at epoch:
// a creating one's epoch becomes the claim's, so that the writes of an
// earlier release worker are fenced. timeout bounds the taking from now.
func (s *Store) EnsureExitSnapshot(ctx context.Context, sb domain.Sandbox, epoch int64, timeout, retention time.Duration, maxCount int, maxBytes int64) (domain.Snapshot, error) {
	var sn domain.Snapshot
	now := s.Now()
	err := s.pool.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		sn, err = scanSnapshot(queryRow(ctx, tx, `
			UPDATE snapshots n SET epoch = @epoch, attempts = n.attempts + CASE WHEN n.state = 'creating' THEN 1 ELSE 0 END, updated_at = @now
			WHERE n.source_id = @source AND n.kind = 'exit'
			RETURNING `+snapshotColumns, namedArgs{"epoch": epoch, "now": now, "source": sb.ID}))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		quota := checkSnapshotQuota(ctx, tx, sb.Tenant, maxCount, maxBytes)
		var qe *domain.Error
		if quota != nil && !errors.As(quota, &qe) {
			return quota
		}
		sn, err = scanSnapshot(queryRow(ctx, tx, insertSnapshotSQL, snapshotInsertArgs(domain.NewSnapshotID(), sb.ID,
			domain.SnapshotExit, domain.ActorExecutor, epoch, now, timeout, retention)))
		if err != nil || quota == nil {
			return err
		}
		sn, err = s.settleSnapshotTx(ctx, tx, snapshotSettle{id: sn.ID, epoch: epoch, to: domain.SnapshotFailed,
			actor: domain.ActorExecutor, errText: quota.Error()})
		return err
	})
	if err != nil {
		return sn, wrap("ensure exit snapshot", err)
	}
	s.announceSnapshots(sn)
	return sn, nil
}

// claimSnapshotsSQL claims creating manual snapshots of @provider whose
// source sandbox is ready or paused and held by no live lease (of a
// host-bound provider, @node not "", only the node's own), oldest first,
// one per sandbox: the sandbox's epoch is bumped and it is leased to
// @worker until @lease_until, and the snapshot takes that epoch.
const claimSnapshotsSQL = `
		WITH locked AS (
			SELECT n.id AS snap_id, s.id AS sandbox_id, n.created_at FROM snapshots n JOIN sandboxes s ON s.id = n.source_id
			WHERE n.state = 'creating' AND n.kind = 'manual' AND n.provider = @provider AND n.deadline > @now
			  AND s.state IN ('ready', 'paused') AND (s.lease_expires_at IS NULL OR s.lease_expires_at < @now)
			  AND (@node::text = '' OR s.node = @node)
			ORDER BY n.created_at
			LIMIT @limit * 2 + 8
			FOR UPDATE OF n, s SKIP LOCKED
		), cand AS (
			SELECT snap_id, sandbox_id FROM (
				SELECT DISTINCT ON (sandbox_id) snap_id, sandbox_id, created_at FROM locked ORDER BY sandbox_id, created_at
			) d ORDER BY created_at LIMIT @limit
		), sb AS (
			UPDATE sandboxes s SET epoch = s.epoch + 1, lease_owner = @worker, lease_expires_at = @lease_until, updated_at = @now
			FROM cand WHERE s.id = cand.sandbox_id
			RETURNING s.id, s.epoch
		), upd AS (
			UPDATE snapshots n SET epoch = sb.epoch, attempts = n.attempts + 1, updated_at = @now
			FROM cand JOIN sb ON sb.id = cand.sandbox_id
			WHERE n.id = cand.snap_id
			RETURNING n.*
		)
		SELECT ` + snapshotColumns + ` FROM upd n`

// ClaimSnapshots claims up to limit snapshots to take (see
// claimSnapshotsSQL). The claim's lease is the source sandbox's: renew it
// with RenewLease at the snapshot's Epoch. Each claim's Sandbox has the
// source's id, tenant, provider, node and that epoch.
func (s *Store) ClaimSnapshots(ctx context.Context, provider, node, worker string, limit int, lease time.Duration) ([]Claim, error) {
	now := s.Now()
	rows, err := query(ctx, s.work, claimSnapshotsSQL, namedArgs{"provider": provider, "node": node, "worker": worker,
		"limit": limit, "now": now, "lease_until": now.Add(lease)})
	if err != nil {
		return nil, wrap("claim snapshots", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return nil, wrap("claim snapshots", err)
	}
	claims := make([]Claim, len(sns))
	for i, sn := range sns {
		claims[i] = Claim{Snapshot: sn, From: domain.StateReady, Sandbox: domain.Sandbox{
			ID: sn.SourceID, Tenant: sn.Tenant, Provider: sn.Provider, Node: sn.Node, Epoch: sn.Epoch}}
	}
	return claims, nil
}

// snapshotSettle is one settleSnapshotSQL.
type snapshotSettle struct {
	id      string
	epoch   int64
	to      domain.SnapshotState
	size    int64
	actor   domain.Actor
	errText string
	// releaseLease ends the source sandbox's lease, held at epoch: a
	// manual snapshot's claim; an exit snapshot's release goes on.
	releaseLease bool
}

// settleSnapshotSQL moves the creating snapshot @id, still at @epoch, to
// @to (ready, with @size; or failed, with @error), appending its event;
// with @release_lease it also ends the source sandbox's lease at @epoch,
// whether or not the snapshot was still creating.
var settleSnapshotSQL = `
		WITH upd AS (
			UPDATE snapshots n SET state = @to, updated_at = @now, error = @error::text,
				size_bytes = CASE WHEN @to = 'ready' THEN @size::bigint ELSE n.size_bytes END,
				ready_at = CASE WHEN @to = 'ready' THEN @now::timestamptz END
			WHERE n.id = @id AND n.epoch = @epoch AND ` + byIDTest("n.state = 'creating'") + `
			RETURNING n.*
		), rel AS (
			UPDATE sandboxes s SET lease_owner = NULL, lease_expires_at = NULL
			FROM snapshots n
			WHERE @release_lease AND n.id = @id AND s.id = n.source_id AND s.epoch = @epoch AND ` + byIDTest("s.lease_owner IS NOT NULL") + `
		), ev AS (` + snapshotEventSQL("upd", "CASE WHEN @to = 'ready' THEN 'snapshot_ready' ELSE 'snapshot_failed' END", "@actor",
	"'snapshot ' || c.id || CASE WHEN @to = 'ready' THEN ' ready: ' || @size::bigint || ' bytes' ELSE ' failed: ' || @error::text END") + `
		)
		SELECT ` + snapshotColumns + ` FROM upd n`

func (s *Store) settleSnapshotTx(ctx context.Context, q rowQuerier, st snapshotSettle) (domain.Snapshot, error) {
	sn, err := scanSnapshot(queryRow(ctx, q, settleSnapshotSQL, namedArgs{
		"id": st.id, "epoch": st.epoch, "to": string(st.to), "size": st.size, "now": s.Now(),
		"error": nullable(st.errText), "actor": string(st.actor), "release_lease": st.releaseLease,
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		return sn, domain.ErrFenced
	}
	return sn, err
}

func (s *Store) settleSnapshot(ctx context.Context, op string, st snapshotSettle) (domain.Snapshot, error) {
	sn, err := s.settleSnapshotTx(ctx, s.work, st)
	if err != nil {
		return sn, fmt.Errorf("store: %s: %w", op, interpret(err))
	}
	s.announceSnapshots(sn)
	return sn, nil
}

// FinishSnapshot records a snapshot the provider took, size bytes: creating
// → ready, fenced on epoch and on the snapshot still being creating
// (ErrFenced: it was deleted, or reclaimed, meanwhile). releaseLease ends
// the source sandbox's lease (a manual snapshot's claim).
func (s *Store) FinishSnapshot(ctx context.Context, id string, epoch, size int64, releaseLease bool) (domain.Snapshot, error) {
	return s.settleSnapshot(ctx, "finish snapshot", snapshotSettle{id: id, epoch: epoch, to: domain.SnapshotReady, size: size,
		actor: domain.ActorExecutor, releaseLease: releaseLease})
}

// FailSnapshot records a snapshot that could not be taken: creating →
// failed with cause, fenced like FinishSnapshot.
func (s *Store) FailSnapshot(ctx context.Context, id string, epoch int64, actor domain.Actor, cause string, releaseLease bool) (domain.Snapshot, error) {
	return s.settleSnapshot(ctx, "fail snapshot", snapshotSettle{id: id, epoch: epoch, to: domain.SnapshotFailed,
		actor: actor, errText: cause, releaseLease: releaseLease})
}

// handBackSnapshotSQL hands creating snapshot @id back at @epoch, with
// the error @error, at @now, and ends its source's lease at that epoch.
var handBackSnapshotSQL = `
		WITH upd AS (
			UPDATE snapshots SET error = coalesce(@error, error), updated_at = @now
			WHERE id = @id AND epoch = @epoch AND ` + byIDTest("state = 'creating'") + `
			RETURNING source_id
		)
		UPDATE sandboxes s SET lease_owner = NULL, lease_expires_at = NULL
		FROM snapshots n WHERE n.id = @id AND s.id = n.source_id AND s.epoch = @epoch AND ` + byIDTest("s.lease_owner IS NOT NULL")

// HandBackSnapshot ends a manual snapshot's claim without settling it (a
// retryable error, lastErr, or a shutdown): the source sandbox's lease at
// epoch ends, and the snapshot may be claimed again.
func (s *Store) HandBackSnapshot(ctx context.Context, id string, epoch int64, lastErr string) error {
	tag, err := exec(ctx, s.work, handBackSnapshotSQL, namedArgs{"id": id, "epoch": epoch, "error": nullable(lastErr), "now": s.Now()})
	if err != nil {
		return wrap("hand back snapshot", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: hand back snapshot: %w", domain.ErrFenced)
	}
	return nil
}

// GetSnapshot returns the tenant's snapshot, deleted ones included, or
// ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, tenant, id string) (domain.Snapshot, error) {
	sn, err := scanSnapshot(queryRow(ctx, s.pool, `SELECT `+snapshotColumns+` FROM snapshots n WHERE n.id = @id AND n.tenant = @tenant`,
		namedArgs{"id": id, "tenant": tenant}))
	if err != nil {
		return sn, wrap("get snapshot", err)
	}
	return sn, nil
}

// ListSnapshots returns a page of the tenant's snapshots that are not
// deleted, newest first, and the cursor of the next page (nil at the end).
func (s *Store) ListSnapshots(ctx context.Context, f domain.SnapshotFilter) ([]domain.Snapshot, *domain.Cursor, error) {
	args := namedArgs{"tenant": f.Tenant, "source": f.SourceID, "limit": f.Limit + 1, "after_at": nil, "after_id": ""}
	if f.After != nil {
		args["after_at"], args["after_id"] = f.After.CreatedAt, f.After.ID
	}
	rows, err := query(ctx, s.pool, `SELECT `+snapshotColumns+` FROM snapshots n
		WHERE n.tenant = @tenant AND n.state <> 'deleted' AND (@source::text = '' OR n.source_id = @source)
		  AND (@after_at::timestamptz IS NULL OR (n.created_at, n.id) < (@after_at, @after_id::text))
		ORDER BY n.created_at DESC, n.id DESC LIMIT @limit`, args)
	if err != nil {
		return nil, nil, wrap("list snapshots", err)
	}
	out, err := collectSnapshots(rows)
	if err != nil {
		return nil, nil, wrap("list snapshots", err)
	}
	var next *domain.Cursor
	if len(out) > f.Limit {
		out = out[:f.Limit]
		last := out[f.Limit-1]
		next = &domain.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return out, next, nil
}

// deleteSnapshotsSQL marks the snapshots that the pick query selects (ids,
// locked) deleted, with @actor's events and @message.
func deleteSnapshotsSQL(pick string) string {
	return `
		WITH cur AS (` + pick + `), upd AS (
			UPDATE snapshots n SET state = 'deleted', deleted_at = @now, updated_at = @now
			FROM cur WHERE n.id = cur.id AND n.state <> 'deleted'
			RETURNING n.*
		), ev AS (` + snapshotEventSQL("upd", "'snapshot_deleted'", "@actor", "'snapshot ' || c.id || ' ' || @message::text") + `
		)
		SELECT ` + snapshotColumns + ` FROM upd n`
}

var deleteSnapshotSQL = deleteSnapshotsSQL(`SELECT id FROM snapshots WHERE id = @id AND tenant = @tenant FOR UPDATE`)

// DeleteSnapshot marks the tenant's snapshot deleted (its data is removed
// by the janitor's reconciliation, or by the executor taking it). deleted
// is false, with the snapshot as it is, when it was deleted already.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant, id string) (sn domain.Snapshot, deleted bool, err error) {
	sn, err = scanSnapshot(queryRow(ctx, s.pool, deleteSnapshotSQL, namedArgs{"id": id, "tenant": tenant, "now": s.Now(),
		"actor": string(domain.ActorClient), "message": "deleted"}))
	if errors.Is(err, pgx.ErrNoRows) {
		sn, err = s.GetSnapshot(ctx, tenant, id)
		return sn, false, err
	}
	if err != nil {
		return sn, false, wrap("delete snapshot", err)
	}
	s.announceSnapshots(sn)
	return sn, true, nil
}

var expireSnapshotsSQL = deleteSnapshotsSQL(`SELECT id FROM snapshots
	WHERE state IN ('ready', 'failed', 'lost') AND expires_at < @now LIMIT 1000 FOR UPDATE SKIP LOCKED`)

// ExpireSnapshots deletes the settled snapshots past their expires_at
// (SNAPSHOT_RETENTION), up to 1000, and returns them.
func (s *Store) ExpireSnapshots(ctx context.Context) ([]domain.Snapshot, error) {
	rows, err := query(ctx, s.work, expireSnapshotsSQL, namedArgs{"now": s.Now(), "actor": string(domain.ActorJanitor),
		"message": "expired (SNAPSHOT_RETENTION)"})
	if err != nil {
		return nil, wrap("expire snapshots", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return nil, wrap("expire snapshots", err)
	}
	return sns, nil
}

// failOverdueSnapshotsSQL fails creating snapshots that no live lease on
// their source sandbox is taking, and that cannot be taken any more: past
// their deadline, or (manual ones) their source sandbox ended.
var failOverdueSnapshotsSQL = `
		WITH cur AS (
			SELECT n.id, CASE WHEN n.deadline <= @now THEN 'not taken by its deadline (SNAPSHOT_TIMEOUT)'
				ELSE 'its sandbox ended before it was taken' END AS why
			FROM snapshots n JOIN sandboxes s ON s.id = n.source_id
			WHERE n.state = 'creating' AND (s.lease_expires_at IS NULL OR s.lease_expires_at < @now OR s.lease_owner IS NULL)
			  AND (n.deadline <= @now OR (n.kind = 'manual' AND s.state IN ` + terminalStates + `))
			LIMIT 1000
			FOR UPDATE OF n SKIP LOCKED
		), upd AS (
			UPDATE snapshots n SET state = 'failed', updated_at = @now, error = cur.why || coalesce(': ' || n.error, '')
			FROM cur WHERE n.id = cur.id
			RETURNING n.*
		), ev AS (` + snapshotEventSQL("upd", "'snapshot_failed'", "'janitor'", "'snapshot ' || c.id || ' failed: ' || c.error") + `
		)
		SELECT ` + snapshotColumns + ` FROM upd n`

// failSnapshotsOfSQL fails the creating manual snapshots of the ended
// sandbox @source, still at @epoch (its release claim's).
var failSnapshotsOfSQL = `
		WITH upd AS (
			UPDATE snapshots n SET state = 'failed', updated_at = @now,
				error = 'its sandbox ended before it was taken' || coalesce(': ' || n.error, '')
			FROM sandboxes s
			WHERE n.source_id = @source AND n.state = 'creating' AND n.kind = 'manual'
			  AND s.id = n.source_id AND s.epoch = @epoch AND s.state IN ` + terminalStates + `
			RETURNING n.*
		), ev AS (` + snapshotEventSQL("upd", "'snapshot_failed'", "'executor'", "'snapshot ' || c.id || ' failed: ' || c.error") + `
		)
		SELECT ` + snapshotColumns + ` FROM upd n`

// FailSnapshotsOf fails the manual snapshots still to be taken of the
// ended sandbox whose release is claimed at epoch, and counts them.
func (s *Store) FailSnapshotsOf(ctx context.Context, sourceID string, epoch int64) (int, error) {
	rows, err := query(ctx, s.work, failSnapshotsOfSQL, namedArgs{"source": sourceID, "epoch": epoch, "now": s.Now()})
	if err != nil {
		return 0, wrap("fail snapshots of", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return 0, wrap("fail snapshots of", err)
	}
	s.announceSnapshots(sns...)
	return len(sns), nil
}

// FailOverdueSnapshots fails the creating snapshots that can no longer be
// taken (see failOverdueSnapshotsSQL) and returns them.
func (s *Store) FailOverdueSnapshots(ctx context.Context) ([]domain.Snapshot, error) {
	rows, err := query(ctx, s.work, failOverdueSnapshotsSQL, namedArgs{"now": s.Now()})
	if err != nil {
		return nil, wrap("fail overdue snapshots", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return nil, wrap("fail overdue snapshots", err)
	}
	s.announceSnapshots(sns...)
	return sns, nil
}

// SnapshotsByID returns the snapshots with the given ids that the registry
// knows, whatever their tenant, by id.
func (s *Store) SnapshotsByID(ctx context.Context, ids []string) (map[string]domain.Snapshot, error) {
	rows, err := query(ctx, s.pool, `SELECT `+snapshotColumns+` FROM snapshots n WHERE n.id = ANY(@ids)`, namedArgs{"ids": ids})
	if err != nil {
		return nil, wrap("snapshots by id", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return nil, wrap("snapshots by id", err)
	}
	out := make(map[string]domain.Snapshot, len(sns))
	for _, sn := range sns {
		out[sn.ID] = sn
	}
	return out, nil
}

// ReadySnapshots returns the ready snapshots of the provider (of a
// host-bound provider, node not "", the node's) that became ready before
// before.
func (s *Store) ReadySnapshots(ctx context.Context, provider, node string, before time.Time) ([]domain.Snapshot, error) {
	rows, err := query(ctx, s.pool, `SELECT `+snapshotColumns+` FROM snapshots n
		WHERE n.state = 'ready' AND n.provider = @provider AND (@node = '' OR n.node = @node) AND n.ready_at < @before`,
		namedArgs{"provider": provider, "node": node, "before": before})
	if err != nil {
		return nil, wrap("ready snapshots", err)
	}
	sns, err := collectSnapshots(rows)
	if err != nil {
		return nil, wrap("ready snapshots", err)
	}
	return sns, nil
}

// MarkSnapshotLost records that the provider no longer has the ready
// snapshot's data: ready → lost, with cause, by the janitor.
func (s *Store) MarkSnapshotLost(ctx context.Context, id, cause string) (domain.Snapshot, error) {
	sn, err := scanSnapshot(queryRow(ctx, s.work, `
		WITH upd AS (
			UPDATE snapshots n SET state = 'lost', error = @error, updated_at = @now WHERE n.id = @id AND n.state = 'ready'
			RETURNING n.*
		), ev AS (`+snapshotEventSQL("upd", "'snapshot_lost'", "'janitor'", "'snapshot ' || c.id || ' lost: ' || @error::text")+`
		)
		SELECT `+snapshotColumns+` FROM upd n`, namedArgs{"id": id, "error": cause, "now": s.Now()}))
	if errors.Is(err, pgx.ErrNoRows) {
		return sn, fmt.Errorf("store: mark snapshot lost: %w", domain.ErrFenced)
	}
	if err != nil {
		return sn, wrap("mark snapshot lost", err)
	}
	return sn, nil
}
