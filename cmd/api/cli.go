package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/clients/go/tether"
)

// The ops commands talk to a Tether server over its REST API (through the
// generated Go client), never to the database: they work from anywhere a
// key works, and see exactly what the key's tenant may see.
const cliUsage = `ops commands (server from --url or TETHER_URL, key from --key or TETHER_API_KEY):
  tether sandboxes ls [--state S]... [--owner O] [--provider P] [--label k=v]... [--limit N] [--all]
  tether sandboxes get ID [--wait 30s]
  tether sandboxes rm ID [--wait]          end it; --wait: until its resources are released
  tether sandboxes exec [--raw] ID -- COMMAND...
  tether events [--follow]                 the tenant's events; --follow: live, until interrupted
  tether keys ls | keys create --name N | keys revoke ID   the tenant's API keys
  tether owners ls                         owners, their leases and live sandboxes
  tether owners end OWNER                  end an owner and all its sandboxes
every command takes -o json for scripts.
`

// cli is one ops command's connection and output settings.
type cli struct {
	api    *tether.ClientWithResponses
	url    string
	key    string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// newCLI parses the common flags (--url, --key, -o) into a client; the
// command's own flags are defined by define before parsing.
func newCLI(name string, args []string, getenv func(string) string, stdout, stderr io.Writer, define func(*flag.FlagSet)) (*cli, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", getenv("TETHER_URL"), "Tether's base URL (TETHER_URL)")
	key := fs.String("key", getenv("TETHER_API_KEY"), "API key (TETHER_API_KEY)")
	output := fs.String("o", "table", "output: table or json")
	if define != nil {
		define(fs)
	}
	// Flags may come before or after the arguments; everything after "--"
	// is an argument (exec's command).
	var positional, verbatim []string
	for i, a := range args {
		if a == "--" {
			args, verbatim = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	positional = append(positional, verbatim...)
	switch {
	case *url == "":
		return nil, nil, errors.New("no server: set TETHER_URL or pass --url")
	case *key == "":
		return nil, nil, errors.New("no API key: set TETHER_API_KEY or pass --key")
	case *output != "table" && *output != "json":
		return nil, nil, fmt.Errorf("-o %s: want table or json", *output)
	}
	base := strings.TrimRight(*url, "/")
	auth := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+*key)
		return nil
	}
	api, err := tether.NewClientWithResponses(base, tether.WithRequestEditorFn(auth))
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	return &cli{api: api, url: base, key: *key, json: *output == "json", stdout: stdout, stderr: stderr}, positional, nil
}

// problem turns an error response into an error that says what the server
// said.
func problem(status int, body []byte) error {
	if status < 400 {
		return nil
	}
	var p tether.Problem
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		msg := fmt.Sprintf("%d %s: %s", status, p.Code, printable(p.Detail))
		if p.State != nil {
			msg += " (state " + string(*p.State) + ")"
		}
		return errors.New(msg)
	}
	return fmt.Errorf("HTTP %d: %s", status, printable(string(bytes.TrimSpace(body))))
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func deref[T any](p *T, none string, format func(T) string) string {
	if p == nil {
		return none
	}
	return format(*p)
}

func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() + " ago" }

