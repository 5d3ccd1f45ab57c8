package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/tetherhq/tether/clients/go/tether"
)

// poolCommands are `tether pools SUB`.
var poolCommands = subcommands{
	"ls":     poolsList,
	"get":    poolsGet,
	"create": poolsCreate,
	"resize": poolsResize,
	"rm":     poolsDelete,
}

// runPools is `tether pools ls|get|create|resize|rm`.
func runPools(ctx context.Context, args []string, std stdio) error {
	return poolCommands.run(ctx, "pools", args, std)
}

// poolsList is `tether pools ls`.
func poolsList(ctx context.Context, _ string, args []string, std stdio) error {
	c, _, err := newCLI("pools ls", args, std, nil)
	if err != nil {
		return err
	}
	resp, err := c.api.ListPoolsWithResponse(ctx)
	if err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPools(resp.JSON200.Items)
}

// poolsGet is `tether pools get NAME`.
func poolsGet(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("pools get", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("pools get: want one pool name")
	}
	resp, err := c.api.GetPoolWithResponse(ctx, rest[0])
	if err != nil {
		return fmt.Errorf("get pool: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPool(resp.JSON200)
}

// poolsCreate is `tether pools create NAME --min-ready N [--max-size M]
// [--provider P] [--param k=v]... [--params JSON] [--image I]`.
func poolsCreate(ctx context.Context, _ string, args []string, std stdio) error {
	var provider, params, image string
	var param stringList
	var minReady, maxSize int
	c, rest, err := newCLI("pools create", args, std, func(fs *flag.FlagSet) {
		fs.IntVar(&minReady, "min-ready", 0, "how many members the pool keeps ready")
		fs.IntVar(&maxSize, "max-size", 0, "the most unclaimed members it may hold (default: min-ready, at least 1)")
		fs.StringVar(&provider, "provider", "", "provider of the members (default: the server's default)")
		fs.Var(&param, "param", "provider param k=v of every member, v read as JSON if it is JSON (repeatable)")
		fs.StringVar(&params, "params", "", "provider params of every member, as a JSON object")
		fs.StringVar(&image, "image", "", "image of every member (the same as --param image=I)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("pools create: want NAME --min-ready N")
	}
	req := tether.CreatePoolRequest{Name: rest[0], MinReady: minReady, Provider: nonEmpty(provider)}
	if maxSize > 0 {
		req.MaxSize = &maxSize
	}
	if req.Params, err = providerParams(params, param, image); err != nil {
		return fmt.Errorf("pools create: %w", err)
	}
	resp, err := c.api.CreatePoolWithResponse(ctx, req)
	if err != nil {
		return fmt.Errorf("create pool: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPool(resp.JSON201)
}

// poolsResize is `tether pools resize NAME [--min-ready N] [--max-size M]`.
func poolsResize(ctx context.Context, _ string, args []string, std stdio) error {
	var minReady, maxSize int
	c, rest, err := newCLI("pools resize", args, std, func(fs *flag.FlagSet) {
		fs.IntVar(&minReady, "min-ready", -1, "the new number of members to keep ready")
		fs.IntVar(&maxSize, "max-size", -1, "the new cap; below the pool's size, the surplus members end")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 || (minReady < 0 && maxSize < 0) {
		return errors.New("pools resize: want NAME and --min-ready N, --max-size M or both")
	}
	var req tether.UpdatePoolRequest
	if minReady >= 0 {
		req.MinReady = &minReady
	}
	if maxSize >= 0 {
		req.MaxSize = &maxSize
	}
	resp, err := c.api.UpdatePoolWithResponse(ctx, rest[0], req)
	if err != nil {
		return fmt.Errorf("resize pool: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	return c.printPool(resp.JSON200)
}

// poolsDelete is `tether pools rm NAME`: the pool and its unclaimed
// members end; sandboxes claimed from it live on.
func poolsDelete(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("pools rm", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("pools rm: want one pool name")
	}
	resp, err := c.api.DeletePoolWithResponse(ctx, rest[0])
	if err != nil {
		return fmt.Errorf("delete pool: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp.JSON202)
	}
	_, err = fmt.Fprintf(c.stdout, "pool %s deleted; %d unclaimed members ended\n", cell(resp.JSON202.Name), resp.JSON202.SandboxesEnded)
	return err
}

// printPool prints one pool.
func (c *cli) printPool(p *tether.Pool) error {
	if c.json {
		return c.printJSON(p)
	}
	return c.printPools([]tether.Pool{*p})
}

// printPools prints pools as a table, or JSON.
func (c *cli) printPools(items []tether.Pool) error {
	if c.json {
		return c.printJSON(items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "NAME\tPROVIDER\tMIN READY\tMAX SIZE\tSIZE\tREADY\tFAILURES\tLAST ERROR\tCREATED")
	for _, p := range items {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", cell(p.Name), cell(p.Provider), p.MinReady, p.MaxSize, p.Size, p.Ready,
			p.Refill.Failures, deref(p.Refill.LastError, "-", cell), ago(p.CreatedAt))
	}
	return w.Flush()
}
