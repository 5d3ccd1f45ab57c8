package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetherhq/tether/clients/go/tether"
)

// ExecFailed is the exit status of `tether sandboxes exec` when tether
// itself failed (bad usage, no server, the server refused the exec): as
// with env, timeout and docker run, it stays apart from the statuses a
// command commonly exits with, which exec passes on as its own.
const ExecFailed = 125

// ExitError asks the program to exit with Code. Err, if not nil, is what
// went wrong, to be printed; a nil Err is a command's own exit status, which
// needs no message.
type ExitError struct {
	Code int
	Err  error
}

// Error implements error.
func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *ExitError) Unwrap() error { return e.Err }

// execOptions are `tether sandboxes exec`'s own flags.
type execOptions struct {
	raw     bool
	timeout *time.Duration
	env     stringList
	workdir string
}

// sandboxesExec is `tether sandboxes exec ID -- ARGV...`: it runs ARGV in
// the sandbox as that argv, exactly (each argument quoted for the
// sandbox's shell), and exits with the command's exit status; a failure of
// tether's own exits ExecFailed.
func sandboxesExec(ctx context.Context, _ string, args []string, std stdio) error {
	var o execOptions
	c, rest, err := newCLI("sandboxes exec", args, std, func(fs *flag.FlagSet) {
		fs.BoolVar(&o.raw, "raw", false, "print the output as it is on a terminal too, escapes included (to a pipe or file it always is)")
		fs.Func("timeout", "kill the command after this long (0: the server's maximum; default: the server's default, 60s)", func(v string) error {
			d, err := time.ParseDuration(v)
			o.timeout = &d
			return err
		})
		fs.Var(&o.env, "env", "set this variable K=V for the command (repeatable)")
		fs.StringVar(&o.workdir, "workdir", "", "where the command starts (default: the sandbox's working directory)")
	})
	if err != nil {
		return &ExitError{Code: ExecFailed, Err: err}
	}
	req, err := o.request(rest)
	if err != nil {
		return &ExitError{Code: ExecFailed, Err: err}
	}
	res, err := c.exec(ctx, rest[0], req)
	if err != nil {
		return &ExitError{Code: ExecFailed, Err: err}
	}
	if c.json {
		if err := c.printJSON(res); err != nil {
			return &ExitError{Code: ExecFailed, Err: err}
		}
	} else {
		c.printExec(res, o.raw)
	}
	return exitStatus(res.ExitCode)
}

// request is the exec request of rest (ID, then the argv) and the flags.
func (o *execOptions) request(rest []string) (tether.ExecRequest, error) {
	if len(rest) < 2 {
		return tether.ExecRequest{}, errors.New("sandboxes exec: want ID -- COMMAND [ARG...]")
	}
	command, err := shellCommand(rest[1:])
	if err != nil {
		return tether.ExecRequest{}, fmt.Errorf("sandboxes exec: %w", err)
	}
	req := tether.ExecRequest{Command: command}
	if o.timeout != nil {
		if *o.timeout < 0 || *o.timeout%time.Second != 0 {
			return tether.ExecRequest{}, fmt.Errorf("sandboxes exec: --timeout %s: want whole seconds, or 0", *o.timeout)
		}
		s := int64(*o.timeout / time.Second)
		req.TimeoutSeconds = &s
	}
	if len(o.env) > 0 {
		env, err := keyValues("env", o.env)
		if err != nil {
			return tether.ExecRequest{}, fmt.Errorf("sandboxes exec: %w", err)
		}
		req.Env = &env
	}
	if o.workdir != "" {
		req.Workdir = &o.workdir
	}
	return req, nil
}

// exec runs req in sandbox id.
func (c *cli) exec(ctx context.Context, id string, req tether.ExecRequest) (*tether.ExecResult, error) {
	resp, err := c.api.ExecInSandboxWithResponse(ctx, id, req)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return nil, err
	}
	return resp.JSON200, nil
}

// printExec prints a command's output, and on stderr how it ended when
// that was not a plain exit (a timeout, a cut output, an OOM kill).
func (c *cli) printExec(res *tether.ExecResult, raw bool) {
	c.sandboxOutput(res.Output, raw)
	if res.TimedOut || res.Truncated || res.OomKilled {
		_, _ = fmt.Fprintf(c.stderr, "exit code %d (timed out: %v, truncated: %v, oom killed: %v)\n", res.ExitCode, res.TimedOut, res.Truncated, res.OomKilled)
	}
}

// exitStatus is the error that makes tether exit as the command did: nil
// for 0, an ExitError without a message otherwise. A status a process
// cannot exit with (below 0 or above 255) is 255.
func exitStatus(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return &ExitError{Code: 255}
	default:
		return &ExitError{Code: code}
	}
}

// shellCommand is argv as one command line for the sandbox's sh -c, which
// runs exactly that argv: every argument that is not plainly safe is
// single-quoted, and so is a first word the shell would read as a reserved
// word. Arguments must be valid UTF-8 (JSON carries no other).
func shellCommand(argv []string) (string, error) {
	words := make([]string, len(argv))
	for i, a := range argv {
		if !utf8.ValidString(a) {
			return "", fmt.Errorf("argument %d is not valid UTF-8", i+1)
		}
		words[i] = shellWord(a, i == 0)
	}
	return strings.Join(words, " "), nil
}

// reservedWords are words the shells a sandbox may have (POSIX sh, dash,
// bash, busybox) read as syntax, not as a command, in a command's first
// place.
var reservedWords = map[string]bool{
	"case": true, "do": true, "done": true, "elif": true, "else": true, "esac": true, "fi": true,
	"for": true, "if": true, "in": true, "then": true, "until": true, "while": true,
	"function": true, "select": true, "time": true, "coproc": true,
}

// shellWord is s as one word of a POSIX shell command: as it is when every
// character is one no shell treats specially (letters, digits and
// "+,-./:@_"; never "=", which makes a first word an assignment, nor "%",
// which makes one a job for bash), otherwise in single quotes, where a
// quote of s closes them, is escaped with a backslash, and reopens them.
func shellWord(s string, first bool) string {
	safe := s != "" && (!first || !reservedWords[s])
	for _, r := range s {
		if !safe {
			break
		}
		safe = r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+,-./:@_", r)
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// keyValues parses K=V pairs (name is their repeatable flag, for errors).
func keyValues(name string, pairs []string) (map[string]string, error) {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", name, p)
		}
		m[k] = v
	}
	return m, nil
}
