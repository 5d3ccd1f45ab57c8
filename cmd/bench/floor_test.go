package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestFloorScripts runs each floor script through pgbench on Tether's
// schema and checks that every sandbox went the whole way; then runs a
// create script cut short of its ready write, which the check must refuse,
// so that a floor whose writes matched nothing can never pass for fast.
func TestFloorScripts(t *testing.T) {
	ctx := t.Context()
	dbURL := storetest.NewURL(t)
	pool, err := prepareFloor(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pb, err := newPgbench(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, script string) int64 {
		t.Helper()
		var before int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM sandboxes`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "floor.sql")
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := pb.run(ctx, "-M", "prepared", "-n", "-f", path, "-c", "2", "-t", "5"); err != nil {
			t.Fatalf("pgbench: %v\n%s", err, out)
		}
		return before
	}
	for _, kind := range []floorKind{floorCreate, floorLifecycle} {
		for _, batch := range []int{1, 3} {
			before := run(t, floorSQL(kind, batch))
			if err := checkFloor(ctx, pool, kind, before); err != nil {
				t.Errorf("%s, %d a statement: %v", kind, batch, err)
			}
			var n int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM sandboxes`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if want := before + int64(2*5*batch); n != want {
				t.Errorf("%s, %d a statement: %d sandboxes after the run, want %d", kind, batch, n, want)
			}
		}
	}

	// The create script without its last write (the ready transaction).
	lines := strings.Split(strings.TrimSuffix(floorSQL(floorCreate, 2), "\n"), "\n")
	short := strings.Join(lines[:len(lines)-4], "\n") + "\n"
	before := run(t, short)
	if err := checkFloor(ctx, pool, floorCreate, before); err == nil || !strings.Contains(err.Error(), "did not end ready") {
		t.Errorf("a create floor that stopped at creating passed the check (err %v)", err)
	}
}
