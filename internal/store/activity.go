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
			exit_code, bytes, duration_ms, timed_out, error, oom_killed, port, http_status, preview_id, pid)
		VALUES (@sandbox_id, @tenant, @at, @key_id, @key_name, @kind, @target,
			@exit_code, @bytes, @duration_ms, @timed_out, @error, @oom_killed, @port, @http_status, @preview_id, @pid)`,
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
		namedArgs{"pid": nullableInt(a.PID)})
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
			coalesce(port, 0), coalesce(http_status, 0), coalesce(preview_id, ''), coalesce(pid, 0)
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
			&a.Port, &a.Status, &a.PreviewID, &a.PID)
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
