package providertest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The Processes contract: a background process answers with its pid at
// once; it is listed with the spec it was started with; attaches (several
// at once) get its output from now or from the start of the kept window,
// in order and at the right offsets, and its end; stdin, signals and exit
// codes; what fell out of the window is said; the limit per sandbox; a
// restarted provider finds it; it ends with the sandbox.
//
// The commands are few and simple (sleep, cat, env, sh -c 'exit N'), so
// that a simulated provider can run them too.

// procWait bounds the suite's waits for a process's output or end.
const procWait = 30 * time.Second

func (s *suite) testProcesses(t *testing.T) {
	skipWithout[provider.Processes](t, s, "Processes")
	if !s.probe.Info(s.ctx(t)).Processes {
		t.Skip("the provider implements Processes but its Info says it offers none")
	}
	t.Parallel()
	t.Run("StartAndList", s.testProcStartList)
	t.Run("AttachFromStartAndNow", s.testProcAttach)
	t.Run("EndedStillAnswers", s.testProcEnded)
	t.Run("Stdin", s.testProcStdin)
	t.Run("Signal", s.testProcSignal)
	t.Run("ExitCode", s.testProcExitCode)
	t.Run("Timeout", s.testProcTimeout)
	t.Run("Environment", s.testProcEnv)
	t.Run("EmitError", s.testProcEmitError)
	t.Run("Dropped", s.testProcDropped)
	t.Run("Limit", s.testProcLimit)
	t.Run("Unknown", s.testProcUnknown)
	t.Run("AfterRestart", s.testProcRestart)
	t.Run("EndWithSandbox", s.testProcEndWithSandbox)
}

// procSandbox makes a provider with processes and a sandbox in it.
func (s *suite) procSandbox(t *testing.T, env map[string]string) (provider.Provider, provider.Processes, provider.Resource, string) {
	t.Helper()
	p, state := s.open(t)
	pr := capability[provider.Processes](t, p, "Processes")
	return p, pr, s.create(t, p, provider.CreateSpec{Env: env}), state
}

func (s *suite) start(t *testing.T, pr provider.Processes, id string, spec provider.ProcessSpec) provider.ProcessInfo {
	t.Helper()
	info, err := pr.StartProcess(s.ctx(t), id, spec)
	if err != nil {
		t.Fatalf("StartProcess(%q): %v", spec.Argv, err)
	}
	if info.PID <= 0 {
		t.Fatalf("StartProcess(%q) = %+v: no pid", spec.Argv, info)
	}
	return info
}

// attach attaches to the process sel on a goroutine of its own.
func (s *suite) attach(t *testing.T, pr provider.Processes, id string, sel provider.ProcessSelector, from provider.AttachFrom) *stream[provider.ProcessEvent] {
	t.Helper()
	return startStream(t, s.ctx(t), nil, func(ctx context.Context, emit func(provider.ProcessEvent) error) error {
		return pr.AttachProcess(ctx, id, sel, from, emit)
	})
}

// output is what the events carry of the process's output, checking that
// each chunk starts where the one before ended (or where a dropped event
// says output resumes) and that the first event is the start.
func output(t *testing.T, events []provider.ProcessEvent) string {
	t.Helper()
	var b strings.Builder
	next := int64(-1)
	for i, e := range events {
		switch {
		case i == 0 && e.Kind != provider.ProcessStart:
			t.Errorf("the first event of an attach is %q, want start", e.Kind)
		case e.Kind == provider.ProcessDropped:
			next = e.Offset
		case e.Kind == provider.ProcessStdout || e.Kind == provider.ProcessStderr || e.Kind == provider.ProcessPTYOutput:
			if next >= 0 && e.Offset != next {
				t.Errorf("a chunk at offset %d follows one that ended at %d", e.Offset, next)
			}
			next = e.Offset + int64(len(e.Data))
			b.Write(e.Data)
		}
	}
	return b.String()
}

// hasOutput is a waitFor condition: the output holds want.
func hasOutput(t *testing.T, want string) func([]provider.ProcessEvent) bool {
	return func(events []provider.ProcessEvent) bool { return strings.Contains(output(t, events), want) }
}

// ended is a waitFor condition: the end event came.
func ended(events []provider.ProcessEvent) bool {
	return len(events) > 0 && events[len(events)-1].Kind == provider.ProcessEnd
}

