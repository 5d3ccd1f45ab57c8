package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// opsBinary is the binary of the ops commands (cmd/tetherctl). The server
// binary runs it rather than linking the commands: they are built on the
// generated Go client, which the server has no use for (deps_test.go).
const opsBinary = "tetherctl"

// errNoOps is runOps's error when there is no tetherctl to run.
var errNoOps = errors.New("not a server command, and the ops commands' binary " + opsBinary +
	" (go build -o bin/" + opsBinary + " ./cmd/" + opsBinary + ") is neither beside this binary nor on PATH")

// runOps runs `tetherctl cmd args...` (git's way with a command it does not
// have): the tetherctl beside this binary, else the first on getenv's PATH.
// It hands over the standard streams and this process's environment (the
// commands read TETHER_URL and TETHER_API_KEY from it) and returns the
// command's exit status as an *exec.ExitError, which main exits with.
func runOps(cmd string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	bin := findOps(getenv)
	if bin == "" {
		return fmt.Errorf("unknown command %q: %w\n%s", cmd, errNoOps, usage)
	}
	// Not CommandContext: on Ctrl-C the terminal signals tetherctl too, and
	// this process waits for it to finish as it chooses (events --follow).
	c := exec.Command(bin, append([]string{cmd}, args...)...) //nolint:noctx,gosec // the operator's own command line
	c.Env = os.Environ()
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	if err := c.Start(); err != nil {
		return fmt.Errorf("%s: %w", opsBinary, err)
	}
	return c.Wait()
}

// findOps is the path of tetherctl: beside this binary, else on getenv's
// PATH; "" if there is none.
func findOps(getenv func(string) string) string {
	var dirs []string
	if self, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(self))
	}
	dirs = append(dirs, filepath.SplitList(getenv("PATH"))...)
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, opsBinary)
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
