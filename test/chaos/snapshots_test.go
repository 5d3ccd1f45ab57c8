package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Snapshots in the sim storm: some creates take an exit snapshot when
// they end (on_end), some sandboxes' snapshots are slow or fail once, and
// clients take and delete snapshots at random while replicas die and
// Postgres crashes. Afterwards no snapshot may be lost (a ready one
// without its data, or marked lost) or orphaned (data the catalog does
// not want, once reconciliation had its grace), and none may still be
// creating.

// snapshotCreate shapes a sim create's snapshots.
func (h *chaos) snapshotCreate(params, body map[string]any) {
	params["snapshot_delay_ms"] = h.intn(400)
	if h.intn(10) == 0 && params["fail"] == nil {
		params["fail"] = "snapshot_once"
	}
	if h.intn(4) == 0 {
		body["on_end"] = "snapshot"
	}
}

// snapshotCall takes a snapshot of a random sandbox, or deletes a random
// snapshot.
func (h *chaos) snapshotCall() {
	if h.intn(3) == 0 {
		if id := h.randomSnapshot(); id != "" {
			h.call(http.MethodDelete, "/v1/snapshots/"+id, nil)
		}
		return
	}
	if id := h.randomCreated(); id != "" {
		if code, sn := h.call(http.MethodPost, "/v1/sandboxes/"+id+"/snapshots", nil); code == http.StatusAccepted {
			h.snaps.Store(sn["id"].(string), struct{}{})
		}
	}
}

func (h *chaos) randomSnapshot() string {
	var ids []string
	h.snaps.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return len(ids) < 200
	})
	if len(ids) == 0 {
		return ""
	}
	return ids[h.intn(len(ids))]
}

// snapshotState compares the catalog with the sim's snapshots.
type snapshotState struct {
	total, ready, exits      int
	creating, lost, orphaned []string
}

func (s snapshotState) quiet() bool {
	return len(s.creating) == 0 && len(s.lost) == 0 && len(s.orphaned) == 0
}

func (h *chaos) snapshotState(ctx context.Context, conn *pgx.Conn) (snapshotState, error) {
	var s snapshotState
	held := map[string]bool{} // complete snapshot data
	var partial []string
	entries, err := os.ReadDir(filepath.Join(h.simDir, ".snapshots"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".tmp"); ok {
			partial = append(partial, id)
		} else {
			held[e.Name()] = true
		}
	}
	rows, err := conn.Query(ctx, `SELECT id, state, kind FROM snapshots`)
	if err != nil {
		return s, err
	}
	wanted := map[string]bool{}
	for rows.Next() {
		var id, state, kind string
		if err := rows.Scan(&id, &state, &kind); err != nil {
			return s, err
		}
		s.total++
		if kind == "exit" {
			s.exits++
		}
		switch state {
		case "creating":
			s.creating = append(s.creating, id)
			wanted[id] = true
		case "ready":
			s.ready++
			wanted[id] = true
			if !held[id] {
				s.lost = append(s.lost, id+" (ready, no data)")
			}
		case "lost":
			s.lost = append(s.lost, id+" (marked lost)")
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	for id := range held {
		if !wanted[id] {
			s.orphaned = append(s.orphaned, id)
		}
	}
	for _, id := range partial {
		if !wanted[id] {
			s.orphaned = append(s.orphaned, id+".tmp")
		}
	}
	return s, nil
}

// checkSnapshots waits (after the sandboxes' quiet) for the snapshots to
// settle and reconciliation to remove what the catalog does not want,
// then fails the test on any lost, orphaned or unsettled snapshot.
func (h *chaos) checkSnapshots(ctx context.Context, conn *pgx.Conn) {
	deadline := time.Now().Add(60 * time.Second)
	var s snapshotState
	for {
		var err error
		if s, err = h.snapshotState(ctx, conn); err != nil {
			h.t.Fatal(err)
		}
		if s.quiet() || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Every snapshot the API accepted is in the catalog (a deleted one
	// stays, as deleted) and settled.
	rows, err := conn.Query(ctx, `SELECT id, state FROM snapshots`)
	if err != nil {
		h.t.Fatal(err)
	}
	states := map[string]string{}
	var id, state string
	if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		states[id] = state
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	var accepted []string
	h.snaps.Range(func(k, _ any) bool {
		accepted = append(accepted, k.(string))
		return true
	})
	lostAccepted := unaccounted(accepted, states)
	summary := fmt.Sprintf("chaos: snapshots=%d ready=%d exit=%d creating=%d snapshots_lost=%d snapshots_orphaned=%d snapshots_unaccounted=%d",
		s.total, s.ready, s.exits, len(s.creating), len(s.lost), len(s.orphaned), len(lostAccepted))
	fmt.Println(summary)
	h.t.Log(summary)
	for what, items := range map[string][]string{"snapshots still creating": s.creating,
		"snapshots lost": s.lost, "orphaned snapshot data": s.orphaned,
		"accepted snapshots the catalog lost or never settled": lostAccepted} {
		if len(items) > 0 {
			slices.Sort(items)
			h.t.Errorf("%s (%d): %v", what, len(items), items[:min(len(items), 10)])
		}
	}
}