// endOf waits for the attach's end event and its nil return, and returns
// the exit.
func endOf(t *testing.T, a *stream[provider.ProcessEvent]) provider.ProcessExit {
	t.Helper()
	events := a.waitFor("end event", procWait, ended)
	if err := a.wait(procWait); err != nil {
		t.Errorf("AttachProcess returned %v after the end event, want nil", err)
	}
	exit := events[len(events)-1].Exit
	if exit == nil {
		t.Fatal("an end event without Exit")
	}
	return *exit
}

// listed returns the process pid as ListProcesses has it.
func (s *suite) listed(t *testing.T, pr provider.Processes, id string, pid int) (provider.ProcessInfo, bool) {
	t.Helper()
	all, err := pr.ListProcesses(s.ctx(t), id)
	if err != nil {
		t.Fatalf("ListProcesses: %v", err)
	}
	for _, p := range all {
		if p.PID == pid {
			return p, true
		}
	}
	return provider.ProcessInfo{}, false
}

// waitKept waits, a bounded while, until the process's output came to
// total bytes (kept and dropped), and returns the process as listed then.
func (s *suite) waitKept(t *testing.T, pr provider.Processes, id string, pid int, total int64) provider.ProcessInfo {
	t.Helper()
	deadline := time.Now().Add(procWait)
	for {
		got, _ := s.listed(t, pr, id, pid)
		if got.Kept+got.Dropped >= total || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testProcStartList: a start answers at once with a running process,
// listed with its spec; an attach by tag finds it, and ending the attach
// leaves it running.
func (s *suite) testProcStartList(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	spec := provider.ProcessSpec{Argv: []string{"sleep", "30"}, Env: map[string]string{"PROVIDERTEST": "list"}, Cwd: "/tmp", Tag: "sleeper"}
	begun := time.Now()
	info := s.start(t, pr, res.SandboxID, spec)
	if took := time.Since(begun); took > 10*time.Second {
		t.Errorf("StartProcess of sleep 30 took %s: it must not wait for the process", took)
	}
	if !info.Running || info.Exit != nil || !slices.Equal(info.Argv, spec.Argv) || info.Tag != spec.Tag || info.StartedAt.IsZero() {
		t.Errorf("StartProcess = %+v, want it running with its spec", info)
	}
	got, ok := s.listed(t, pr, res.SandboxID, info.PID)
	if !ok || !got.Running || !slices.Equal(got.Argv, spec.Argv) || !maps.Equal(got.Env, spec.Env) || got.Cwd != spec.Cwd ||
		got.Tag != spec.Tag || got.Stdin || got.PTY != nil {
		t.Errorf("ListProcesses has %+v (listed %v), want it running with the spec %+v", got, ok, spec)
	}
	a := s.attach(t, pr, res.SandboxID, provider.ProcessSelector{Tag: "sleeper"}, provider.AttachNow)
	events := a.waitFor("start event", procWait, func(e []provider.ProcessEvent) bool { return len(e) > 0 })
	if events[0].Kind != provider.ProcessStart || events[0].PID != info.PID {
		t.Errorf("the first event of an attach by tag = %+v, want start with pid %d", events[0], info.PID)
	}
	a.stop()
	if err := a.wait(10 * time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("AttachProcess after its context ended returned %v, want context.Canceled", err)
	}
	if got, ok := s.listed(t, pr, res.SandboxID, info.PID); !ok || !got.Running {
		t.Errorf("the process after its attach ended: %+v (listed %v), want it running", got, ok)
	}
}

// testProcAttach: with cat echoing stdin, an attach from the start gets
// what was written before it, one from now only what came after, both at
// once, and both the end.
func (s *suite) testProcAttach(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	id := res.SandboxID
	info := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	sel := provider.ProcessSelector{PID: info.PID}
	s.writeStdin(t, pr, id, sel, "one\n")
	s.waitKept(t, pr, id, info.PID, 4) // in the window before the attach
	fromStart := s.attach(t, pr, id, sel, provider.AttachStart)
	fromStart.waitFor(`"one"`, procWait, hasOutput(t, "one\n"))
	fromNow := s.attach(t, pr, id, sel, provider.AttachNow)
	fromNow.waitFor("start event", procWait, func(e []provider.ProcessEvent) bool { return len(e) > 0 })
	s.writeStdin(t, pr, id, sel, "two\n")
	fromNow.waitFor(`"two"`, procWait, hasOutput(t, "two\n"))
	fromStart.waitFor(`"two"`, procWait, hasOutput(t, "one\ntwo\n"))
	if err := pr.CloseStdin(s.ctx(t), id, sel); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	for name, a := range map[string]*stream[provider.ProcessEvent]{"from the start": fromStart, "from now": fromNow} {
		if exit := endOf(t, a); exit.Code != 0 || !exit.Exited || exit.Signal != 0 {
			t.Errorf("cat's end, attached %s: %+v, want exit 0", name, exit)
		}
	}
	events, _ := fromNow.snapshot()
	if got := output(t, events); got != "two\n" {
		t.Errorf("attached from now: output %q, want only what came after, %q", got, "two\n")
	}
	for _, e := range events {
		if e.Kind == provider.ProcessStdout && e.Offset != 4 {
			t.Errorf("attached from now, the output's offset is %d, want 4 (after \"one\\n\")", e.Offset)
		}
	}
	events, _ = fromStart.snapshot()
	if got := output(t, events); got != "one\ntwo\n" {
		t.Errorf("attached from the start: output %q, want %q", got, "one\ntwo\n")
	}
}

func (s *suite) writeStdin(t *testing.T, pr provider.Processes, id string, sel provider.ProcessSelector, data string) {
	t.Helper()
	if err := pr.WriteStdin(s.ctx(t), id, sel, []byte(data)); err != nil {
		t.Fatalf("WriteStdin(%q): %v", data, err)
	}
}

// testProcEnded: a process that ended is still listed, with its exit,
// and an attach to it gets its start, its output and its end at once.
func (s *suite) testProcEnded(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	sel := provider.ProcessSelector{PID: info.PID}
	s.writeStdin(t, pr, res.SandboxID, sel, "kept\n")
	if err := pr.CloseStdin(s.ctx(t), res.SandboxID, sel); err != nil {
		t.Fatal(err)
	}
	endOf(t, s.attach(t, pr, res.SandboxID, sel, provider.AttachNow))
	got, ok := s.listed(t, pr, res.SandboxID, info.PID)
	if !ok || got.Running || got.Exit == nil || got.Exit.Code != 0 || got.Kept != 5 || got.Dropped != 0 {
		t.Errorf("an ended process in ListProcesses: %+v (listed %v), want it ended, exit 0, 5 bytes kept", got, ok)
	}
	for _, from := range []provider.AttachFrom{provider.AttachStart, provider.AttachNow} {
		late := s.attach(t, pr, res.SandboxID, sel, from)
		if exit := endOf(t, late); exit.Code != 0 || !exit.Exited {
			t.Errorf("a late attach's end: %+v", exit)
		}
		events, _ := late.snapshot()
		want := map[provider.AttachFrom]string{provider.AttachStart: "kept\n", provider.AttachNow: ""}[from]
		if out := output(t, events); out != want {
			t.Errorf("a late attach (from %d): output %q, want %q", from, out, want)
		}
	}
}

// testProcStdin: what stdin and terminal writes may not do.
func (s *suite) testProcStdin(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	id := res.SandboxID
	noStdin := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sleep", "30"}})
	sel := provider.ProcessSelector{PID: noStdin.PID}
	wantCode(t, "WriteStdin to a process started without stdin", pr.WriteStdin(s.ctx(t), id, sel, []byte("x")), provider.CodeInvalidRequest)
	wantCode(t, "CloseStdin of a process started without stdin", pr.CloseStdin(s.ctx(t), id, sel), provider.CodeInvalidRequest)
	withStdin := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sleep", "30"}, Stdin: true})
	sel = provider.ProcessSelector{PID: withStdin.PID}
	for i := range 2 {
		if err := pr.CloseStdin(s.ctx(t), id, sel); err != nil {
			t.Errorf("CloseStdin #%d: %v", i+1, err)
		}
	}
	wantCode(t, "WriteStdin after CloseStdin", pr.WriteStdin(s.ctx(t), id, sel, []byte("x")), provider.CodeInvalidRequest)
	if err := pr.SignalProcess(s.ctx(t), id, sel, 9); err != nil {
		t.Fatal(err)
	}
	endOf(t, s.attach(t, pr, id, sel, provider.AttachNow))
	wantCode(t, "WriteStdin to an ended process", pr.WriteStdin(s.ctx(t), id, sel, []byte("x")), provider.CodeProcessNotFound)
	wantCode(t, "CloseStdin of an ended process", pr.CloseStdin(s.ctx(t), id, sel), provider.CodeProcessNotFound)
}

// testProcSignal: SIGTERM ends sleep, and the end says it was signalled;
// signals out of range are refused, and one for an ended process finds
// none.
func (s *suite) testProcSignal(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "30"}})
	sel := provider.ProcessSelector{PID: info.PID}
	a := s.attach(t, pr, res.SandboxID, sel, provider.AttachNow)
	a.waitFor("start event", procWait, func(e []provider.ProcessEvent) bool { return len(e) > 0 })
	for _, bad := range []int{0, -1, 65} {
		wantCode(t, "SignalProcess with a signal out of range", pr.SignalProcess(s.ctx(t), res.SandboxID, sel, bad), provider.CodeInvalidRequest)
	}
	begun := time.Now()
	if err := pr.SignalProcess(s.ctx(t), res.SandboxID, sel, 15); err != nil {
		t.Fatalf("SignalProcess(SIGTERM): %v", err)
	}
	exit := endOf(t, a)
	if exit.Exited || exit.Signal != 15 || exit.Code != -1 || exit.Status == "" {
		t.Errorf("sleep's end after SIGTERM: %+v, want signalled by 15, code -1, a status", exit)
	}
	if took := time.Since(begun); took > 10*time.Second {
		t.Errorf("sleep ended %s after SIGTERM", took)
	}
	wantCode(t, "SignalProcess of an ended process", pr.SignalProcess(s.ctx(t), res.SandboxID, sel, 15), provider.CodeProcessNotFound)
}

