// Package cli is Tether's ops commands (tether sandboxes, snapshots, pools,
// previews, events, owners, keys): they talk to a Tether server over its
// REST API, through the generated Go client, never to the database. They
// work from anywhere a key works, and see exactly what the key's tenant may
// see. They are the binary tetherctl (cmd/tetherctl), which the server
// binary runs for them (`tether sandboxes ls` runs `tetherctl sandboxes
// ls`); the server does not link this package nor the client.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// Usage lists the ops commands, for `tether help`.
const Usage = `ops commands (server from --url or TETHER_URL, key from --key or TETHER_API_KEY;
tables for people, -o json for scripts; ls and rm are also list and delete):
  tether sandboxes ls [--state S]... [--owner O] [--provider P] [--label k=v]... [--limit N] [--all]
  tether sandboxes get ID [--wait D]       --wait: until it is no longer requested or creating
  tether sandboxes create [--provider P] [--owner O] [--ttl D] [--label k=v]... [--env K=V]...
        [--param k=v]... [--params JSON] [--image I] [--pool P [--pool-only]] [--from-snapshot S]
        [--setup SCRIPT] [--on-end snapshot] [--id ID] [--idempotency-key K] [--wait D] [-q]
                                           --wait: fail unless it is then ready; -q: its id alone
  tether sandboxes rm ID [--wait]          end it; --wait: until its resources are released
  tether sandboxes exec [--raw] [--timeout D] [--env K=V]... [--workdir DIR] ID -- COMMAND [ARG...]
                                           run that argv, no shell (-- sh -c '...' for one);
                                           exit with its status, or 125 if tether failed
  tether sandboxes shell ID [-- COMMAND [ARG...]]
                                           a terminal in it, sized to this one and following its
                                           resizes: a login shell (bash, else sh), or that argv;
                                           stdin must be a terminal; exit with its status (128+N
                                           if signal N ended it), or 125 if tether failed
  tether sandboxes files put ID PATH [FILE|-]   write FILE (default: stdin) to PATH
  tether sandboxes files get [--raw] ID PATH    the file on stdout
  tether sandboxes pause|resume ID [--wait D]
  tether sandboxes renew ID --ttl D        a new deadline, now plus D
  tether sandboxes events ID               the sandbox's history
  tether snapshots ls [--sandbox ID] [--all] | get ID [--wait D] | rm ID
  tether snapshots create SANDBOX_ID [--memory] [--wait D] [-q]   a snapshot of its /workspace (--memory: of the whole machine)
  tether pools ls | get NAME | rm NAME
  tether pools create NAME --min-ready N [--max-size M] [--provider P] [--param k=v]... [--params JSON] [--image I]
  tether pools resize NAME [--min-ready N] [--max-size M]
  tether previews ls SANDBOX_ID | revoke SANDBOX_ID PREVIEW_ID
  tether previews create SANDBOX_ID PORT [--ttl D]   its URL alone on stdout, shown once
  tether events [--follow]                 the tenant's events; --follow: live, until interrupted
  tether keys ls | create --name N | revoke ID   the tenant's API keys; a new secret alone on stdout
  tether owners ls                         owners, their leases and live sandboxes
  tether owners end OWNER                  end an owner and all its sandboxes
A command's output and a file go to a pipe as they are; on a terminal, and in tables always,
control characters are shown as \xNN (--raw: as they are).
`

// commands are the ops commands by name.
var commands = map[string]func(ctx context.Context, args []string, std stdio) error{
	"sandboxes": runSandboxes,
	"events":    runEvents,
	"owners":    runOwners,
	"keys":      runKeys,
	"snapshots": runSnapshots,
	"pools":     runPools,
	"previews":  runPreviews,
}

// Has reports whether name is an ops command.
func Has(name string) bool {
	_, ok := commands[name]
	return ok
}

// Run runs the ops command name with its arguments; getenv gives TETHER_URL
// and TETHER_API_KEY, stdin what a command reads (files put -).
func Run(ctx context.Context, name string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	run, ok := commands[name]
	if !ok {
		return fmt.Errorf("unknown ops command %q", name)
	}
	return run(ctx, args, stdio{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr})
}

// stdio is what an ops command is given to work with: the environment and
// the standard streams.
type stdio struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// subcommands are the subcommands of a command (tether sandboxes SUB ...),
// by name; each is given its name and the arguments after it.
type subcommands map[string]func(ctx context.Context, sub string, args []string, std stdio) error

// aliases are other names of subcommands, as other tools call them.
var aliases = map[string]string{"list": "ls", "delete": "rm"}

// run runs the subcommand args[0] of command name (or the one it is an
// alias of).
func (s subcommands) run(ctx context.Context, name string, args []string, std stdio) error {
	var sub string
	if len(args) > 0 {
		sub = args[0]
	}
	if canonical, ok := aliases[sub]; ok && s[canonical] != nil {
		sub = canonical
	}
	run, ok := s[sub]
	if !ok {
		_, _ = io.WriteString(std.stderr, Usage)
		return fmt.Errorf("%s %s: want %s", name, sub, strings.Join(slices.Sorted(maps.Keys(s)), ", "))
	}
	return run(ctx, sub, args[1:], std)
}

// cli is one ops command's connection and output settings.
type cli struct {
	api    *tether.ClientWithResponses
	url    string
	key    string
	json   bool
	tty    bool // stdout is a terminal
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// newCLI parses the common flags (--url, --key, -o) into a client; the
// command's own flags are defined by define before parsing.
func newCLI(name string, args []string, std stdio, define func(*flag.FlagSet)) (*cli, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.stderr)
	url := fs.String("url", std.getenv("TETHER_URL"), "Tether's base URL (TETHER_URL)")
	key := fs.String("key", std.getenv("TETHER_API_KEY"), "API key (TETHER_API_KEY)")
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
	return &cli{api: api, url: base, key: *key, json: *output == "json", tty: isTerminal(std.stdout), stdin: std.stdin, stdout: std.stdout, stderr: std.stderr}, positional, nil
}

// problem turns an error response into an error that says what the server
// said.
func problem(status int, body []byte) error {
	if status < 400 {
		return nil
	}
	var p tether.Problem
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		msg := fmt.Sprintf("%d %s: %s", status, cell(string(p.Code)), printable(p.Detail))
		if p.State != nil {
			msg += " (state " + cell(string(*p.State)) + ")"
		}
		return errors.New(msg)
	}
	return fmt.Errorf("HTTP %d: %s", status, printable(string(bytes.TrimSpace(body))))
}

// printJSON prints v as indented JSON, safe to show on a terminal.
func (c *cli) printJSON(v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = c.stdout.Write(append(jsonSafe(data), '\n'))
	return err
}

func deref[T any](p *T, none string, format func(T) string) string {
	if p == nil {
		return none
	}
	return format(*p)
}

func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() + " ago" }
