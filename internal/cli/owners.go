package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// runOwners is `tether owners ls` and `tether owners end OWNER`.
func runOwners(ctx context.Context, args []string, std stdio) error {
	if len(args) > 0 && args[0] == "ls" {
		return listOwners(ctx, args[1:], std)
	}
	if len(args) == 0 || args[0] != "end" {
		_, _ = io.WriteString(std.stderr, Usage)
		return errors.New("owners: want ls, or end OWNER")
	}
	c, rest, err := newCLI("owners end", args[1:], std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("owners end: want one owner")
	}
	resp, err := c.api.ReleaseOwnerWithResponse(ctx, rest[0])
	if err != nil {
		return fmt.Errorf("end owner: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp.JSON202)
	}
	_, err = fmt.Fprintf(c.stdout, "owner %s ended; %d sandboxes ended\n", cell(rest[0]), resp.JSON202.SandboxesEnded)
	return err
}

// listOwners is `tether owners ls`: every page.
func listOwners(ctx context.Context, args []string, std stdio) error {
	c, _, err := newCLI("owners ls", args, std, nil)
	if err != nil {
		return err
	}
	owners := []tether.Owner{} // -o json: [] when there are none
	params := &tether.ListOwnersParams{}
	for {
		resp, err := c.api.ListOwnersWithResponse(ctx, params)
		if err != nil {
			return fmt.Errorf("list owners: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		owners = append(owners, resp.JSON200.Items...)
		if resp.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = resp.JSON200.NextCursor
	}
	if c.json {
		return c.printJSON(owners)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "OWNER\tALIVE\tLEASE\tLIVE SANDBOXES")
	for _, o := range owners {
		lease := "lapsed " + ago(o.ExpiresAt)
		if o.Alive {
			lease = "for " + time.Until(o.ExpiresAt).Round(time.Second).String()
		}
		_, _ = fmt.Fprintf(w, "%s\t%v\t%s\t%d\n", cell(o.Owner), o.Alive, lease, o.LiveSandboxes)
	}
	return w.Flush()
}
