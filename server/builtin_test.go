package server

import (
	"context"
	"io"
)

// builtinSet is the tether binary's registrations (Options{}), which most
// tests run with.
var builtinSet = func() *providerSet {
	ps, err := newProviderSet()
	if err != nil {
		panic(err)
	}
	return ps
}()

// loadConfig is the tether binary's configuration read through getenv.
func loadConfig(getenv func(string) string) (config, error) { return builtinSet.loadConfig(getenv) }

// settings is the tether binary's settings table.
func settings() []setting { return builtinSet.settings() }

// run is the tether binary's command args, with getenv and the streams
// given.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	return builtinSet.run(ctx, args, getenv, stdin, stdout, stderr)
}
