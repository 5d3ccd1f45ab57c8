// Package server is Tether: the service (tether serve) and its commands
// (migrate, keys create, help; the ops commands over its API are
// tetherctl's, which it runs for them), as a library. The tether binary
// (cmd/api) is one call:
//
//	func main() { server.Main(server.Options{}) }
//
// A program of its own runs Tether with providers besides the built-in
// ones (sim, local, kubernetes, microvm) by passing their registrations:
//
//	func main() {
//		server.Main(server.Options{Providers: []provider.Registration{mine.Registration}})
//	}
//
// PROVIDERS=mine,local then enables it, its settings are rows of the
// settings table (tether help lists them) and GET /v1/providers shows it.
// docs/providers.md has a provider in a repository of its own, built
// this way.
//
// The service's configuration comes from the environment: the settings
// table in config.go reads it, the providers' rows from their
// registrations (providers.go); docs/configuration.md explains each
// setting. app.go is the composition root: serve builds, starts and shuts
// down the service there.
package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/provider"
)

// Options are what a program adds to Tether.
type Options struct {
	// Providers are registrations of providers besides the built-in ones
	// (sim, local, kubernetes, microvm), in the order their settings are
	// documented after those. PROVIDERS names them as it names the
	// built-in ones. A registration that is not valid, whose name another
	// has, or that declares a setting another declares or the service
	// reads itself is an error.
	Providers []provider.Registration
}

// Main runs the command os.Args names (tether serve when none), its
// settings read from the environment, until it finishes or SIGINT or
// SIGTERM arrives, and exits: 0 when it succeeded, else 1 after printing
// the error (or the status an ops command asks for, such as sandboxes
// exec's command's own).
func Main(opts Options) {
	if err := Run(context.Background(), os.Args[1:], opts); err != nil {
		code, say := exitCode(err)
		if say {
			fmt.Fprintln(os.Stderr, "tether:", err)
		}
		os.Exit(code)
	}
}

// Run runs the command args names (as after the program's name: serve,
// migrate, keys create, help, or an ops command), with the settings of
// the environment and the process's standard streams, until it finishes
// or ctx is cancelled (or SIGINT/SIGTERM arrives).
func Run(ctx context.Context, args []string, opts Options) error {
	ps, err := newProviderSet(opts.Providers...)
	if err != nil {
		return err
	}
	return ps.run(ctx, args, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
}

// exitCode is the exit status for err, and whether to print err: 1 and yes,
// unless err is the exit of an ops command that tetherctl ran (runOps):
// its status, silently (tetherctl has said what it had to).
func exitCode(err error) (int, bool) {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return exit.ExitCode(), false
	}
	return 1, true
}

const usage = `usage:
  tether [serve] [--no-migrate]     run the service (default)
  tether migrate                    apply schema migrations and exit
  tether keys create --tenant NAME [--name KEYNAME]
                                    create an API key in the database; the key is the last line printed
  tether help                       print this
  tether COMMAND ...                any other command is an ops command over the REST API
                                    (sandboxes, snapshots, pools, previews, events, owners, keys):
                                    tether runs tetherctl COMMAND ... (cmd/tetherctl; tetherctl help lists them)
`

// run is the whole program: it parses args, reads the configuration through
// getenv, and runs the chosen command until it finishes or ctx is cancelled
// (or SIGINT/SIGTERM arrives). The server's commands are here; the ops
// commands, which talk to a server over its API, are tetherctl's (runOps).
func (ps *providerSet) run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch {
	case cmd == "serve":
		return ps.runServe(ctx, args, getenv, stderr)
	case cmd == "migrate":
		cfg, err := ps.loadConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return migrate(ctx, cfg, stdout)
	case cmd == "keys" && len(args) > 0 && args[0] == "create" && hasFlag(args[1:], "tenant"):
		return ps.runCreateKey(ctx, args[1:], getenv, stdout, stderr)
	case cmd == "keys" && len(args) > 0 && args[0] == "create" && !hasFlag(args[1:], "name"):
		return errors.New("keys create: --tenant is required to make a tenant's key in the database; or pass --name, with TETHER_URL and TETHER_API_KEY, to make one over the API")
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		return ps.writeHelp(stdout)
	default:
		return runOps(cmd, args, getenv, stdin, stdout, stderr)
	}
}

// writeHelp prints the commands and the settings.
func (ps *providerSet) writeHelp(w io.Writer) error {
	if _, err := io.WriteString(w, usage+"\nsettings (environment variables, with their defaults; docs/configuration.md explains each):\n"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range ps.settings() {
		_, _ = fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.name, cmp.Or(s.def, "-"), s.doc)
	}
	return tw.Flush()
}

// runServe is `tether serve [--no-migrate]`.
func (ps *providerSet) runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	noMigrate := fs.Bool("no-migrate", false, "do not apply migrations at start (readiness fails until the schema is current)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := ps.loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return serve(ctx, cfg, !*noMigrate, stderr)
}

// runCreateKey is `tether keys create --tenant T [--name N]`: a tenant's key
// made in the database (its first one, say). Every other keys command works
// over the API with a key (internal/cli).
func (ps *providerSet) runCreateKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "tenant the key belongs to (created if new)")
	name := fs.String("name", "cli", "what the key is for, shown in GET /v1/keys and in the audit trail")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tenant == "" {
		return errors.New("keys create: --tenant is required")
	}
	if *name == "" || len(*name) > 100 {
		return errors.New("keys create: --name must be 1-100 bytes")
	}
	cfg, err := ps.loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return createKey(ctx, cfg, *tenant, *name, stdout)
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

func newLogger(cfg config, w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

func openStore(ctx context.Context, cfg config) (*store.Store, error) {
	pool, err := store.Connect(ctx, cfg.DatabaseURL, int32(cfg.DBMaxConns))
	if err != nil {
		return nil, err
	}
	return store.New(pool), nil
}

func migrate(ctx context.Context, cfg config, stdout io.Writer) error {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Pool().Close()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "applied %d migration(s); schema is current\n", len(applied))
	return err
}

func createKey(ctx context.Context, cfg config, tenant, name string, stdout io.Writer) error {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Pool().Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	rec, key, err := st.CreateAPIKey(ctx, tenant, name)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "API key %s (%q) for tenant %q (shown once; store it now):\n%s\n", rec.ID, name, tenant, key)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
