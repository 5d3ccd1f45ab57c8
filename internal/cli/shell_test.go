package cli_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/cli"
)

// tmuxTerm is a command run in a real terminal: a detached tmux session
// on a server of the test's own (its own socket and configuration), typed
// into with send-keys and read with capture-pane.
type tmuxTerm struct {
	t      *testing.T
	tmux   string
	sock   string
	env    []string // the tmux server's, so its session's
	status string   // the file the command's exit status goes to
}

// inTmux runs `tether ARGS...` against s in a detached 100x30 tmux
// session. When it ends, its exit status and then `stty -a` of the
// terminal it leaves are written to files (exited reads them). Without
// tmux the test is skipped.
func inTmux(t *testing.T, s *server, args ...string) *tmuxTerm {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed (apt-get install tmux): tether sandboxes shell is tested in a real terminal, a tmux session")
	}
	dir := t.TempDir()
	tm := &tmuxTerm{t: t, tmux: bin, sock: filepath.Join(dir, "tmux.sock"), status: filepath.Join(dir, "status"),
		env: []string{"PATH=" + os.Getenv("PATH"), "TERM=xterm-256color", "HOME=" + dir, "TETHER_URL=" + s.base, "TETHER_API_KEY=" + s.key}}
	// No status line; a pane whose command ended stays, to be read.
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g remain-on-exit on\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The session's command runs with the tmux server's environment:
	// the one it is started with here.
	script := `bin=$1 status=$2; shift 2; "$bin" "$@"; code=$?; stty -a >"$status.stty"; echo "$code" >"$status.tmp"; mv "$status.tmp" "$status"`
	tm.run(append([]string{"-f", conf, "new-session", "-d", "-s", "t", "-x", "100", "-y", "30",
		"sh", "-c", script, "sh", s.bin, tm.status}, args...)...)
	t.Cleanup(func() { _ = exec.Command(tm.tmux, "-S", tm.sock, "kill-server").Run() }) //nolint:noctx // a cleanup
	return tm
}