func (s *suite) testProcExitCode(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sh", "-c", "exit 3"}})
	exit := endOf(t, s.attach(t, pr, res.SandboxID, provider.ProcessSelector{PID: info.PID}, provider.AttachStart))
	if exit.Code != 3 || !exit.Exited || exit.Signal != 0 || exit.Status == "" {
		t.Errorf("sh -c 'exit 3' ended %+v, want exited with 3", exit)
	}
	got, ok := s.listed(t, pr, res.SandboxID, info.PID)
	if !ok || got.Running || got.Exit == nil || got.Exit.Code != 3 {
		t.Errorf("ListProcesses has %+v (listed %v), want it ended with 3", got, ok)
	}
}

// testProcTimeout: a process past its timeout is killed.
func (s *suite) testProcTimeout(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	begun := time.Now()
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
	exit := endOf(t, s.attach(t, pr, res.SandboxID, provider.ProcessSelector{PID: info.PID}, provider.AttachStart))
	if exit.Exited || exit.Signal != 9 {
		t.Errorf("sleep 30 past a 500ms timeout ended %+v, want killed (9)", exit)
	}
	if took := time.Since(begun); took < 500*time.Millisecond || took > 15*time.Second {
		t.Errorf("a 500ms timeout ended the process after %s", took)
	}
}

