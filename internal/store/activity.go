package store

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
)

// RecordActivity appends a record of an exec or a file transfer a client
// made in a sandbox. A target longer than sandbox.MaxActivityTarget is
// truncated (on a character boundary). The record's At, if zero, is now.
//
// It is written on the workers' pool, whose commits need not wait for the
// WAL flush (see WithWorkPool): a durable commit would add a disk flush to
// every exec. A crash of Postgres itself may lose the last moment's records
// (up to three times wal_writer_delay); the next durable commit of any
// session makes them durable too.
func (s *Store) RecordActivity(ctx context.Context, a sandbox.Activity) error {
	if a.At.IsZero() {
		a.At = s.Now()
	}
	_, err := s.work.Exec(ctx, `
		INSERT INTO sandbox_activity (sandbox_id, tenant, at, key_id, key_name, kind, target,
			exit_code, bytes, duration_ms, timed_out, error, oom_killed, port, http_status, preview_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		a.SandboxID, a.Tenant, a.At, nullable(a.Caller.KeyID), nullable(a.Caller.KeyName), string(a.Kind),
		truncateUTF8(a.Target, sandbox.MaxActivityTarget), a.ExitCode, a.Bytes, a.Duration.Milliseconds(), a.TimedOut,
		nullable(a.Error), a.OOMKilled, nullableInt(a.Port), nullableInt(a.Status), nullable(a.PreviewID))
	if err != nil {
		return wrap("record activity", err)
	}
	return nil
}

// SandboxActivity returns the sandbox's activity oldest first: at most
// limit records with ids above after. The caller checks the sandbox belongs
// to the tenant first.
func (s *Store) SandboxActivity(ctx context.Context, sandboxID string, after int64, limit int) ([]sandbox.Activity, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, sandbox_id, tenant, at, coalesce(key_id, ''), coalesce(key_name, ''), kind, target,
			exit_code, bytes, duration_ms, timed_out, coalesce(error, ''), oom_killed,
			coalesce(port, 0), coalesce(http_status, 0), coalesce(preview_id, '')
		FROM sandbox_activity
		WHERE sandbox_id = $1 AND (sandbox_id, id) > ($1, $2) ORDER BY sandbox_id, id LIMIT $3`, sandboxID, after, limit)
	if err != nil {
		return nil, wrap("sandbox activity", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.Activity, error) {
		var (
			a  sandbox.Activity
			ms int64
		)
		err := r.Scan(&a.ID, &a.SandboxID, &a.Tenant, &a.At, &a.Caller.KeyID, &a.Caller.KeyName, &a.Kind, &a.Target,
			&a.ExitCode, &a.Bytes, &ms, &a.TimedOut, &a.Error, &a.OOMKilled,
			&a.Port, &a.Status, &a.PreviewID)
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