// run runs a tmux command on the test's server.
func (tm *tmuxTerm) run(args ...string) string {
	tm.t.Helper()
	cmd := exec.CommandContext(tm.t.Context(), tm.tmux, append([]string{"-S", tm.sock}, args...)...)
	cmd.Env = tm.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// typeLine types line and Enter.
func (tm *tmuxTerm) typeLine(line string) {
	tm.t.Helper()
	tm.run("send-keys", "-t", "t", "-l", line)
	tm.run("send-keys", "-t", "t", "Enter")
}

// screen is what the terminal shows.
func (tm *tmuxTerm) screen() string {
	tm.t.Helper()
	return tm.run("capture-pane", "-p", "-t", "t")
}

// waitFor waits until the screen shows want; each second it types again
// (when again is not empty), for a screen that depends on a change on its
// way (a resize).
func (tm *tmuxTerm) waitFor(want, again string) {
	tm.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for tick := 0; !strings.Contains(tm.screen(), want); tick++ {
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal does not show %q:\n%s", want, tm.screen())
		}
		if again != "" && tick%10 == 9 {
			tm.typeLine(again)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// size is the pane's size as stty prints it: "ROWS COLS".
func (tm *tmuxTerm) size() string {
	tm.t.Helper()
	return strings.TrimSpace(tm.run("display-message", "-p", "-t", "t", "#{pane_height} #{pane_width}"))
}

// exited waits for the command's end and returns its exit status and
// the terminal's settings after it.
func (tm *tmuxTerm) exited() (int, string) {
	tm.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(tm.status)
		if err == nil {
			code, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				tm.t.Fatalf("exit status %q", data)
			}
			stty, _ := os.ReadFile(tm.status + ".stty")
			return code, string(stty)
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("tether did not exit; the terminal shows:\n%s", tm.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestShellInATerminal runs `tether sandboxes shell ID` (the tether
// binary, which runs tetherctl's) in a real terminal, a tmux session: what
// is typed runs in the sandbox's shell and its output shows; the shell's
// terminal has the local one's size, and follows its resize; `exit 3`
// ends it, tether exits 3 and the local terminal is back out of raw mode.
// A command after -- runs instead of the shell, on a terminal, and a
// signal's end is 128+N. Without a terminal it refuses.
func TestShellInATerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (apt-get install tmux): tether sandboxes shell is tested in a real terminal, a tmux session")
	}
	s, id := localSandbox(t)

	t.Run("Shell", func(t *testing.T) {
		t.Parallel()
		tm := inTmux(t, s, "sandboxes", "shell", id)
		tm.typeLine("echo hello-$((6*7))")
		tm.waitFor("hello-42", "")
		// The size it started with: the pane's.
		size := tm.size()
		tm.typeLine("clear; stty size")
		tm.waitFor(size, "")
		// A bigger window: SIGWINCH, and the resize reaches the shell's terminal.
		tm.run("resize-window", "-t", "t", "-x", "120", "-y", "40")
		resized := tm.size()
		if resized == size {
			t.Fatalf("the pane is %s after the resize too", size)
		}
		tm.typeLine("clear; stty size")
		tm.waitFor(resized, "clear; stty size")
		tm.typeLine("exit 3")
		code, stty := tm.exited()
		if code != 3 {
			t.Errorf("tether exited %d after the shell's exit 3", code)
		}
		// Raw mode is over: the line discipline echoes and edits again.
		for _, want := range []string{" icanon ", " echo ", " isig "} {
			if !strings.Contains(" "+strings.Join(strings.Fields(stty), " ")+" ", want) {
				t.Errorf("after tether the terminal lacks %q (still raw?):\n%s", want, stty)
			}
		}
	})

	// A command after -- runs as it is, on a terminal (test -t); a signal
	// that ends it makes tether exit 128+N, as a shell reports it.
	t.Run("Command", func(t *testing.T) {
		t.Parallel()
		tm := inTmux(t, s, "sandboxes", "shell", id, "--", "sh", "-c", `test -t 0 && echo "on $(tty)"; read -r line; echo "got $line"; kill -TERM $$`)
		tm.waitFor("on /dev/pts/", "")
		tm.typeLine("typed")
		tm.waitFor("got typed", "")
		if code, _ := tm.exited(); code != 128+15 {
			t.Errorf("tether exited %d after SIGTERM ended the command, want 143", code)
		}
	})

	// The local terminal going away (tmux's server killed: the pty hangs
	// up, tether gets SIGHUP) hangs the sandbox's program up too: no
	// process is left behind.
	t.Run("HangUp", func(t *testing.T) {
		t.Parallel()
		tm := inTmux(t, s, "sandboxes", "shell", id, "--", "sh", "-c", "echo hang-up-test; exec sleep 600")
		tm.waitFor("hang-up-test", "")
		var pid float64
		for _, it := range processList(t, s, id) {
			if p := it.(map[string]any); p["running"] == true && strings.Contains(fmt.Sprint(p["argv"]), "hang-up-test") {
				pid = p["pid"].(float64)
			}
		}
		if pid == 0 {
			t.Fatalf("no running process of the shell: %v", processList(t, s, id))
		}
		tm.run("kill-server")
		code, p := s.do(t, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/processes/%d?wait=20s", id, int(pid)), "")
		if exit, _ := p["exit"].(map[string]any); code != http.StatusOK || exit == nil || exit["signal"] != float64(1) {
			t.Errorf("the program after its terminal went away: %d %v; want it ended by SIGHUP", code, p)
		}
	})

	// Without a terminal it refuses, and starts nothing.
	t.Run("NotATerminal", func(t *testing.T) {
		t.Parallel()
		_, stderr, status := tetherBin(t, s, []byte("echo hi\n"), "sandboxes", "shell", id)
		if status != cli.ExecFailed || !strings.Contains(stderr, "stdin is not a terminal") {
			t.Errorf("shell with a pipe for stdin exited %d, %q; want %d, stdin is not a terminal", status, stderr, cli.ExecFailed)
		}
	})
}

// processList is the sandbox's processes, as the API lists them.
func processList(t *testing.T, s *server, id string) []any {
	t.Helper()
	code, list := s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"/processes", "")
	if code != http.StatusOK {
		t.Fatalf("list processes = %d %v", code, list)
	}
	items, _ := list["items"].([]any)
	return items
}
