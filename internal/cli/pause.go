package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// sandboxesPause is `tether sandboxes pause|resume ID [--wait D]`: with
// --wait it waits for the pause (or resume) to settle and fails unless the
// sandbox is then paused (or ready).
func sandboxesPause(ctx context.Context, sub string, args []string, std stdio) error {
	var wait time.Duration
	c, rest, err := newCLI("sandboxes "+sub, args, std, func(fs *flag.FlagSet) {
		fs.DurationVar(&wait, "wait", 0, "wait up to this long for it to settle; fail if it does not")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("sandboxes %s: want one sandbox id", sub)
	}
	var w *string
	if wait > 0 {
		s := wait.String()
		w = &s
		_, _ = fmt.Fprintf(c.stderr, "waiting up to %s for the %s of %s to settle...\n", wait, sub, rest[0])
	}
	var sb *tether.Sandbox
	want := tether.SandboxStatePaused
	if sub == "pause" {
		resp, err := c.api.PauseSandboxWithResponse(ctx, rest[0], &tether.PauseSandboxParams{Wait: w})
		if err != nil {
			return fmt.Errorf("pause sandbox: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		sb = first(resp.JSON200, resp.JSON202)
	} else {
		want = tether.SandboxStateReady
		resp, err := c.api.ResumeSandboxWithResponse(ctx, rest[0], &tether.ResumeSandboxParams{Wait: w})
		if err != nil {
			return fmt.Errorf("resume sandbox: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		sb = first(resp.JSON200, resp.JSON202)
	}
	if sb == nil {
		return fmt.Errorf("%s sandbox: no sandbox in the answer", sub)
	}
	if err := c.printSandbox(sb, false); err != nil {
		return err
	}
	if wait > 0 && sb.State != want {
		return notReady(sb, string(want))
	}
	return nil
}

// sandboxesRenew is `tether sandboxes renew ID --ttl D`: a new deadline,
// now plus D, capped by the server's MAX_LIFETIME.
func sandboxesRenew(ctx context.Context, _ string, args []string, std stdio) error {
	var ttl seconds
	c, rest, err := newCLI("sandboxes renew", args, std, func(fs *flag.FlagSet) {
		fs.Var(&ttl, "ttl", "the new lifetime from now, a duration or seconds")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 || !ttl.set {
		return fmt.Errorf("sandboxes renew: want ID --ttl D")
	}
	resp, err := c.api.RenewSandboxWithResponse(ctx, rest[0], tether.RenewSandboxJSONRequestBody{TtlSeconds: ttl.n})
	if err != nil {
		return fmt.Errorf("renew sandbox: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	var sb struct {
		tether.Sandbox
		Capped bool `json:"capped"`
	}
	if err := json.Unmarshal(resp.Body, &sb); err != nil {
		return fmt.Errorf("renew sandbox: %w", err)
	}
	if c.json {
		return c.printJSON(sb)
	}
	if sb.Capped {
		_, _ = fmt.Fprintf(c.stderr, "capped by the server's MAX_LIFETIME: it expires at %s\n", sb.ExpiresAt.Format(time.RFC3339))
	}
	return c.printSandboxes([]tether.Sandbox{sb.Sandbox})
}

// sandboxesHistory is `tether sandboxes events ID`: the sandbox's
// transitions, oldest first, every page.
func sandboxesHistory(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("sandboxes events", args, std, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("sandboxes events: want one sandbox id")
	}
	events := []tether.Event{} // -o json: [] when there are none
	params := &tether.ListSandboxEventsParams{}
	for {
		resp, err := c.api.ListSandboxEventsWithResponse(ctx, rest[0], params)
		if err != nil {
			return fmt.Errorf("list events: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		events = append(events, resp.JSON200.Items...)
		if resp.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = resp.JSON200.NextCursor
	}
	return c.printEvents(events)
}
