package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
)

// seedSandboxes writes n ended sandboxes of the tenant, with the four
// events of a full lifecycle each, through COPY (triggers off, so the
// notifications of a million rows do not flood the running Tether). The
// provider is one no replica enables, so no worker touches them. It
// returns the ids, oldest first.
func seedSandboxes(ctx context.Context, pool *pgxpool.Pool, tenant string, n int, provider string) ([]string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return nil, fmt.Errorf("seed: disable triggers: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SET session_replication_role = origin`) }()

	ids := make([]string, n)
	for i := range ids {
		ids[i] = domain.NewID()
	}
	base := time.Now().Add(-time.Duration(n) * time.Second).UTC()
	labels := []byte(`{"team":"bench"}`)
	empty := []byte(`{}`)
	i := 0
	_, err = conn.Conn().CopyFrom(ctx, pgx.Identifier{"sandboxes"},
		[]string{"id", "tenant", "state", "provider", "labels", "env", "params", "reason", "released",
			"created_at", "updated_at", "ready_at", "ended_at", "released_at", "expires_at", "create_deadline", "epoch", "attempts"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == n {
				return nil, nil
			}
			created := base.Add(time.Duration(i) * time.Second)
			ready, ended := created.Add(time.Second/10), created.Add(time.Second/2)
			row := []any{ids[i], tenant, "terminated", provider, labels, empty, empty, "requested", true,
				created, ended, ready, ended, ended, created.Add(time.Hour), created.Add(5 * time.Minute), int64(2), 1}
			i++
			return row, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("seed sandboxes: %w", err)
	}

	steps := []struct{ from, to, actor any }{
		{nil, "requested", "client"}, {"requested", "creating", "executor"},
		{"creating", "ready", "executor"}, {"ready", "terminated", "client"},
	}
	i = 0
	_, err = conn.Conn().CopyFrom(ctx, pgx.Identifier{"sandbox_events"},
		[]string{"sandbox_id", "tenant", "at", "from_state", "to_state", "reason", "actor", "message"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == n*len(steps) {
				return nil, nil
			}
			sb, step := i/len(steps), steps[i%len(steps)]
			at := base.Add(time.Duration(sb)*time.Second + time.Duration(i%len(steps))*100*time.Millisecond)
			i++
			return []any{ids[sb], tenant, at, step.from, step.to, "requested", step.actor, "seeded"}, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("seed events: %w", err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE sandboxes; ANALYZE sandbox_events`); err != nil {
		return nil, err
	}
	return ids, nil
}

// seedLive writes n ready sandboxes of provider sim, each with its resource
// file in simDir, for the janitor's reconciliation.
func seedLive(ctx context.Context, pool *pgxpool.Pool, tenant string, n int, simDir string) error {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = domain.NewID()
		if err := os.WriteFile(filepath.Join(simDir, ids[i]), []byte("{}\n"), 0o644); err != nil {
			return err
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SET session_replication_role = origin`) }()
	now := time.Now().UTC()
	empty := []byte(`{}`)
	i := 0
	_, err = conn.Conn().CopyFrom(ctx, pgx.Identifier{"sandboxes"},
		[]string{"id", "tenant", "state", "provider", "labels", "env", "params", "released",
			"created_at", "updated_at", "ready_at", "expires_at", "create_deadline", "epoch", "attempts", "provider_id"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == n {
				return nil, nil
			}
			row := []any{ids[i], tenant, "ready", "sim", empty, empty, empty, false,
				now, now, now, now.Add(24 * time.Hour), now.Add(5 * time.Minute), int64(1), 1, "sim-" + ids[i]}
			i++
			return row, nil
		}))
	if err != nil {
		return fmt.Errorf("seed live sandboxes: %w", err)
	}
	_, err = conn.Exec(ctx, `ANALYZE sandboxes`)
	return err
}
