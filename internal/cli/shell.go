package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/term"

	"github.com/tetherhq/tether/clients/go/tether"
)

// `tether sandboxes shell ID [-- COMMAND [ARG...]]` is a terminal in a
// sandbox, as `ssh HOST` and `docker exec -it` give one: a process with a
// pseudo-terminal the size of the local one (POST .../processes with pty),
// its terminal's WebSocket (GET .../processes/{pid}/terminal,
// docs/processes.md) copied to and from the local terminal in raw mode,
// and the local terminal's resizes (SIGWINCH) passed on. It exits as the
// process did. Its stdin must be a terminal: keystrokes without one are
// not a session (sandboxes exec runs a command, and files put writes
// stdin).

// loginShell is what shell runs without a command (with sh -c): bash if
// the sandbox has it, else sh, as a login shell; the console's terminal
// runs the same.
const loginShell = "command -v bash >/dev/null && exec bash -l; exec sh -l"

// terminalProtocol is the terminal WebSocket's subprotocol.
const terminalProtocol = "tether.v1"

// sandboxesShell is `tether sandboxes shell ID [-- COMMAND [ARG...]]`: it
// exits with the process's exit status (128+N when signal N ended it), and
// ExecFailed when tether itself failed.
func sandboxesShell(ctx context.Context, _ string, args []string, std stdio) error {
	c, rest, err := newCLI("sandboxes shell", args, std, nil)
	if err != nil {
		return &ExitError{Code: ExecFailed, Err: err}
	}
	if len(rest) < 1 {
		return &ExitError{Code: ExecFailed, Err: errors.New("sandboxes shell: want ID [-- COMMAND [ARG...]]")}
	}
	fd, ok := terminalFd(std.stdin)
	if !ok {
		return &ExitError{Code: ExecFailed, Err: errors.New("sandboxes shell: stdin is not a terminal; run it in one " +
			"(sandboxes exec ID -- COMMAND runs a command without one)")}
	}
	// The local terminal going away hangs the shell up, as it would a
	// local one (SIGINT and SIGTERM end ctx already: tetherctl's main).
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	exit, err := c.shell(ctx, fd, rest[0], rest[1:])
	switch {
	case err != nil:
		return &ExitError{Code: ExecFailed, Err: fmt.Errorf("sandboxes shell: %w", err)}
	case !exit.Exited && exit.Signal > 0:
		return &ExitError{Code: 128 + exit.Signal}
	default:
		return exitStatus(exit.Code)
	}
}

// terminalFd is r's file descriptor, when r is a terminal.
func terminalFd(r io.Reader) (int, bool) {
	f, ok := r.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// terminalSize is the size of the terminal fd, 24x80 when it has none.
func terminalSize(fd int) tether.TerminalSize {
	cols, rows, err := term.GetSize(fd)
	if err != nil || cols <= 0 || rows <= 0 {
		return tether.TerminalSize{Rows: 24, Cols: 80}
	}
	return tether.TerminalSize{Rows: rows, Cols: cols}
}

// shell runs argv (the login shell when empty) in sandbox id on the local
// terminal fd until it ends, and returns how it ended.
func (c *cli) shell(ctx context.Context, fd int, id string, argv []string) (*tether.ProcessExit, error) {
	size := terminalSize(fd)
	req := tether.StartProcessRequest{Pty: &size}
	if len(argv) > 0 {
		req.Argv = &argv
	} else {
		command := loginShell
		req.Command = &command
	}
	resp, err := c.api.StartProcessWithResponse(ctx, id, req)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	if err := problem(resp.StatusCode(), resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON201 == nil {
		return nil, fmt.Errorf("start: unexpected answer %d", resp.StatusCode())
	}
	pid := resp.JSON201.Pid
	conn, err := c.dialTerminal(ctx, id, pid)
	if err != nil {
		c.hangUp(id, pid)
		return nil, err
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		_ = conn.Close()
		c.hangUp(id, pid)
		return nil, fmt.Errorf("raw mode: %w", err)
	}
	s := &shellSession{conn: conn, fd: fd, stderr: c.stderr, sent: size}
	exit, err := s.run(ctx, c.stdin, c.stdout)
	_ = term.Restore(fd, old)
	if exit == nil {
		c.hangUp(id, pid)
		if err == nil {
			err = errors.New("the connection ended without the process's exit")
		}
		return nil, fmt.Errorf("%w (process %d was sent SIGHUP)", err, pid)
	}
	return exit, nil
}

// dialTerminal connects to process pid's terminal in sandbox id.
func (c *cli) dialTerminal(ctx context.Context, id string, pid int) (*websocket.Conn, error) {
	u, err := url.Parse(fmt.Sprintf("%s/v1/sandboxes/%s/processes/%d/terminal", c.url, url.PathEscape(id), pid))
	if err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1) // http→ws, https→wss
	dialer := *websocket.DefaultDialer
	dialer.Subprotocols = []string{terminalProtocol}
	conn, resp, err := dialer.DialContext(ctx, u.String(), http.Header{"Authorization": {"Bearer " + c.key}})
	if resp != nil {
		defer func() { _ = resp.Body.Close() }()
	}
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if perr := problem(resp.StatusCode, body); perr != nil {
				return nil, perr
			}
		}
		return nil, fmt.Errorf("terminal: %w", err)
	}
	return conn, nil
}

