package providertest

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// The PTY contract: a process with a terminal of a size sees that size,
// and the new one after a resize; its output comes as terminal output;
// input is typed into it; a full-screen program runs.

func (s *suite) testPTY(t *testing.T) {
	skipWithout[provider.PTY](t, s, "PTY")
	skipWithout[provider.Processes](t, s, "Processes")
	if !s.probe.Info(s.ctx(t)).PTY {
		t.Skip("the provider implements PTY but its Info says it offers none")
	}
	t.Parallel()
	t.Run("Size", s.testPTYSize)
	t.Run("Resize", s.testPTYResize)
	t.Run("FullScreen", s.testPTYFullScreen)
	t.Run("Errors", s.testPTYErrors)
}

// ptySandbox makes a provider with terminals and a sandbox in it.
func (s *suite) ptySandbox(t *testing.T) (provider.Processes, provider.PTY, string) {
	t.Helper()
	_, pr, res, _ := s.procSandbox(t, nil)
	return pr, capability[provider.PTY](t, pr.(provider.Provider), "PTY"), res.SandboxID
}

// termEnv is the environment the suite gives its terminals' processes, as
// E2B's clients do.
var termEnv = map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8"}

// onlyPTYOutput fails t if an attach to a terminal's process got output
// of another kind.
func onlyPTYOutput(t *testing.T, events []provider.ProcessEvent) {
	t.Helper()
	for _, e := range events {
		if e.Kind == provider.ProcessStdout || e.Kind == provider.ProcessStderr {
			t.Errorf("a process with a terminal sent %s output: %q", e.Kind, e.Data)
			return
		}
	}
}

func (s *suite) testPTYSize(t *testing.T) {
	t.Parallel()
	pr, _, id := s.ptySandbox(t)
	info := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"stty", "size"}, Env: termEnv, PTY: &provider.PTYSize{Rows: 24, Cols: 80}})
	if info.PTY == nil || *info.PTY != (provider.PTYSize{Rows: 24, Cols: 80}) {
		t.Errorf("StartProcess with a terminal = %+v, want its size in PTY", info)
	}
	a := s.attach(t, pr, id, provider.ProcessSelector{PID: info.PID}, provider.AttachStart)
	if exit := endOf(t, a); exit.Code != 0 {
		t.Errorf("stty size ended %+v", exit)
	}
	events, _ := a.snapshot()
	onlyPTYOutput(t, events)
	if out := output(t, events); out != "24 80\r\n" {
		t.Errorf("stty size in a 24x80 terminal printed %q, want \"24 80\\r\\n\"", out)
	}
	tput := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sh", "-c", "command -v tput >/dev/null || exit 0; tput cols"},
		Env: termEnv, PTY: &provider.PTYSize{Rows: 24, Cols: 80}})
	a = s.attach(t, pr, id, provider.ProcessSelector{PID: tput.PID}, provider.AttachStart)
	endOf(t, a)
	events, _ = a.snapshot()
	if out := output(t, events); out != "" && out != "80\r\n" {
		t.Errorf("tput cols in a 24x80 terminal printed %q, want 80", out)
	}
}

// testPTYResize: a shell in a terminal sees the size change, and so does
// ListProcesses.
func (s *suite) testPTYResize(t *testing.T) {
	t.Parallel()
	pr, pty, id := s.ptySandbox(t)
	info := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sh"}, Env: termEnv, PTY: &provider.PTYSize{Rows: 24, Cols: 80}})
	sel := provider.ProcessSelector{PID: info.PID}
	a := s.attach(t, pr, id, sel, provider.AttachStart)
	s.writeStdin(t, pr, id, sel, "stty size\n")
	a.waitFor("24 80", procWait, hasOutput(t, "24 80"))
	if err := pty.ResizePTY(s.ctx(t), id, sel, provider.PTYSize{Rows: 30, Cols: 100}); err != nil {
		t.Fatalf("ResizePTY: %v", err)
	}
	s.writeStdin(t, pr, id, sel, "stty size\n")
	a.waitFor("30 100 after the resize", procWait, hasOutput(t, "30 100"))
	if got, _ := s.listed(t, pr, id, info.PID); got.PTY == nil || *got.PTY != (provider.PTYSize{Rows: 30, Cols: 100}) {
		t.Errorf("ListProcesses has the terminal at %+v after the resize, want 30x100", got.PTY)
	}
	s.writeStdin(t, pr, id, sel, "exit 0\n")
	if exit := endOf(t, a); exit.Code != 0 {
		t.Errorf("the shell ended %+v after exit 0", exit)
	}
	events, _ := a.snapshot()
	onlyPTYOutput(t, events)
}

