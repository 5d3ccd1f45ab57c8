package providertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// repeat returns a shell command that prints n bytes of c (n a multiple of
// 100), with nothing but the shell's builtins.
func repeat(c byte, n int) string {
	line := strings.Repeat(string(c), 100)
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do printf %s; i=$((i+1)); done`, n/100, line)
}

// execSandbox makes a provider with exec and a sandbox in it.
func (s *suite) execSandbox(t *testing.T, env map[string]string) (provider.Provider, provider.Execer, provider.Resource) {
	t.Helper()
	p, _ := s.open(t)
	execer := capability[provider.Execer](t, p, "Execer")
	return p, execer, s.create(t, p, provider.CreateSpec{Env: env})
}

func (s *suite) run(t *testing.T, e provider.Execer, id string, req provider.ExecRequest) provider.ExecResult {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = s.h.Timeout
	}
	if req.MaxOutput == 0 {
		req.MaxOutput = 1 << 16
	}
	res, err := e.Exec(s.ctx(t), id, req)
	if err != nil {
		t.Fatalf("Exec(%q): %v", req.Command, err)
	}
	return res
}

func (s *suite) testExec(t *testing.T) {
	skipWithout[provider.Execer](t, s, "Execer")
	t.Parallel()
	t.Run("OutputAndExitCodes", s.testExecOutput)
	t.Run("Environment", s.testExecEnv)
	t.Run("WorkDir", s.testExecWorkDir)
	t.Run("Timeout", s.testExecTimeout)
	t.Run("MaxOutput", s.testExecMaxOutput)
	t.Run("UnknownSandbox", s.testExecUnknown)
	t.Run("Binary", s.testExecBinary)
}

// everyByte is a command that prints every byte value once, 0 to 255,
// with the shell's printf alone, and what it prints.
func everyByte() (command string, want []byte) {
	var b strings.Builder
	b.WriteString("printf '")
	for i := range 256 {
		fmt.Fprintf(&b, `\%03o`, i)
		want = append(want, byte(i))
	}
	b.WriteString("'")
	return b.String(), want
}

// testExecBinary: output that is not text comes back byte for byte: every
// byte value, and (with Files) 4 KiB of /dev/urandom, compared with the
// copy the command wrote to a file.
func (s *suite) testExecBinary(t *testing.T) {
	t.Parallel()
	p, e, res := s.execSandbox(t, nil)
	command, want := everyByte()
	if got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: command}); got.Output != string(want) || got.ExitCode != 0 {
		t.Errorf("every byte value: %d bytes of output (exit %d), %q; want the 256 bytes as printed", len(got.Output), got.ExitCode, got.Output)
	}
	f, ok := p.(provider.Files)
	if !ok {
		return
	}
	file := res.WorkDir + "/urandom.bin"
	got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "head -c 4096 /dev/urandom | tee " + file})
	var copied strings.Builder
	if err := f.ReadFile(s.ctx(t), res.SandboxID, file, &copied, 1<<20); err != nil {
		t.Fatalf("ReadFile of the command's copy: %v", err)
	}
	if len(got.Output) != 4096 || got.Output != copied.String() {
		t.Errorf("head -c 4096 /dev/urandom: %d bytes of output, equal to the file's %d: %v; want the 4096 bytes exactly",
			len(got.Output), copied.Len(), got.Output == copied.String())
	}
}

func (s *suite) testExecOutput(t *testing.T) {
	t.Parallel()
	_, e, res := s.execSandbox(t, nil)
	for _, tc := range []struct {
		command, want string
		exit          int
	}{
		{`printf 'OPEN_SANDBOX_ALIVE\n'`, "OPEN_SANDBOX_ALIVE\n", 0},
		{`exit 3`, "", 3},
		{`false`, "", 1},
		{`echo partial; exit 255`, "partial\n", 255},
	} {
		got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: tc.command})
		if got.Output != tc.want || got.ExitCode != tc.exit || got.Truncated || got.TimedOut {
			t.Errorf("%s: %+v, want output %q exit %d", tc.command, got, tc.want, tc.exit)
		}
	}
	got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: `echo out; echo err >&2`})
	if !strings.Contains(got.Output, "out\n") || !strings.Contains(got.Output, "err\n") || len(got.Output) != 8 {
		t.Errorf("stdout and stderr: output %q, want both", got.Output)
	}
}

// testExecEnv: a command gets the sandbox's env and the request's, and
// nothing of the Tether process's.
func (s *suite) testExecEnv(t *testing.T) {
	t.Parallel()
	_, e, res := s.execSandbox(t, map[string]string{"FROM_CREATE": "create value", "BOTH": "create"})
	got := s.run(t, e, res.SandboxID, provider.ExecRequest{
		Command: `printf '%s|%s|%s|%s' "$FROM_CREATE" "$FROM_EXEC" "$BOTH" "${` + envMarker + `:-unset}"`,
		Env:     map[string]string{"FROM_EXEC": "exec value", "BOTH": "exec"},
	})
	if want := "create value|exec value|exec|unset"; got.Output != want {
		t.Errorf("environment: %q, want %q (sandbox env, request env over it, none of the test process's)", got.Output, want)
	}
	got = s.run(t, e, res.SandboxID, provider.ExecRequest{Command: `printf '%s' "${FROM_EXEC:-unset}"; env | grep -c ` + envMarker})
	if got.Output != "unset0\n" {
		t.Errorf("a request's env outlived it, or the process's environment reached the sandbox: %q", got.Output)
	}
}

func (s *suite) testExecWorkDir(t *testing.T) {
	t.Parallel()
	_, e, res := s.execSandbox(t, nil)
	if res.WorkDir == "" {
		t.Fatal("a provider with exec reports no working directory in its resource")
	}
	if got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "pwd"}); got.Output != res.WorkDir+"\n" {
		t.Errorf("pwd = %q, want the resource's WorkDir %s", got.Output, res.WorkDir)
	}
	if got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "pwd", WorkDir: "/tmp"}); got.Output != "/tmp\n" {
		t.Errorf("pwd with WorkDir /tmp = %q", got.Output)
	}
}

// testExecTimeout: a command that outlives its timeout is killed, and the
// call returns soon after the timeout.
func (s *suite) testExecTimeout(t *testing.T) {
	t.Parallel()
	_, e, res := s.execSandbox(t, nil)
	const timeout = time.Second
	start := time.Now()
	got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "echo started; sleep 60; echo finished", Timeout: timeout})
	took := time.Since(start)
	if !got.TimedOut || got.ExitCode != 124 || !strings.Contains(got.Output, "started") || strings.Contains(got.Output, "finished") {
		t.Errorf("a command past its timeout: %+v, want timed out, exit 124, the output up to then", got)
	}
	if took < timeout || took > timeout+20*time.Second {
		t.Errorf("a %s timeout returned after %s", timeout, took)
	}
	if after := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "echo ok"}); after.Output != "ok\n" || after.TimedOut {
		t.Errorf("exec after a timeout: %+v", after)
	}
}

// testExecMaxOutput: output within MaxOutput is whole; longer output keeps
// its head and tail around a marker counting what was left out, all
// within MaxOutput.
func (s *suite) testExecMaxOutput(t *testing.T) {
	t.Parallel()
	_, e, res := s.execSandbox(t, nil)
	const limit = 1000
	exact := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: repeat('x', limit), MaxOutput: limit})
	if exact.Output != strings.Repeat("x", limit) || exact.Truncated {
		t.Errorf("output of exactly MaxOutput: %d bytes, truncated %v; want it whole", len(exact.Output), exact.Truncated)
	}
	const total = 100_000
	got := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: repeat('a', total/2) + "; " + repeat('b', total/2), MaxOutput: limit})
	checkCut(t, got.Output, got.Truncated, limit, total)
	if got.ExitCode != 0 || got.TimedOut {
		t.Errorf("a command with long output: %+v", got)
	}
}

// checkCut checks output cut from total bytes of a's then b's to limit.
func checkCut(t *testing.T, out string, truncated bool, limit, total int) {
	t.Helper()
	head := len(out) - len(strings.TrimLeft(out, "a"))
	tail := len(out) - len(strings.TrimRight(out, "b"))
	marker := out[head : len(out)-tail]
	omitted := strconv.Itoa(total - head - tail)
	if !truncated || len(out) > limit || head == 0 || tail == 0 || !strings.Contains(marker, omitted) {
		t.Errorf("%d bytes cut to %d: truncated %v, %d bytes: %d of the head, %d of the tail, marker %q (want it to say %s)",
			total, limit, truncated, len(out), head, tail, marker, omitted)
	}
}

func (s *suite) testExecUnknown(t *testing.T) {
	t.Parallel()
	p, e, res := s.execSandbox(t, nil)
	_, err := e.Exec(s.ctx(t), provider.NewSandboxID(), provider.ExecRequest{Command: "true", Timeout: time.Minute})
	wantCode(t, "Exec in a sandbox the provider never made", err, provider.CodeProviderUnavailable)
	if err := p.Destroy(s.ctx(t), res.SandboxID); err != nil {
		t.Fatal(err)
	}
	_, err = e.Exec(s.ctx(t), res.SandboxID, provider.ExecRequest{Command: "true", Timeout: time.Minute})
	wantCode(t, "Exec in a destroyed sandbox", err, provider.CodeProviderUnavailable)
}

// chunk is one call of an ExecStream's emit.
type chunk struct {
	stream string
	data   string
}

// recorder is an emit that records its calls and fails the test on calls
// that overlap or come after ExecStream returned.
type recorder struct {
	t        *testing.T
	mu       sync.Mutex
	chunks   []chunk
	inside   atomic.Int32
	returned atomic.Bool
	fail     error // returned from every call when set
}

func (r *recorder) emit(stream string, data []byte) error {
	if r.inside.Add(1) != 1 {
		r.t.Error("emit was called concurrently")
	}
	defer r.inside.Add(-1)
	if r.returned.Load() {
		r.t.Error("emit was called after ExecStream returned")
	}
	if stream != provider.Stdout && stream != provider.Stderr {
		r.t.Errorf("emit got stream %q", stream)
	}
	r.mu.Lock()
	r.chunks = append(r.chunks, chunk{stream, string(data)})
	r.mu.Unlock()
	return r.fail
}

// text returns what stream (or both, for "") carried, in order.
func (r *recorder) text(stream string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, c := range r.chunks {
		if stream == "" || c.stream == stream {
			b.WriteString(c.data)
		}
	}
	return b.String()
}

func (s *suite) testExecStream(t *testing.T) {
	skipWithout[provider.StreamExecer](t, s, "StreamExecer")
	skipWithout[provider.Execer](t, s, "Execer (the suite checks a stream's effects with it)")
	t.Parallel()
	t.Run("ChunksInOrder", s.testStreamOrder)
	t.Run("MaxOutput", s.testStreamMaxOutput)
	t.Run("EmitErrorKills", func(t *testing.T) { s.testStreamKill(t, false) })
	t.Run("CancelKills", func(t *testing.T) { s.testStreamKill(t, true) })
	t.Run("Binary", s.testStreamBinary)
}

// testStreamBinary: streamed output that is not text comes byte for byte.
func (s *suite) testStreamBinary(t *testing.T) {
	t.Parallel()
	se, _, res := s.streamSandbox(t)
	rec := &recorder{t: t}
	command, want := everyByte()
	_, err := se.ExecStream(s.ctx(t), res.SandboxID, provider.ExecRequest{Command: command, Timeout: s.h.Timeout, MaxOutput: 1 << 16}, rec.emit)
	rec.returned.Store(true)
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if got := rec.text(provider.Stdout); got != string(want) {
		t.Errorf("every byte value streamed as %d bytes, %q; want the 256 bytes as printed", len(got), got)
	}
}

func (s *suite) streamSandbox(t *testing.T) (provider.StreamExecer, provider.Execer, provider.Resource) {
	t.Helper()
	p, _ := s.open(t)
	se := capability[provider.StreamExecer](t, p, "StreamExecer")
	e := capability[provider.Execer](t, p, "Execer")
	return se, e, s.create(t, p, provider.CreateSpec{})
}

func (s *suite) testStreamOrder(t *testing.T) {
	t.Parallel()
	se, _, res := s.streamSandbox(t)
	rec := &recorder{t: t}
	got, err := se.ExecStream(s.ctx(t), res.SandboxID, provider.ExecRequest{
		Command:   `printf one; sleep 0.3; printf two >&2; sleep 0.3; printf three; exit 5`,
		Timeout:   s.h.Timeout,
		MaxOutput: 1 << 16,
	}, rec.emit)
	rec.returned.Store(true)
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if got.ExitCode != 5 || got.Output != "" || got.Truncated || got.TimedOut {
		t.Errorf("ExecStream result = %+v, want exit 5 and no output of its own", got)
	}
	if all, out, errs := rec.text(""), rec.text(provider.Stdout), rec.text(provider.Stderr); all != "onetwothree" || out != "onethree" || errs != "two" {
		t.Errorf("streamed %q (stdout %q, stderr %q), want onetwothree in order", all, out, errs)
	}
}

func (s *suite) testStreamMaxOutput(t *testing.T) {
	t.Parallel()
	se, _, res := s.streamSandbox(t)
	rec := &recorder{t: t}
	const limit, total = 1000, 100_000
	got, err := se.ExecStream(s.ctx(t), res.SandboxID, provider.ExecRequest{
		Command: repeat('a', total/2) + "; " + repeat('b', total/2), Timeout: s.h.Timeout, MaxOutput: limit,
	}, rec.emit)
	rec.returned.Store(true)
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	checkCut(t, rec.text(""), got.Truncated, limit, total)
}

// testStreamKill: a failing emit, or the end of the context, kills the
// command, and ExecStream returns at once with an error.
func (s *suite) testStreamKill(t *testing.T, byCancel bool) {
	t.Parallel()
	se, e, res := s.streamSandbox(t)
	ctx, cancel := context.WithCancel(s.ctx(t))
	defer cancel()
	rec := &recorder{t: t}
	emit := rec.emit
	if byCancel {
		emit = func(stream string, data []byte) error { cancel(); return rec.emit(stream, data) }
	} else {
		rec.fail = errors.New("the client went away")
	}
	start := time.Now()
	_, err := se.ExecStream(ctx, res.SandboxID, provider.ExecRequest{
		Command: `i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; echo tick; sleep 0.05; done`,
		Timeout: 30 * time.Second, MaxOutput: 1 << 16,
	}, emit)
	rec.returned.Store(true)
	if err == nil {
		t.Error("ExecStream returned no error after emit failed or the context ended")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("ExecStream took %s to return after emit failed or the context ended", took)
	}
	first := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "cat /tmp/ticks"})
	time.Sleep(500 * time.Millisecond)
	second := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "cat /tmp/ticks"})
	if first.Output != second.Output {
		t.Errorf("the command still runs after ExecStream returned: ticks %q then %q", first.Output, second.Output)
	}
}