// testProcEnv: a process gets the sandbox's env and its own, never the
// test process's, and one process's env does not reach the next.
func (s *suite) testProcEnv(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, map[string]string{"FROM_CREATE": "create value", "BOTH": "create"})
	env := func(spec map[string]string) string {
		info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"env"}, Env: spec})
		a := s.attach(t, pr, res.SandboxID, provider.ProcessSelector{PID: info.PID}, provider.AttachStart)
		endOf(t, a)
		events, _ := a.snapshot()
		return output(t, events)
	}
	got := env(map[string]string{"FROM_PROCESS": "process value", "BOTH": "process"})
	for _, want := range []string{"FROM_CREATE=create value\n", "FROM_PROCESS=process value\n", "BOTH=process\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("a process's env lacks %q: %q", want, got)
		}
	}
	if strings.Contains(got, envMarker) {
		t.Errorf("the test process's environment reached a process in the sandbox: %q", got)
	}
	if again := env(nil); strings.Contains(again, "FROM_PROCESS") || !strings.Contains(again, "BOTH=create\n") {
		t.Errorf("a process's env after another's: %q, want the sandbox's only", again)
	}
}

// testProcEmitError: an attach whose emit fails returns that error at
// once; the process runs on.
func (s *suite) testProcEmitError(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "30"}})
	gone := errors.New("the client went away")
	a := startStream(t, s.ctx(t), func(provider.ProcessEvent) error { return gone },
		func(ctx context.Context, emit func(provider.ProcessEvent) error) error {
			return pr.AttachProcess(ctx, res.SandboxID, provider.ProcessSelector{PID: info.PID}, provider.AttachNow, emit)
		})
	if err := a.wait(10 * time.Second); !errors.Is(err, gone) {
		t.Errorf("AttachProcess whose emit failed returned %v, want emit's error", err)
	}
	if got, ok := s.listed(t, pr, res.SandboxID, info.PID); !ok || !got.Running {
		t.Errorf("the process after a failed attach: %+v (listed %v), want it running", got, ok)
	}
}

