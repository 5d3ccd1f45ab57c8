package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/tetherhq/tether/internal/cli"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/test/harness"
)

// localSandbox starts a server whose provider is local and returns it with
// a ready sandbox of its, destroyed when the test ends.
func localSandbox(t *testing.T) (*server, string) {
	t.Helper()
	state := harness.ReachableTempDir(t)
	s := start(t, "k", "PROVIDERS=local", "LOCAL_STATE_DIR="+state, "LOCAL_WORKSPACE_MB=0")
	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", `{}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id, _ := sb["id"].(string)
	t.Cleanup(func() {
		if p, err := local.New(state); err == nil {
			_ = p.Destroy(context.Background(), id)
		}
	})
	if code, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", ""); code != http.StatusOK || sb["state"] != "ready" {
		t.Fatalf("wait for ready = %d %v", code, sb)
	}
	return s, id
}

// tetherIn is `tether ARGS...` run in this process against s, returning
// stdout, stderr and the error.
func tetherIn(t *testing.T, s *server) func(args ...string) (string, string, error) {
	return func(args ...string) (string, string, error) {
		t.Helper()
		var out, errOut syncBuffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		env := map[string]string{"TETHER_URL": s.base, "TETHER_API_KEY": s.key}
		err := run(ctx, env, &out, &errOut, args...)
		return out.String(), errOut.String(), err
	}
}

