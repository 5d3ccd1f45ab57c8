package store

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/domain"
)

// RecordActivity appends a record of an exec or a file transfer a client
// made in a sandbox. A target longer than domain.MaxActivityTarget is
// truncated (on a character boundary). The record's At, if zero, is now.
//
// It is written on the workers' pool, whose commits need not wait for the
// WAL flush (see WithWorkPool): a durable commit would add a disk flush to
// every exec. A crash of Postgres itself may lose the last moment's records
// (up to three times wal_writer_delay); the next durable commit of any
// session makes them durable too.
func (s *Store) RecordActivity(ctx context.Context, a domain.Activity) error {
	if a.At.IsZero() {
		a.At = s.Now()
	}
	_, err := exec(ctx, s.work, `
		INSERT INTO sandbox_activity (sandbox_id, tenant, at, key_id, key_name, kind, target,
			exit_code, bytes, duration_ms, timed_out, error, oom_killed, port, http_status, preview_id, pid,
			allowed, rule, bytes_in)
		VALUES (@sandbox_id, @tenant, @at, @key_id, @key_name, @kind, @target,
			@exit_code, @bytes, @duration_ms, @timed_out, @error, @oom_killed, @port, @http_status, @preview_id, @pid,
			@allowed, @rule, @bytes_in)`,
		// What was done, and how it went: two maps of eight names stay on
		// the stack (see namedArgs).
		namedArgs{
			"sandbox_id": a.SandboxID, "tenant": a.Tenant, "at": a.At, "key_id": nullable(a.Caller.KeyID),
			"key_name": nullable(a.Caller.KeyName), "kind": string(a.Kind),
			"target": truncateUTF8(a.Target, domain.MaxActivityTarget), "preview_id": nullable(a.PreviewID),
		},
		namedArgs{
			"exit_code": a.ExitCode, "bytes": a.Bytes, "duration_ms": a.Duration.Milliseconds(), "timed_out": a.TimedOut,
			"error": nullable(a.Error), "oom_killed": a.OOMKilled, "port": nullableInt(a.Port), "http_status": nullableInt(a.Status),
		},
		namedArgs{"pid": nullableInt(a.PID), "allowed": a.Allowed, "rule": nullable(a.Rule), "bytes_in": a.BytesIn})
	if err != nil {
		return wrap("record activity", err)
	}
	return nil
}

// SandboxActivity returns the sandbox's activity oldest first: at most
// limit records with ids above after. The caller checks the sandbox belongs
// to the tenant first.
func (s *Store) SandboxActivity(ctx context.Context, sandboxID string, after int64, limit int) ([]domain.Activity, error) {
	rows, err := query(ctx, s.pool, `
		SELECT id, sandbox_id, tenant, at, coalesce(key_id, ''), coalesce(key_name, ''), kind, target,
			exit_code, bytes, duration_ms, timed_out, coalesce(error, ''), oom_killed,
			coalesce(port, 0), coalesce(http_status, 0), coalesce(preview_id, ''), coalesce(pid, 0),
			allowed, coalesce(rule, ''), bytes_in
		FROM sandbox_activity
		WHERE sandbox_id = @sandbox_id AND (sandbox_id, id) > (@sandbox_id, @after) ORDER BY sandbox_id, id LIMIT @limit`,
		namedArgs{"sandbox_id": sandboxID, "after": after, "limit": limit})
	if err != nil {
		return nil, wrap("sandbox activity", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Activity, error) {
		var (
			a  domain.Activity
			ms int64
		)
		err := r.Scan(&a.ID, &a.SandboxID, &a.Tenant, &a.At, &a.Caller.KeyID, &a.Caller.KeyName, &a.Kind, &a.Target,
			&a.ExitCode, &a.Bytes, &ms, &a.TimedOut, &a.Error, &a.OOMKilled,
			&a.Port, &a.Status, &a.PreviewID, &a.PID, &a.Allowed, &a.Rule, &a.BytesIn)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
	if err != nil {
		return nil, wrap("sandbox activity", err)
	}
	return out, nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// nullableInt is n, or NULL for zero.
func nullableInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// RecordEgress appends the egress proxy's records (kind egress) to their
// sandboxes' activity in one statement, each with its sandbox's tenant; a
// record of a sandbox the registry lacks is dropped. Like RecordActivity
// it writes on the workers' pool.
func (s *Store) RecordEgress(ctx context.Context, records []domain.Activity) error {
	n := len(records)
	var (
		ids, targets, rules, errs = make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
		ats                       = make([]time.Time, n)
		ports                     = make([]int32, n)
		allowed                   = make([]bool, n)
		bytesOut, bytesIn         = make([]*int64, n), make([]*int64, n)
		ms                        = make([]int64, n)
	)
	for i, a := range records {
		ids[i], ats[i], targets[i] = a.SandboxID, a.At, truncateUTF8(a.Target, domain.MaxActivityTarget)
		ports[i], allowed[i], rules[i], errs[i] = int32(a.Port), a.Allowed != nil && *a.Allowed, nullable(a.Rule), nullable(a.Error)
		bytesOut[i], bytesIn[i], ms[i] = a.Bytes, a.BytesIn, a.Duration.Milliseconds()
	}
	_, err := exec(ctx, s.work, `
		INSERT INTO sandbox_activity (sandbox_id, tenant, at, kind, target, port, allowed, rule, error, bytes, bytes_in,
			duration_ms, timed_out, oom_killed)
		SELECT r.id, s.tenant, r.at, 'egress', r.target, nullif(r.port, 0), r.allowed, r.rule, r.error, r.bytes, r.bytes_in,
			r.ms, false, false
		FROM unnest(@ids::text[], @ats::timestamptz[], @targets::text[], @ports::int[], @allowed::bool[], @rules::text[],
			@errors::text[], @bytes::bigint[], @bytes_in::bigint[], @ms::bigint[])
			AS r (id, at, target, port, allowed, rule, error, bytes, bytes_in, ms)
		JOIN sandboxes s ON s.id = r.id`,
		namedArgs{"ids": ids, "ats": ats, "targets": targets, "ports": ports, "allowed": allowed, "rules": rules},
		namedArgs{"errors": errs, "bytes": bytesOut, "bytes_in": bytesIn, "ms": ms})
	if err != nil {
		return wrap("record egress", err)
	}
	return nil
}