// testProcDropped: output past the window falls out of it, and says so.
func (s *suite) testProcDropped(t *testing.T) {
	window := s.h.ProcessOutput
	if window <= 0 {
		t.Skip("no Harness.ProcessOutput: the test does not know the window")
	}
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	sel := provider.ProcessSelector{PID: info.PID}
	total := 3*window + 100
	body := append(bytes.Repeat([]byte("a"), int(total-100)), bytes.Repeat([]byte("z"), 100)...)
	if err := pr.WriteStdin(s.ctx(t), res.SandboxID, sel, body); err != nil {
		t.Fatalf("WriteStdin of %d bytes: %v", len(body), err)
	}
	got := s.waitKept(t, pr, res.SandboxID, info.PID, total)
	if got.Kept+got.Dropped != total || got.Kept > window || got.Kept == 0 || got.Dropped < total-window {
		t.Fatalf("after %d bytes of output with a window of %d: kept %d, dropped %d", total, window, got.Kept, got.Dropped)
	}
	a := s.attach(t, pr, res.SandboxID, sel, provider.AttachStart)
	events := a.waitFor("the last bytes", procWait, hasOutput(t, strings.Repeat("z", 100)))
	if len(events) < 2 || events[1].Kind != provider.ProcessDropped || events[1].Dropped != got.Dropped || events[1].Offset != got.Dropped {
		t.Errorf("an attach from the start after the window overflowed: %s; want the second event to say %d bytes were dropped up to offset %d",
			summary(events[:min(2, len(events))]), got.Dropped, got.Dropped)
	}
	if out := output(t, events); int64(len(out)) != got.Kept || !strings.HasSuffix(out, "z") {
		t.Errorf("an attach from the start got %d bytes, want the %d kept", len(out), got.Kept)
	}
	if err := pr.CloseStdin(s.ctx(t), res.SandboxID, sel); err != nil {
		t.Fatal(err)
	}
	endOf(t, a)
}

// testProcLimit: a sandbox keeps at most ProcessLimit processes; once one
// ended there is room again.
func (s *suite) testProcLimit(t *testing.T) {
	limit := s.h.ProcessLimit
	if limit <= 0 {
		t.Skip("no Harness.ProcessLimit: the test does not know the limit")
	}
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	var first provider.ProcessInfo
	for i := range limit {
		info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "60"}})
		if i == 0 {
			first = info
		}
	}
	_, err := pr.StartProcess(s.ctx(t), res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "60"}})
	wantCode(t, "a start past the limit", err, provider.CodeQuotaExceeded)
	sel := provider.ProcessSelector{PID: first.PID}
	if err := pr.SignalProcess(s.ctx(t), res.SandboxID, sel, 9); err != nil {
		t.Fatal(err)
	}
	endOf(t, s.attach(t, pr, res.SandboxID, sel, provider.AttachNow))
	s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "60"}})
}

