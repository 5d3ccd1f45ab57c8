package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// previewCommands are `tether previews SUB`.
var previewCommands = subcommands{
	"ls":     previewsList,
	"create": previewsCreate,
	"revoke": previewsRevoke,
}

// runPreviews is `tether previews ls|create|revoke`.
func runPreviews(ctx context.Context, args []string, std stdio) error {
	return previewCommands.run(ctx, "previews", args, std)
}

// previewsList is `tether previews ls SANDBOX_ID`.
func previewsList(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("previews ls", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("previews ls: want one sandbox id")
	}
	resp, err := c.api.ListPreviewsWithResponse(ctx, rest[0])
	if err != nil {
		return fmt.Errorf("list previews: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPreviews(resp.JSON200.Items)
}

// previewsCreate is `tether previews create SANDBOX_ID PORT [--ttl D]`: the
// preview's URL, which holds its secret and is shown once, alone on stdout.
func previewsCreate(ctx context.Context, _ string, args []string, std stdio) error {
	var ttl seconds
	c, rest, err := newCLI("previews create", args, std, func(fs *flag.FlagSet) {
		fs.Var(&ttl, "ttl", "how long the preview works, a duration or seconds (default: the server's PREVIEW_TTL)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return errors.New("previews create: want SANDBOX_ID PORT")
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil {
		return fmt.Errorf("previews create: port %q: want a number", rest[1])
	}
	req := tether.PreviewRequest{Port: port}
	if ttl.set {
		req.TtlSeconds = &ttl.n
	}
	resp, err := c.api.CreatePreviewWithResponse(ctx, rest[0], req)
	if err != nil {
		return fmt.Errorf("create preview: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	p := resp.JSON201
	if c.json {
		return c.printJSON(p)
	}
	_, _ = fmt.Fprintf(c.stderr, "preview %s of port %d, until %s; its URL, shown once, works without a key:\n",
		cell(p.Id), p.Port, p.ExpiresAt.Format("2006-01-02 15:04:05 MST"))
	_, err = fmt.Fprintln(c.stdout, deref(p.Url, "-", cell))
	return err
}

// previewsRevoke is `tether previews revoke SANDBOX_ID PREVIEW_ID`.
func previewsRevoke(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("previews revoke", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return errors.New("previews revoke: want SANDBOX_ID PREVIEW_ID")
	}
	resp, err := c.api.RevokePreviewWithResponse(ctx, rest[0], rest[1])
	if err != nil {
		return fmt.Errorf("revoke preview: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPreviews([]tether.Preview{*resp.JSON200})
}

// printPreviews prints previews as a table (never their secrets), or JSON.
func (c *cli) printPreviews(items []tether.Preview) error {
	if c.json {
		return c.printJSON(items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tSANDBOX\tPORT\tCREATED\tEXPIRES\tREVOKED")
	for _, p := range items {
		expires := "in " + time.Until(p.ExpiresAt).Round(time.Second).String()
		if !p.ExpiresAt.After(time.Now()) {
			expires = ago(p.ExpiresAt)
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(p.Id), cell(p.SandboxId), p.Port, ago(p.CreatedAt), expires, deref(p.RevokedAt, "-", ago))
	}
	return w.Flush()
}
