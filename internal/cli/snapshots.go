package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// snapshotCommands are `tether snapshots SUB`.
var snapshotCommands = subcommands{
	"ls":     snapshotsList,
	"get":    snapshotsGet,
	"create": snapshotsCreate,
	"rm":     snapshotsDelete,
}

// runSnapshots is `tether snapshots ls|get|create|rm`.
func runSnapshots(ctx context.Context, args []string, std stdio) error {
	return snapshotCommands.run(ctx, "snapshots", args, std)
}

// snapshotsList is `tether snapshots ls [--sandbox ID] [--limit N] [--all]`.
func snapshotsList(ctx context.Context, _ string, args []string, std stdio) error {
	var sandbox string
	var limit int
	var all bool
	c, _, err := newCLI("snapshots ls", args, std, func(fs *flag.FlagSet) {
		fs.StringVar(&sandbox, "sandbox", "", "only the snapshots of this sandbox")
		fs.IntVar(&limit, "limit", 100, "page size")
		fs.BoolVar(&all, "all", false, "every page, not just the first")
	})
	if err != nil {
		return err
	}
	params := &tether.ListSnapshotsParams{Sandbox: nonEmpty(sandbox), Limit: &limit}
	items := []tether.Snapshot{} // -o json: [] when there are none
	for {
		resp, err := c.api.ListSnapshotsWithResponse(ctx, params)
		if err != nil {
			return fmt.Errorf("list snapshots: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		items = append(items, resp.JSON200.Items...)
		if !all || resp.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = resp.JSON200.NextCursor
	}
	return c.printSnapshots(items)
}

// snapshotsGet is `tether snapshots get ID [--wait D]`.
func snapshotsGet(ctx context.Context, _ string, args []string, std stdio) error {
	var wait time.Duration
	c, rest, err := newCLI("snapshots get", args, std, func(fs *flag.FlagSet) {
		fs.DurationVar(&wait, "wait", 0, "wait up to this long for the snapshot to settle (ready or failed)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("snapshots get: want one snapshot id")
	}
	params := &tether.GetSnapshotParams{}
	if wait > 0 {
		params.Wait = durationParam(wait)
		_, _ = fmt.Fprintf(c.stderr, "waiting up to %s for %s to settle...\n", wait, cell(rest[0]))
	}
	resp, err := c.api.GetSnapshotWithResponse(ctx, rest[0], params)
	if err != nil {
		return fmt.Errorf("get snapshot: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printSnapshot(resp.JSON200, false)
}

// snapshotsCreate is `tether snapshots create SANDBOX_ID [--memory]
// [--wait D] [-q]`: a snapshot of the sandbox's /workspace, or with
// --memory of the whole machine; with --wait, it fails unless the snapshot
// is then ready.
func snapshotsCreate(ctx context.Context, _ string, args []string, std stdio) error {
	var wait time.Duration
	var quiet, memory bool
	c, rest, err := newCLI("snapshots create", args, std, func(fs *flag.FlagSet) {
		fs.DurationVar(&wait, "wait", 0, "wait up to this long for the snapshot to be ready; fail if it is not")
		fs.BoolVar(&quiet, "q", false, "print the snapshot's id alone")
		fs.BoolVar(&memory, "memory", false, "the whole machine, memory included (a fork's source; the microvm provider)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("snapshots create: want the id of the sandbox to snapshot")
	}
	params := &tether.CreateSnapshotParams{}
	if wait > 0 {
		params.Wait = durationParam(wait)
		_, _ = fmt.Fprintf(c.stderr, "waiting up to %s for the snapshot of %s to be ready...\n", wait, cell(rest[0]))
	}
	resp, err := c.api.CreateSnapshotWithResponse(ctx, rest[0], params, tether.SnapshotRequest{Memory: memory})
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	snap := resp.JSON202
	if snap == nil {
		return fmt.Errorf("create snapshot: unexpected answer %d", resp.StatusCode())
	}
	if err := c.printSnapshot(snap, quiet); err != nil {
		return err
	}
	if wait > 0 && snap.State != tether.SnapshotStateReady {
		msg := fmt.Sprintf("snapshot %s is %s, not ready", cell(snap.Id), cell(string(snap.State)))
		if snap.Error != nil {
			msg += ": " + printable(*snap.Error)
		}
		return errors.New(msg)
	}
	return nil
}

// snapshotsDelete is `tether snapshots rm ID`.
func snapshotsDelete(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("snapshots rm", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("snapshots rm: want one snapshot id")
	}
	resp, err := c.api.DeleteSnapshotWithResponse(ctx, rest[0])
	if err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	snap := first(resp.JSON202, resp.JSON200)
	if snap == nil {
		return fmt.Errorf("delete snapshot: unexpected answer %d", resp.StatusCode())
	}
	return c.printSnapshot(snap, false)
}

// printSnapshot prints one snapshot: its id alone if quiet.
func (c *cli) printSnapshot(snap *tether.Snapshot, quiet bool) error {
	if quiet {
		_, err := fmt.Fprintln(c.stdout, snap.Id)
		return err
	}
	if c.json {
		return c.printJSON(snap)
	}
	return c.printSnapshots([]tether.Snapshot{*snap})
}

// printSnapshots prints snapshots as a table, or JSON.
func (c *cli) printSnapshots(items []tether.Snapshot) error {
	if c.json {
		return c.printJSON(items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tSTATE\tKIND\tSANDBOX\tPROVIDER\tSIZE\tCREATED\tERROR")
	for _, s := range items {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", cell(s.Id), cell(string(s.State)), cell(string(s.Kind)),
			cell(s.SourceSandboxId), cell(s.Provider), s.SizeBytes, ago(s.CreatedAt), deref(s.Error, "-", cell))
	}
	return w.Flush()
}

// durationParam is d as a wait query parameter.
func durationParam(d time.Duration) *string {
	s := d.String()
	return &s
}
