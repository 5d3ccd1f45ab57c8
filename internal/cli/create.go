package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/clients/go/tether"
)

// createOptions are `tether sandboxes create`'s flags.
type createOptions struct {
	provider, owner, image, pool, fromSnapshot, setup, onEnd, id, idempotencyKey, params string
	ttl                                                                                  seconds
	labels, env, param                                                                   stringList
	poolOnly, quiet                                                                      bool
	wait                                                                                 time.Duration
}

func (o *createOptions) define(fs *flag.FlagSet) {
	fs.StringVar(&o.provider, "provider", "", "provider (default: the server's default)")
	fs.StringVar(&o.owner, "owner", "", "owner: the sandbox ends when the owner's lease lapses (one is started if needed)")
	fs.Var(&o.ttl, "ttl", "lifetime, a duration or seconds (default: the server's DEFAULT_TTL)")
	fs.Var(&o.labels, "label", "label k=v (repeatable)")
	fs.Var(&o.env, "env", "environment variable K=V of the sandbox (repeatable)")
	fs.Var(&o.param, "param", "provider param k=v, v read as JSON if it is JSON, else as a string (repeatable)")
	fs.StringVar(&o.params, "params", "", "provider params as a JSON object (--param adds to it)")
	fs.StringVar(&o.image, "image", "", "image (the same as --param image=I)")
	fs.StringVar(&o.pool, "pool", "", "take a ready sandbox from this warm pool")
	fs.BoolVar(&o.poolOnly, "pool-only", false, "with --pool: fail (409 POOL_EMPTY) rather than create one when the pool has none ready")
	fs.StringVar(&o.fromSnapshot, "from-snapshot", "", "start from this snapshot's /workspace")
	fs.StringVar(&o.setup, "setup", "", "shell script run inside the sandbox before it counts as ready")
	fs.StringVar(&o.onEnd, "on-end", "", "snapshot: take an exit snapshot of /workspace when the sandbox ends")
	fs.StringVar(&o.id, "id", "", "the sandbox's id, chosen by the client (sbx_...)")
	fs.StringVar(&o.idempotencyKey, "idempotency-key", "", "makes a retried create return the first one's sandbox")
	fs.DurationVar(&o.wait, "wait", 0, "wait up to this long for the sandbox to be ready; fail if it is not")
	fs.BoolVar(&o.quiet, "q", false, "print the sandbox's id alone")
}

// sandboxesCreate is `tether sandboxes create`: it requests a sandbox and,
// with --wait, waits for it to be ready.
func sandboxesCreate(ctx context.Context, _ string, args []string, std stdio) error {
	var o createOptions
	c, rest, err := newCLI("sandboxes create", args, std, o.define)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("sandboxes create: unexpected arguments %q (every option is a flag)", rest)
	}
	req, err := o.request()
	if err != nil {
		return fmt.Errorf("sandboxes create: %w", err)
	}
	params := &tether.CreateSandboxParams{}
	if o.idempotencyKey != "" {
		params.IdempotencyKey = &o.idempotencyKey
	}
	resp, err := c.api.CreateSandboxWithResponse(ctx, params, req)
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return err
	}
	sb := first(resp.JSON202, resp.JSON201, resp.JSON200)
	if sb == nil {
		return fmt.Errorf("create sandbox: unexpected answer %d", resp.StatusCode())
	}
	if o.wait > 0 && sb.State != tether.SandboxStateReady {
		if sb, err = c.waitSettled(ctx, sb.Id, o.wait); err != nil {
			return err
		}
	}
	if err := c.printSandbox(sb, o.quiet); err != nil {
		return err
	}
	if o.wait > 0 && sb.State != tether.SandboxStateReady {
		return notReady(sb, "ready")
	}
	return nil
}

