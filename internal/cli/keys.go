package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tetherhq/tether/clients/go/tether"
)

// runKeys is `tether keys ls|create|revoke` over the API: the tenant of the
// key in use manages its own keys.
func runKeys(ctx context.Context, args []string, std stdio) error {
	if len(args) == 0 {
		_, _ = io.WriteString(std.stderr, Usage)
		return errors.New("keys: want ls, create --name N, or revoke ID")
	}
	sub, args := args[0], args[1:]
	var name string
	c, rest, err := newCLI("keys "+sub, args, std, func(fs *flag.FlagSet) {
		if sub == "create" {
			fs.StringVar(&name, "name", "", "what the key is for")
		}
	})
	if err != nil {
		return err
	}
	switch sub {
	case "ls":
		resp, err := c.api.ListApiKeysWithResponse(ctx)
		if err != nil {
			return fmt.Errorf("list keys: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(resp.JSON200.Items)
		}
		w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(w, "ID\tNAME\tCREATED\tLAST USED\tREVOKED")
		for _, k := range resp.JSON200.Items {
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cell(k.Id), cell(k.Name), ago(k.CreatedAt),
				deref(k.LastUsedAt, "-", ago), deref(k.RevokedAt, "-", ago))
		}
		return w.Flush()
	case "create":
		if name == "" {
			return errors.New("keys create: --name is required (or --tenant, to make a tenant's first key in the database)")
		}
		resp, err := c.api.CreateApiKeyWithResponse(ctx, tether.CreateApiKeyJSONRequestBody{Name: name})
		if err != nil {
			return fmt.Errorf("create key: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(resp.JSON201)
		}
		_, _ = fmt.Fprintf(c.stderr, "key %s (%s) created; the secret below is shown once:\n", cell(resp.JSON201.Key.Id), cell(name))
		_, err = fmt.Fprintln(c.stdout, resp.JSON201.Secret)
		return err
	case "revoke":
		if len(rest) != 1 {
			return errors.New("keys revoke: want one key id")
		}
		resp, err := c.api.RevokeApiKeyWithResponse(ctx, rest[0])
		if err != nil {
			return fmt.Errorf("revoke key: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "key %s revoked; it stops working within the server's AUTH_CACHE_TTL\n", cell(rest[0]))
		return err
	}
	_, _ = io.WriteString(std.stderr, Usage)
	return fmt.Errorf("keys %s: want ls, create or revoke", sub)
}
