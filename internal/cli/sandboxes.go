package cli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// sandboxCommands are `tether sandboxes SUB`, by SUB.
var sandboxCommands = subcommands{
	"ls":     sandboxesList,
	"get":    sandboxesGet,
	"rm":     sandboxesGet,
	"create": sandboxesCreate,
	"exec":   sandboxesExec,
	"shell":  sandboxesShell,
	"files":  runFiles,
	"pause":  sandboxesPause,
	"resume": sandboxesPause,
	"renew":  sandboxesRenew,
	"events": sandboxesHistory,
}

// runSandboxes is `tether sandboxes SUB`.
func runSandboxes(ctx context.Context, args []string, std stdio) error {
	return sandboxCommands.run(ctx, "sandboxes", args, std)
}

// sandboxesList is `tether sandboxes ls`.
func sandboxesList(ctx context.Context, _ string, args []string, std stdio) error {
	var states, labels stringList
	var owner, provider string
	var limit int
	var all bool
	c, _, err := newCLI("sandboxes ls", args, std, func(fs *flag.FlagSet) {
		fs.Var(&states, "state", "only this state (repeatable)")
		fs.Var(&labels, "label", "only sandboxes with this label k=v (repeatable)")
		fs.StringVar(&owner, "owner", "", "only this owner's sandboxes")
		fs.StringVar(&provider, "provider", "", "only this provider's sandboxes")
		fs.IntVar(&limit, "limit", 50, "page size")
		fs.BoolVar(&all, "all", false, "every page, not just the first")
	})
	if err != nil {
		return err
	}
	params := &tether.ListSandboxesParams{Limit: &limit}
	if len(states) > 0 {
		s := []string(states)
		params.State = &s
	}
	if len(labels) > 0 {
		l := []string(labels)
		params.Label = &l
	}
	if owner != "" {
		params.Owner = &owner
	}
	if provider != "" {
		params.Provider = &provider
	}
	items := []tether.Sandbox{} // -o json: [] when there are none
	for {
		resp, err := c.api.ListSandboxesWithResponse(ctx, params)
		if err != nil {
			return fmt.Errorf("list sandboxes: %w", err)
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
	return c.printSandboxes(items)
}

// sandboxesGet is `tether sandboxes get` and `tether sandboxes rm`.
func sandboxesGet(ctx context.Context, sub string, args []string, std stdio) error {
	var wait time.Duration
	var waitReleased bool
	c, rest, err := newCLI("sandboxes "+sub, args, std, func(fs *flag.FlagSet) {
		if sub == "get" {
			fs.DurationVar(&wait, "wait", 0, "wait up to this long for the sandbox to settle (ready or ended)")
		} else {
			fs.BoolVar(&waitReleased, "wait", false, "wait until its resources are confirmed released")
		}
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("sandboxes %s: want one sandbox id", sub)
	}
	id := rest[0]
	if sub == "get" {
		return c.printOne(ctx, id, wait)
	}
	resp, err := c.api.DeleteSandboxWithResponse(ctx, id)
	if err != nil {
		return fmt.Errorf("delete sandbox: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	if waitReleased {
		return c.waitReleased(ctx, id)
	}
	return c.printOne(ctx, id, 0)
}

func (c *cli) printSandboxes(items []tether.Sandbox) error {
	if c.json {
		return c.printJSON(items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tSTATE\tPROVIDER\tOWNER\tREASON\tRELEASED\tCREATED\tLABELS")
	for _, sb := range items {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", cell(sb.Id), cell(string(sb.State)), cell(sb.Provider),
			deref(sb.Owner, "-", cell), deref(sb.Reason, "-", func(r tether.SandboxReason) string { return cell(string(r)) }),
			sb.Released, ago(sb.CreatedAt), labels(sb.Labels))
	}
	return w.Flush()
}

// printOne prints a sandbox, after waiting up to wait for it to settle
// (saying so on stderr, since a wait can be long).
func (c *cli) printOne(ctx context.Context, id string, wait time.Duration) error {
	params := &tether.GetSandboxParams{}
	if wait > 0 {
		w := wait.String()
		params.Wait = &w
		_, _ = fmt.Fprintf(c.stderr, "waiting up to %s for %s to settle...\n", wait, id)
	}
	resp, err := c.api.GetSandboxWithResponse(ctx, id, params)
	if err != nil {
		return fmt.Errorf("get sandbox: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printSandboxes([]tether.Sandbox{*resp.JSON200})
}

// waitReleased long-polls until the sandbox's resources are released,
// saying how long it has waited meanwhile.
func (c *cli) waitReleased(ctx context.Context, id string) error {
	start := time.Now()
	until := tether.GetSandboxUntilReleased
	wait := "30s"
	for {
		resp, err := c.api.GetSandboxWithResponse(ctx, id, &tether.GetSandboxParams{Wait: &wait, Until: &until})
		if err != nil {
			return fmt.Errorf("get sandbox: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		if resp.JSON200.Released {
			_, _ = fmt.Fprintf(c.stderr, "%s released after %s\n", id, time.Since(start).Round(time.Millisecond))
			return c.printSandboxes([]tether.Sandbox{*resp.JSON200})
		}
		_, _ = fmt.Fprintf(c.stderr, "still releasing %s (%s so far)...\n", id, time.Since(start).Round(time.Second))
	}
}

// labels is a label map as one table cell, k=v pairs in key order.
func labels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, cell(k)+"="+cell(m[k]))
	}
	return strings.Join(pairs, ",")
}