// testProcUnknown: a selector of no process, a malformed one, and a
// sandbox the provider never made.
func (s *suite) testProcUnknown(t *testing.T) {
	t.Parallel()
	_, pr, res, _ := s.procSandbox(t, nil)
	id := res.SandboxID
	for _, sel := range []provider.ProcessSelector{{PID: 999_999}, {Tag: "no-such-tag"}} {
		err := pr.AttachProcess(s.ctx(t), id, sel, provider.AttachNow, func(provider.ProcessEvent) error { return nil })
		wantCode(t, "AttachProcess of no process", err, provider.CodeProcessNotFound)
		wantCode(t, "WriteStdin of no process", pr.WriteStdin(s.ctx(t), id, sel, []byte("x")), provider.CodeProcessNotFound)
		wantCode(t, "CloseStdin of no process", pr.CloseStdin(s.ctx(t), id, sel), provider.CodeProcessNotFound)
		wantCode(t, "SignalProcess of no process", pr.SignalProcess(s.ctx(t), id, sel, 15), provider.CodeProcessNotFound)
	}
	wantCode(t, "WriteStdin without a pid or a tag", pr.WriteStdin(s.ctx(t), id, provider.ProcessSelector{}, []byte("x")), provider.CodeInvalidRequest)
	_, err := pr.StartProcess(s.ctx(t), id, provider.ProcessSpec{})
	wantCode(t, "StartProcess without argv", err, provider.CodeInvalidRequest)
	other := provider.NewSandboxID()
	_, err = pr.StartProcess(s.ctx(t), other, provider.ProcessSpec{Argv: []string{"sleep", "1"}})
	wantCode(t, "StartProcess in a sandbox the provider never made", err, provider.CodeProviderUnavailable)
	_, err = pr.ListProcesses(s.ctx(t), other)
	wantCode(t, "ListProcesses of a sandbox the provider never made", err, provider.CodeProviderUnavailable)
}

// testProcRestart: a provider over the same state (a restarted Tether)
// lists a running process and attaches to it, its output from before the
// restart included.
func (s *suite) testProcRestart(t *testing.T) {
	t.Parallel()
	_, pr, res, state := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"cat"}, Stdin: true, Tag: "survivor"})
	s.writeStdin(t, pr, res.SandboxID, provider.ProcessSelector{PID: info.PID}, "before\n")
	restarted := capability[provider.Processes](t, s.h.Open(t, state), "Processes")
	got, ok := s.listed(t, restarted, res.SandboxID, info.PID)
	if !ok || !got.Running || got.Tag != "survivor" {
		t.Fatalf("the restarted provider lists %+v (listed %v), want the running process", got, ok)
	}
	sel := provider.ProcessSelector{Tag: "survivor"}
	a := s.attach(t, restarted, res.SandboxID, sel, provider.AttachStart)
	a.waitFor(`"before"`, procWait, hasOutput(t, "before\n"))
	s.writeStdin(t, restarted, res.SandboxID, sel, "after\n")
	a.waitFor(`"after"`, procWait, hasOutput(t, "before\nafter\n"))
	if err := restarted.CloseStdin(s.ctx(t), res.SandboxID, sel); err != nil {
		t.Fatal(err)
	}
	if exit := endOf(t, a); exit.Code != 0 {
		t.Errorf("cat's end through the restarted provider: %+v", exit)
	}
}

// testProcEndWithSandbox: destroying the sandbox ends its processes: an
// attach returns, and the sandbox's processes are no more.
func (s *suite) testProcEndWithSandbox(t *testing.T) {
	t.Parallel()
	p, pr, res, _ := s.procSandbox(t, nil)
	info := s.start(t, pr, res.SandboxID, provider.ProcessSpec{Argv: []string{"sleep", "300"}})
	a := s.attach(t, pr, res.SandboxID, provider.ProcessSelector{PID: info.PID}, provider.AttachNow)
	a.waitFor("start event", procWait, func(e []provider.ProcessEvent) bool { return len(e) > 0 })
	if err := p.Destroy(s.ctx(t), res.SandboxID); err != nil {
		t.Fatal(err)
	}
	err := a.wait(20 * time.Second)
	if events, _ := a.snapshot(); !ended(events) {
		wantCode(t, "an attach whose sandbox was destroyed", err, provider.CodeProviderUnavailable)
	}
	_, err = pr.ListProcesses(s.ctx(t), res.SandboxID)
	wantCode(t, "ListProcesses of a destroyed sandbox", err, provider.CodeProviderUnavailable)
}