// hangUp sends process pid SIGHUP, as a terminal that goes away does, so
// that a shell whose session ended without it ending is not left behind.
// It is best effort: the sandbox may be gone.
func (c *cli) hangUp(id string, pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.api.SignalProcessWithResponse(ctx, id, fmt.Sprint(pid), tether.SignalProcessJSONRequestBody{Signal: "HUP"})
}

// shellSession is one terminal's WebSocket and the local terminal it is
// shown on.
type shellSession struct {
	conn   *websocket.Conn
	fd     int
	stderr io.Writer
	// wmu serialises writes to conn: keystrokes and resizes.
	wmu  sync.Mutex
	sent tether.TerminalSize // the size the terminal has
}

// run copies stdin to the terminal and the terminal to stdout, and passes
// the local terminal's resizes on, until the process ends (its exit), the
// connection does (nil and why) or ctx does. The reader of stdin is left
// blocked in its read: the command ends there.
func (s *shellSession) run(ctx context.Context, stdin io.Reader, stdout io.Writer) (*tether.ProcessExit, error) {
	defer context.AfterFunc(ctx, func() { _ = s.conn.Close() })()
	defer func() { _ = s.conn.Close() }()
	go s.pumpInput(stdin)
	winch := make(chan os.Signal, 1)
	if len(resizeSignals) > 0 {
		signal.Notify(winch, resizeSignals...)
		defer signal.Stop(winch)
	}
	done := make(chan struct{})
	defer close(done)
	go s.followSize(winch, done)
	exit, err := s.show(stdout)
	if ctx.Err() != nil {
		return exit, context.Cause(ctx)
	}
	return exit, err
}

// pumpInput sends what is typed, as it comes, until stdin ends or the
// connection does.
func (s *shellSession) pumpInput(stdin io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 && s.write(websocket.BinaryMessage, buf[:n]) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// followSize sends the local terminal's size each time it changes: once
// at first (for a resize before winch was watched), then on each signal.
func (s *shellSession) followSize(winch <-chan os.Signal, done <-chan struct{}) {
	for {
		if size := terminalSize(s.fd); size != s.sent {
			ctl, _ := json.Marshal(tether.TerminalControl{Resize: &size})
			if s.write(websocket.TextMessage, ctl) != nil {
				return
			}
			s.sent = size
		}
		select {
		case <-done:
			return
		case <-winch:
		}
	}
}

// show writes the terminal's output to stdout and acts on its control
// frames until the connection ends; it returns the process's exit, if it
// came.
func (s *shellSession) show(stdout io.Writer) (*tether.ProcessExit, error) {
	var exit *tether.ProcessExit
	for {
		kind, data, err := s.conn.ReadMessage()
		if err != nil {
			if exit != nil || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return exit, nil
			}
			return nil, fmt.Errorf("the terminal's connection ended: %w", err)
		}
		if kind == websocket.BinaryMessage {
			if _, err := stdout.Write(data); err != nil {
				return nil, fmt.Errorf("stdout: %w", err)
			}
			continue
		}
		var ctl tether.TerminalControl
		if json.Unmarshal(data, &ctl) != nil {
			continue
		}
		switch {
		case ctl.Exit != nil:
			exit = ctl.Exit
		case ctl.Error != nil:
			// On the raw terminal: a line of its own, from its start.
			_, _ = fmt.Fprintf(s.stderr, "\r\ntether: %d %s: %s\r\n", ctl.Error.Status, cell(string(ctl.Error.Code)), cell(ctl.Error.Detail))
		case ctl.Dropped != nil:
			_, _ = fmt.Fprintf(s.stderr, "\r\ntether: %d bytes of output were dropped\r\n", ctl.Dropped.Bytes)
		}
	}
}

// write sends one frame.
func (s *shellSession) write(kind int, data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return s.conn.WriteMessage(kind, data)
}
