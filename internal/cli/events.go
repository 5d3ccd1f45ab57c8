package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// runEvents is `tether events [--follow]`.
func runEvents(ctx context.Context, args []string, std stdio) error {
	var follow bool
	var limit int
	c, _, err := newCLI("events", args, std, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "follow", false, "follow new events live until interrupted")
		fs.IntVar(&limit, "limit", 50, "how many events to show, oldest first (without --follow)")
	})
	if err != nil {
		return err
	}
	if follow {
		return c.follow(ctx)
	}
	resp, err := c.api.ListEventsWithResponse(ctx, &tether.ListEventsParams{Limit: &limit})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printEvents(resp.JSON200.Items)
}

// printEvents prints events as a table, or JSON.
func (c *cli) printEvents(events []tether.Event) error {
	if c.json {
		return c.printJSON(events)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tAT\tSANDBOX\tFROM\tTO\tREASON\tACTOR")
	for _, e := range events {
		_, _ = fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Id, e.At.Format(time.RFC3339), cell(e.SandboxId),
			deref(e.From, "-", stateCell), stateCell(e.To), deref(e.Reason, "-", cell), cell(string(e.Actor)))
	}
	return w.Flush()
}

// follow prints the event stream as it comes, one line (or JSON object)
// an event, until ctx ends.
func (c *cli) follow(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/v1/events/stream", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return problem(resp.StatusCode, body)
	}
	_, _ = fmt.Fprintln(c.stderr, "following events; Ctrl-C stops")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if c.json {
			_, _ = fmt.Fprintln(c.stdout, string(jsonSafe([]byte(data))))
			continue
		}
		var e tether.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
		_, _ = fmt.Fprintf(c.stdout, "%s  %s  %s -> %s  %s  %s\n", e.At.Format(time.RFC3339), cell(e.SandboxId),
			deref(e.From, "-", stateCell), stateCell(e.To), deref(e.Reason, "", cell), cell(string(e.Actor)))
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// stateCell is a sandbox state as a table cell.
func stateCell(s tether.SandboxState) string { return cell(string(s)) }