// request is the create request the flags describe.
func (o *createOptions) request() (tether.CreateSandboxRequest, error) {
	req := tether.CreateSandboxRequest{
		Provider: nonEmpty(o.provider), Owner: nonEmpty(o.owner), Pool: nonEmpty(o.pool), FromSnapshot: nonEmpty(o.fromSnapshot),
		Setup: nonEmpty(o.setup), Id: nonEmpty(o.id),
	}
	if o.ttl.set {
		req.TtlSeconds = &o.ttl.n
	}
	if o.poolOnly {
		req.PoolOnly = &o.poolOnly
	}
	if o.onEnd != "" {
		onEnd := tether.CreateSandboxRequestOnEnd(o.onEnd)
		req.OnEnd = &onEnd
	}
	var err error
	if req.Labels, err = keyValuesOrNil("label", o.labels); err != nil {
		return req, err
	}
	if req.Env, err = keyValuesOrNil("env", o.env); err != nil {
		return req, err
	}
	req.Params, err = providerParams(o.params, o.param, o.image)
	return req, err
}

// providerParams merges --params (a JSON object), each --param k=v and
// --image into a create's params; nil when none is given.
func providerParams(object string, pairs []string, image string) (*map[string]any, error) {
	params := map[string]any{}
	if object != "" {
		if err := json.Unmarshal([]byte(object), &params); err != nil || params == nil {
			return nil, fmt.Errorf("--params %s: want a JSON object", object)
		}
	}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want KEY=VALUE", p)
		}
		var value any
		if json.Unmarshal([]byte(v), &value) != nil {
			value = v
		}
		params[k] = value
	}
	if image != "" {
		params["image"] = image
	}
	if len(params) == 0 {
		return nil, nil
	}
	return &params, nil
}

// waitSettled waits up to wait for sandbox id to leave requested and
// creating (saying so on stderr) and returns it.
func (c *cli) waitSettled(ctx context.Context, id string, wait time.Duration) (*tether.Sandbox, error) {
	w := wait.String()
	_, _ = fmt.Fprintf(c.stderr, "waiting up to %s for %s to be ready...\n", wait, id)
	resp, err := c.api.GetSandboxWithResponse(ctx, id, &tether.GetSandboxParams{Wait: &w})
	if err != nil {
		return nil, fmt.Errorf("get sandbox: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return nil, err
	}
	return resp.JSON200, nil
}

// printSandbox prints one sandbox: its id alone if quiet, else as get does.
func (c *cli) printSandbox(sb *tether.Sandbox, quiet bool) error {
	if quiet {
		_, err := fmt.Fprintln(c.stdout, sb.Id)
		return err
	}
	if c.json {
		return c.printJSON(sb)
	}
	return c.printSandboxes([]tether.Sandbox{*sb})
}

// notReady is the error of a wait that ended with sb not in state want:
// its state, and its error if it has one.
func notReady(sb *tether.Sandbox, want string) error {
	msg := fmt.Sprintf("sandbox %s is %s, not %s", cell(sb.Id), cell(string(sb.State)), want)
	if sb.Reason != nil {
		msg += " (" + cell(string(*sb.Reason)) + ")"
	}
	if sb.Error != nil {
		msg += ": " + printable(*sb.Error)
	}
	return errors.New(msg)
}

// seconds is a flag of whole seconds, given as a Go duration (30s, 1h) or
// a number of seconds.
type seconds struct {
	n   int64
	set bool
}

func (s *seconds) String() string {
	if !s.set {
		return ""
	}
	return strconv.FormatInt(s.n, 10) + "s"
}

func (s *seconds) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d%time.Second != 0 {
			return fmt.Errorf("%q: want whole seconds, as a duration (30s, 1h) or a number", v)
		}
		n = int64(d / time.Second)
	}
	s.n, s.set = n, true
	return nil
}

// keyValuesOrNil is keyValues, nil when there are no pairs.
func keyValuesOrNil(name string, pairs []string) (*map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m, err := keyValues(name, pairs)
	return &m, err
}

// nonEmpty is &s, or nil for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// first is the first of ps that is not nil.
func first[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}
