package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/vmwire"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/outputcap"
)

// killWait bounds the wait for a killed command's end, after which the
// exec returns without it (the guest, not Tether, is then stuck).
const killWait = 10 * time.Second

// baseEnv is what every command's environment starts from, before the
// sandbox's own and the request's: nothing of Tether's.
func baseEnv() map[string]string {
	return map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/home/user", "USER": "user", "LOGNAME": "user",
		"LANG": "C.UTF-8", "TERM": "dumb",
	}
}

func commandEnv(m meta, extra map[string]string) []string {
	env := baseEnv()
	maps.Copy(env, m.Env)
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func outputLimit(req provider.ExecRequest) int {
	if req.MaxOutput <= 0 {
		return 1 << 20
	}
	return req.MaxOutput
}

// Exec implements provider.Execer.
func (p *Provider) Exec(ctx context.Context, sandboxID string, req provider.ExecRequest) (provider.ExecResult, error) {
	limit := outputLimit(req)
	var out []byte
	c := outputcap.New(limit, provider.Stderr, func(_ string, chunk []byte) error {
		out = append(out, chunk...)
		return nil
	})
	res, err := p.run(ctx, sandboxID, req, c)
	if err != nil {
		return res, err
	}
	res.Output = string(out)
	return res, nil
}

// ExecStream implements provider.StreamExecer.
func (p *Provider) ExecStream(ctx context.Context, sandboxID string, req provider.ExecRequest, emit func(stream string, chunk []byte) error) (provider.ExecResult, error) {
	return p.run(ctx, sandboxID, req, outputcap.New(outputLimit(req), provider.Stderr, emit))
}

// run runs the command through the agent, its output into out, until it
// ends, its timeout (it is killed: exit 124) or ctx (killed too).
func (p *Provider) run(ctx context.Context, id string, req provider.ExecRequest, out *outputcap.Cap) (provider.ExecResult, error) {
	var res provider.ExecResult
	m, err := p.live(id)
	if err != nil {
		return res, err
	}
	dir := req.WorkDir
	if dir == "" {
		dir = WorkDir
	}
	st, err := p.agent(id).stream(ctx, vmwire.Request{
		Op: vmwire.OpExec, Argv: []string{"/bin/sh", "-c", req.Command}, Env: commandEnv(m, req.Env), Dir: dir,
	})
	if err != nil {
		return res, p.lostOr(id, err)
	}
	defer func() { _ = st.Close() }()
	w := vmwire.NewWriter(st)
	if err := w.Frame(vmwire.KindStdinClose, nil); err != nil {
		return res, p.lostOr(id, err)
	}
	frames, done := make(chan frame, 16), make(chan struct{})
	defer close(done)
	go readFrames(st, frames, done)

	limit := req.Timeout
	if limit <= 0 {
		limit = time.Minute
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	timeout := t.C
	var killed bool
	var killDeadline <-chan time.Time
	var outErr error
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return res, p.lostOr(id, errors.New("microvm: exec: the guest's answer ended early"))
			}
			switch f.kind {
			case vmwire.KindStdout, vmwire.KindStderr:
				if outErr != nil {
					continue
				}
				stream := provider.Stdout
				if f.kind == vmwire.KindStderr {
					stream = provider.Stderr
				}
				if outErr = out.Write(stream, f.payload); outErr != nil {
					_ = w.Frame(vmwire.KindSignal, []byte{byte(syscall.SIGKILL)})
				}
			case vmwire.KindExit, vmwire.KindFailure:
				var exit vmwire.Exit
				if err := vmwire.Decode(f.kind, f.payload, vmwire.KindExit, &exit); err != nil {
					return res, fmt.Errorf("microvm: exec: %w", err)
				}
				return finish(out, exit, killed, outErr)
			}
		case <-timeout:
			timeout = nil
			killed = true
			_ = w.Frame(vmwire.KindSignal, []byte{byte(syscall.SIGKILL)})
			killDeadline = time.After(killWait)
		case <-ctx.Done():
			_ = w.Frame(vmwire.KindSignal, []byte{byte(syscall.SIGKILL)})
			return res, fmt.Errorf("microvm: exec: %w", ctx.Err())
		case <-killDeadline:
			return res, fmt.Errorf("microvm: exec: the command did not end within %s of its kill", killWait)
		}
	}
}

// finish makes the result of an ended command.
func finish(out *outputcap.Cap, exit vmwire.Exit, killed bool, outErr error) (provider.ExecResult, error) {
	var res provider.ExecResult
	if outErr != nil {
		return res, fmt.Errorf("microvm: exec: passing output on: %w", outErr)
	}
	truncated, err := out.Finish()
	if err != nil {
		return res, fmt.Errorf("microvm: exec: passing output on: %w", err)
	}
	res.Truncated = truncated
	res.ExitCode = exit.Code
	res.OOMKilled = exit.OOM
	if killed {
		res.TimedOut, res.ExitCode = true, 124
	}
	return res, nil
}

type frame struct {
	kind    byte
	payload []byte
}

// readFrames passes the stream's frames on until it ends or done is
// closed.
func readFrames(st io.Reader, frames chan<- frame, done <-chan struct{}) {
	defer close(frames)
	for {
		k, payload, err := vmwire.ReadFrame(st)
		if err != nil {
			return
		}
		select {
		case frames <- frame{k, payload}:
		case <-done:
			return
		}
	}
}

// lostOr says the sandbox no longer runs if its VM is gone, else wraps
// err.
func (p *Provider) lostOr(id string, err error) error {
	if _, alive := p.running(id); !alive {
		return provider.Errorf(provider.CodeProviderUnavailable, "microvm: sandbox %s no longer runs", id)
	}
	return fmt.Errorf("microvm: %w", err)
}
