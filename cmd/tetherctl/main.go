// Command tetherctl is Tether's ops commands (sandboxes, snapshots, pools,
// previews, events, owners, keys) over the REST API, built as
// bin/tetherctl; internal/cli is the commands. The server binary (cmd/api,
// bin/tether) runs it for any command that is not its own, so `tether
// sandboxes ls` works where tetherctl is installed beside tether or on
// PATH. The two are separate binaries so that the server does not link the
// generated Go client the commands use (cmd/api's deps_test.go checks).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tetherhq/tether/internal/cli"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	// `sandboxes exec` exits as its command did, silently, and 125
	// when it failed itself (cli.ExitError).
	var exit *cli.ExitError
	if !errors.As(err, &exit) {
		exit = &cli.ExitError{Code: 1, Err: err}
	}
	if exit.Err != nil {
		fmt.Fprintln(os.Stderr, "tether:", exit.Err)
	}
	os.Exit(exit.Code)
}

// run runs the ops command args[0] until it finishes or ctx is cancelled
// (or SIGINT/SIGTERM arrives); help, or no command, prints the commands.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		_, err := io.WriteString(stdout, cli.Usage)
		return err
	}
	if !cli.Has(args[0]) {
		return fmt.Errorf("unknown command %q\n%s", args[0], cli.Usage)
	}
	return cli.Run(ctx, args[0], args[1:], getenv, stdin, stdout, stderr)
}