// tetherBin is `tether ARGS...` run as the real binary, its stdout a
// pipe, with stdin as its input; it returns stdout, stderr and the exit
// status.
func tetherBin(t *testing.T, s *server, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = []string{"TETHER_URL=" + s.base, "TETHER_API_KEY=" + s.key}
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("tether %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestCLIOnLocal drives the commands that need a real sandbox: exec and
// files.
func TestCLIOnLocal(t *testing.T) {
	t.Parallel()
	s, id := localSandbox(t)
	tether := tetherIn(t, s)

	// exec keeps argv: the arguments after -- are the command's argv,
	// whatever they hold, as with docker exec and kubectl exec.
	t.Run("ExecKeepsArgv", func(t *testing.T) {
		if out, _, err := tether("sandboxes", "exec", "--raw", id, "--", "echo", "hello;id"); err != nil || out != "hello;id\n" {
			t.Errorf("exec echo 'hello;id' = %q %v; want hello;id alone", out, err)
		}
		argv := []string{"it's", `"double"`, "a b  c", "$HOME", "${PATH}", "line1\nline2", "", `back\slash`, "*", "~", "$(id)", "`id`",
			"'", "''", "%1", "if", "a=b", "-n", "tab\there", "é ü 中", "!", "#not a comment", ";", "&&", "|", "<", ">x", "(", "{", "}"}
		out, _, err := tether(append([]string{"sandboxes", "exec", "--raw", id, "--", "printf", `%s\0`}, argv...)...)
		if err != nil {
			t.Fatalf("exec printf: %v", err)
		}
		got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
		if strings.Join(got, "|") != strings.Join(argv, "|") || len(got) != len(argv) {
			t.Errorf("the command saw argv\n%q\nwant\n%q", got, argv)
		}
		// A first word is a program's name, never shell syntax: not an
		// assignment, a reserved word or a command line.
		for _, first := range []string{"if", "FOO=bar", "echo $HOME", "while"} {
			_, _, err := tether("sandboxes", "exec", id, "--", first, "env")
			if exit := (*cli.ExitError)(nil); !errors.As(err, &exit) || exit.Code != 127 || exit.Err != nil {
				t.Errorf("exec -- %q env = %v; want exit 127, the command not found", first, err)
			}
		}
	})

	// exec exits as the command did, silently; 125 when tether failed.
	t.Run("ExecExitStatus", func(t *testing.T) {
		for _, tc := range []struct {
			args   []string
			status int
			stderr string
		}{
			{[]string{"sandboxes", "exec", id, "--", "sh", "-c", "exit 3"}, 3, ""},
			{[]string{"sandboxes", "exec", id, "--", "sh", "-c", "echo out; exit 0"}, 0, ""},
			{[]string{"sandboxes", "exec", id, "--", "false"}, 1, ""},
			{[]string{"sandboxes", "exec", id, "--", "sh", "-c", "kill -9 $$"}, 137, ""},
			{[]string{"sandboxes", "exec", id, "-o", "json", "--", "sh", "-c", "exit 4"}, 4, ""},
			{[]string{"sandboxes", "exec", "sbx_00000000000000000000000000", "--", "true"}, cli.ExecFailed, "404 NOT_FOUND"},
			{[]string{"sandboxes", "exec", id}, cli.ExecFailed, "want ID -- COMMAND"},
			{[]string{"sandboxes", "exec", "--timeout", "1.5s", id, "--", "true"}, cli.ExecFailed, "whole seconds"},
			{[]string{"sandboxes", "exec", "--timeout", "1s", id, "--", "sleep", "5"}, 124, "timed out: true"},
			{[]string{"sandboxes", "ls", "--state", "nonsense"}, 1, "400 INVALID_REQUEST"},
		} {
			_, stderr, status := tetherBin(t, s, nil, tc.args...)
			if status != tc.status || (tc.stderr == "") != (stderr == "") || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("tether %q exited %d, stderr %q; want %d, stderr %q", tc.args, status, stderr, tc.status, tc.stderr)
			}
		}
		// The options reach the command.
		out, _, status := tetherBin(t, s, nil, "sandboxes", "exec", "--env", "GREETING=hi there", "--workdir", "/tmp", id, "--", "sh", "-c", `echo "$GREETING" "$PWD"`)
		if status != 0 || out != "hi there /tmp\n" {
			t.Errorf("exec --env --workdir = %q, %d", out, status)
		}
	})

	// exec shows a sandbox's terminal escapes (a window title, a screen
	// clear, a clipboard write) as text on a terminal; --raw passes them
	// on, and so does a pipe, byte for byte.
	t.Run("ExecShowsEscapes", func(t *testing.T) {
		cmd := []string{id, "--", "printf", `\033]0;pwned\007\033[2J\033]52;c;cGF3bmVk\007hi\n`}
		raw := "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cGF3bmVk\x07hi\n"
		if got, err := onTerminal(t, s, append([]string{"sandboxes", "exec"}, cmd...)...); err != nil || got != `\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cGF3bmVk\x07hi`+"\n" {
			t.Errorf("exec on a terminal printed %q, %v; want the escapes shown as text", got, err)
		}
		if got, err := onTerminal(t, s, append([]string{"sandboxes", "exec", "--raw"}, cmd...)...); err != nil || got != raw {
			t.Errorf("exec --raw on a terminal printed %q, %v; want the output as is", got, err)
		}
		if got, _, status := tetherBin(t, s, nil, append([]string{"sandboxes", "exec"}, cmd...)...); status != 0 || got != raw {
			t.Errorf("exec to a pipe printed %q (exit %d); want the output as is", got, status)
		}
	})

	// files put writes a local file or stdin; files get passes the bytes
	// on as they are to a pipe, escaped on a terminal; exec's cat of a
	// text file to a pipe is byte-exact too.
	t.Run("Files", func(t *testing.T) {
		content := []byte("bin\x00\xff\xfe\x1b]0;pwned\x07\r\nend")
		local := filepath.Join(t.TempDir(), "in.bin")
		if err := os.WriteFile(local, content, 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, err := tether("sandboxes", "files", "put", id, "/workspace/a.bin", local, "-o", "json")
		if err != nil || !strings.Contains(out, fmt.Sprintf(`"bytes": %d`, len(content))) {
			t.Fatalf("files put FILE = %q %v", out, err)
		}
		if got, stderr, status := tetherBin(t, s, nil, "sandboxes", "files", "get", id, "/workspace/a.bin"); status != 0 || got != string(content) {
			t.Errorf("files get to a pipe = %q (exit %d, %q); want %q", got, status, stderr, content)
		}
		if got, err := onTerminal(t, s, "sandboxes", "files", "get", id, "/workspace/a.bin"); err != nil || got != `bin\x00\xff\xfe\x1b]0;pwned\x07\x0d`+"\n"+"end" {
			t.Errorf("files get on a terminal = %q %v; want the escapes shown", got, err)
		}
		if got, err := onTerminal(t, s, "sandboxes", "files", "get", "--raw", id, "/workspace/a.bin"); err != nil || got != string(content) {
			t.Errorf("files get --raw on a terminal = %q %v", got, err)
		}
		// From stdin, with - and without a FILE.
		text := "line one\n\x1b[31mred\x1b[0m 'quoted' $HOME\n\n"
		for _, args := range [][]string{{"-"}, {}} {
			put := append([]string{"sandboxes", "files", "put", id, "/tmp/t.txt"}, args...)
			if out, stderr, status := tetherBin(t, s, []byte(text), put...); status != 0 || !strings.Contains(out, fmt.Sprintf("wrote %d bytes", len(text))) {
				t.Errorf("files put %q from stdin = %q (exit %d, %q)", args, out, status, stderr)
			}
			if got, _, status := tetherBin(t, s, nil, "sandboxes", "exec", id, "--", "cat", "/tmp/t.txt"); status != 0 || got != text {
				t.Errorf("exec cat to a pipe = %q (exit %d); want %q", got, status, text)
			}
		}
		if _, stderr, status := tetherBin(t, s, nil, "sandboxes", "files", "get", id, "/workspace/none"); status != 1 || !strings.Contains(stderr, "404 FILE_NOT_FOUND") {
			t.Errorf("files get of a missing file exited %d, %q", status, stderr)
		}
		if _, _, err := tether("sandboxes", "files", "put", id, "/workspace/x", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("files put of a missing local file = %v", err)
		}
	})
}

// onTerminal is `tether ARGS...` run in this process against s with a
// terminal (a pseudo-terminal in raw mode) as its stdout; it returns what
// the terminal received.
func onTerminal(t *testing.T, s *server, args ...string) (string, error) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer func() { _ = ptmx.Close() }()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	if _, err := term.MakeRaw(int(tty.Fd())); err != nil {
		t.Fatalf("raw pty: %v", err)
	}
	var errOut syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	env := map[string]string{"TETHER_URL": s.base, "TETHER_API_KEY": s.key}
	runErr := cli.Run(ctx, args[0], args[1:], func(k string) string { return env[k] }, nil, tty, &errOut)
	_ = tty.Close()
	// The terminal's side reads what was written, then EIO: the other
	// side is closed.
	got, err := io.ReadAll(ptmx)
	if err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("read pty: %v", err)
	}
	return string(got), runErr
}