func (c *cli) printSandboxes(items []tether.Sandbox) error {
	if c.json {
		return c.printJSON(items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tSTATE\tPROVIDER\tOWNER\tREASON\tRELEASED\tCREATED")
	for _, sb := range items {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\t%s\n", sb.Id, sb.State, sb.Provider,
			deref(sb.Owner, "-", func(s string) string { return s }),
			deref(sb.Reason, "-", func(r string) string { return r }),
			sb.Released, ago(sb.CreatedAt))
	}
	return w.Flush()
}

// runSandboxes is `tether sandboxes ls|get|rm|exec`.
func runSandboxes(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, cliUsage)
		return errors.New("sandboxes: want ls, get, rm or exec")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "ls":
		var states, labels stringList
		var owner, provider string
		var limit int
		var all bool
		c, _, err := newCLI("sandboxes ls", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
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
		var items []tether.Sandbox
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
	case "get", "rm":
		var wait time.Duration
		var waitReleased bool
		c, rest, err := newCLI("sandboxes "+sub, args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
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
		if sub == "rm" {
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
		return c.printOne(ctx, id, wait)
	case "exec":
		var raw *bool
		c, rest, err := newCLI("sandboxes exec", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
			raw = fs.Bool("raw", false, "print the output as it is, terminal escapes included (for pipes)")
		})
		if err != nil {
			return err
		}
		if len(rest) < 2 {
			return errors.New("sandboxes exec: want ID -- COMMAND")
		}
		resp, err := c.api.ExecInSandboxWithResponse(ctx, rest[0], tether.ExecInSandboxJSONRequestBody{Command: strings.Join(rest[1:], " ")})
		if err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		if err := problem(resp.StatusCode(), resp.Body); err != nil {
			return err
		}
		res := resp.JSON200
		if c.json {
			return c.printJSON(res)
		}
		if *raw {
			_, _ = io.WriteString(c.stdout, res.Output)
		} else {
			_, _ = io.WriteString(c.stdout, printable(res.Output))
		}
		if res.ExitCode != 0 || res.TimedOut || res.Truncated {
			_, _ = fmt.Fprintf(c.stderr, "exit code %d (timed out: %v, truncated: %v, oom killed: %v)\n", res.ExitCode, res.TimedOut, res.Truncated, res.OomKilled)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("the command exited %d", res.ExitCode)
		}
		return nil
	}
	_, _ = io.WriteString(stderr, cliUsage)
	return fmt.Errorf("sandboxes %s: want ls, get, rm or exec", sub)
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

// runEvents is `tether events [--follow]`.
func runEvents(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var follow bool
	var limit int
	c, _, err := newCLI("events", args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
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
	if c.json {
		return c.printJSON(resp.JSON200.Items)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "ID\tAT\tSANDBOX\tFROM\tTO\tREASON\tACTOR")
	for _, e := range resp.JSON200.Items {
		_, _ = fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Id, e.At.Format(time.RFC3339), e.SandboxId,
			deref(e.From, "-", func(s tether.SandboxState) string { return string(s) }), e.To,
			deref(e.Reason, "-", func(s string) string { return s }), e.Actor)
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
			_, _ = fmt.Fprintln(c.stdout, data)
			continue
		}
		var e tether.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
		_, _ = fmt.Fprintf(c.stdout, "%s  %s  %s -> %s  %s  %s\n", e.At.Format(time.RFC3339), e.SandboxId,
			deref(e.From, "-", func(s tether.SandboxState) string { return string(s) }), e.To,
			deref(e.Reason, "", func(s string) string { return s }), e.Actor)
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// runOwners is `tether owners ls` and `tether owners end OWNER`.
func runOwners(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "ls" {
		return listOwners(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) == 0 || args[0] != "end" {
		_, _ = io.WriteString(stderr, cliUsage)
		return errors.New("owners: want ls, or end OWNER")
	}
	c, rest, err := newCLI("owners end", args[1:], getenv, stdout, stderr, nil)
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
	_, err = fmt.Fprintf(c.stdout, "owner %s ended; %d sandboxes ended\n", rest[0], resp.JSON202.SandboxesEnded)
	return err
}

// listOwners is `tether owners ls`: every page.
func listOwners(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, _, err := newCLI("owners ls", args, getenv, stdout, stderr, nil)
	if err != nil {
		return err
	}
	var owners []tether.Owner
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
		_, _ = fmt.Fprintf(w, "%s\t%v\t%s\t%d\n", o.Owner, o.Alive, lease, o.LiveSandboxes)
	}
	return w.Flush()
}

// hasFlag reports whether args set the flag name (-name or --name, with or
// without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// runKeys is `tether keys ls|create|revoke` over the API: the tenant of the
// key in use manages its own keys.
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, cliUsage)
		return errors.New("keys: want ls, create --name N, or revoke ID")
	}
	sub, args := args[0], args[1:]
	var name string
	c, rest, err := newCLI("keys "+sub, args, getenv, stdout, stderr, func(fs *flag.FlagSet) {
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
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.Id, k.Name, ago(k.CreatedAt),
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
		_, _ = fmt.Fprintf(c.stderr, "key %s (%s) created; the secret below is shown once:\n", resp.JSON201.Key.Id, name)
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
		_, err = fmt.Fprintf(c.stdout, "key %s revoked; it stops working within the server's AUTH_CACHE_TTL\n", rest[0])
		return err
	}
	_, _ = io.WriteString(stderr, cliUsage)
	return fmt.Errorf("keys %s: want ls, create or revoke", sub)
}

// printable is s with the characters a terminal would act on shown as
// escapes instead: a sandbox's output is the sandbox's, and output that
// moves the cursor, retitles the window, rewrites the line or writes to
// the clipboard must not do so in the operator's terminal. Newlines and
// tabs stay; other control characters (C0, DEL, C1), bidirectional
// overrides and invalid UTF-8 are shown as \xNN or \uNNNN.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}
