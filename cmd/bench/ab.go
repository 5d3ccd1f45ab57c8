package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/jackc/pgx/v5/pgxpool"
)

// startBaseline starts the Tether of revision -ab on its own database
// (bench_ab), built from a copy of that revision (git archive, so that the
// repository's worktrees are left alone), for the A/B: every Tether phase
// then runs on both, one after the other, so that the machine's noise
// lands on both alike.
func (r *benchRun) startBaseline(ctx context.Context) (*subject, error) {
	dir, err := os.MkdirTemp("", "tether-bench-ab-")
	if err != nil {
		return nil, err
	}
	r.onClose(func() { _ = os.RemoveAll(dir) })
	r.logf("A/B: building Tether at %s", r.o.ab)
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", r.root, r.o.ab, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("A/B: git archive %s: %w\n%s", r.o.ab, err, out)
	}
	pool, err := pgxpool.New(ctx, r.dbs["bench_ab"])
	if err != nil {
		return nil, err
	}
	r.onClose(pool.Close)
	// Its own serve migrates its database to its own schema.
	srv, err := startTether(ctx, dir, r.dbs["bench_ab"], nil, r.o)
	if err != nil {
		return nil, fmt.Errorf("A/B: %w", err)
	}
	r.onClose(srv.stop)
	a := newAPI(srv.base, "bench-key", r.o.workers*2)
	r.onClose(a.wire.close)
	return &subject{name: r.o.ab, srv: srv, api: a, pool: pool, db: "bench_ab"}, nil
}