// testPTYFullScreen: vi, where the sandbox has it, draws its screen,
// takes what is typed and writes the file; else a shell draws one with
// escape codes and echoes a line typed into it.
func (s *suite) testPTYFullScreen(t *testing.T) {
	t.Parallel()
	pr, _, id := s.ptySandbox(t)
	probe := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sh", "-c", "command -v vi || true"}})
	pa := s.attach(t, pr, id, provider.ProcessSelector{PID: probe.PID}, provider.AttachStart)
	endOf(t, pa)
	events, _ := pa.snapshot()
	size := &provider.PTYSize{Rows: 24, Cols: 80}
	if strings.TrimSpace(output(t, events)) == "" {
		t.Log("no vi in the sandbox: a shell draws the screen")
		info := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sh", "-c", `printf '\033[?1049h\033[2J\033[H'; i=1; while [ $i -le 3 ]; do printf '\033[%d;1Hrow %d' $i $i; i=$((i+1)); done; IFS= read -r line; printf '\033[10;5H[%s]\033[?1049l' "$line"`},
			Env: termEnv, PTY: size})
		sel := provider.ProcessSelector{PID: info.PID}
		a := s.attach(t, pr, id, sel, provider.AttachStart)
		a.waitFor("the drawn screen", procWait, hasOutput(t, "\x1b[3;1Hrow 3"))
		s.writeStdin(t, pr, id, sel, "typed\r")
		a.waitFor("the typed line drawn", procWait, hasOutput(t, "[typed]"))
		if exit := endOf(t, a); exit.Code != 0 {
			t.Errorf("the drawing shell ended %+v", exit)
		}
		return
	}
	file := "/tmp/providertest-vi-" + provider.NewSandboxID() + ".txt"
	info := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"vi", file}, Env: termEnv, PTY: size})
	sel := provider.ProcessSelector{PID: info.PID}
	a := s.attach(t, pr, id, sel, provider.AttachStart)
	a.waitFor("vi's screen", procWait, func(e []provider.ProcessEvent) bool {
		out := output(t, e)
		return strings.Contains(out, "\x1b[") && strings.Contains(out, "~")
	})
	s.writeStdin(t, pr, id, sel, "ihello from vi\x1b")
	a.waitFor("the typed text on vi's screen", procWait, hasOutput(t, "hello from vi"))
	s.writeStdin(t, pr, id, sel, ":wq\r")
	if exit := endOf(t, a); exit.Code != 0 {
		t.Errorf("vi ended %+v after :wq", exit)
	}
	cat := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"cat", file}})
	ca := s.attach(t, pr, id, provider.ProcessSelector{PID: cat.PID}, provider.AttachStart)
	endOf(t, ca)
	if events, _ := ca.snapshot(); output(t, events) != "hello from vi\n" {
		t.Errorf("the file vi wrote holds %q, want what was typed", output(t, events))
	}
}

func (s *suite) testPTYErrors(t *testing.T) {
	t.Parallel()
	pr, pty, id := s.ptySandbox(t)
	plain := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sleep", "30"}, Stdin: true})
	wantCode(t, "ResizePTY of a process without a terminal",
		pty.ResizePTY(s.ctx(t), id, provider.ProcessSelector{PID: plain.PID}, provider.PTYSize{Rows: 10, Cols: 10}), provider.CodeInvalidRequest)
	term := s.start(t, pr, id, provider.ProcessSpec{Argv: []string{"sleep", "30"}, PTY: &provider.PTYSize{Rows: 24, Cols: 80}})
	sel := provider.ProcessSelector{PID: term.PID}
	wantCode(t, "ResizePTY to 0x0", pty.ResizePTY(s.ctx(t), id, sel, provider.PTYSize{}), provider.CodeInvalidRequest)
	wantCode(t, "CloseStdin of a terminal's process", pr.CloseStdin(s.ctx(t), id, sel), provider.CodeInvalidRequest)
	wantCode(t, "ResizePTY of no process",
		pty.ResizePTY(s.ctx(t), id, provider.ProcessSelector{PID: 999_999}, provider.PTYSize{Rows: 10, Cols: 10}), provider.CodeProcessNotFound)
	_, err := pr.StartProcess(s.ctx(t), id, provider.ProcessSpec{Argv: []string{"sleep", "1"}, PTY: &provider.PTYSize{Rows: 0, Cols: 80}})
	wantCode(t, "StartProcess with a 0-row terminal", err, provider.CodeInvalidRequest)
	if err := pr.SignalProcess(s.ctx(t), id, sel, 9); err != nil {
		t.Fatal(err)
	}
	endOf(t, s.attach(t, pr, id, sel, provider.AttachNow))
	wantCode(t, "ResizePTY of an ended process",
		pty.ResizePTY(s.ctx(t), id, sel, provider.PTYSize{Rows: 10, Cols: 10}), provider.CodeProcessNotFound)
}
