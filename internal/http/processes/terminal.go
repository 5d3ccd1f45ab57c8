package processes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// A process's terminal over a WebSocket (docs/processes.md): binary
// frames from the client are keystrokes, binary frames from the server
// the terminal's output; text frames carry JSON control, a resize from
// the client, the process's exit (or an error) from the server before it
// closes. Browsers cannot set headers on a WebSocket, so the API key may
// come in the subprotocol list instead: "tether.v1, tether.bearer.<key>".

// terminalProtocol is the terminal's WebSocket subprotocol; a browser
// sends its API key beside it (httpapi.BearerProtocol).
const terminalProtocol = "tether.v1"

// maxTerminalInput bounds one frame a terminal's client sends (the
// provider's bound on one write to a process).
const maxTerminalInput = 1 << 20

// terminalUpgrader upgrades a terminal's request. Any origin may: the
// connection is authenticated by its API key (a header or the
// subprotocol), never by a cookie, so a page of another site has nothing
// to ride on.
var terminalUpgrader = websocket.Upgrader{
	Subprotocols:    []string{terminalProtocol},
	CheckOrigin:     func(*http.Request) bool { return true },
	ReadBufferSize:  4096,
	WriteBufferSize: 32 << 10,
}

// CheckTerminal refuses a bad terminal request before the call is routed,
// drops the key from the subprotocols, and lets the upgraded connection
// outlive the server's read timeout (httpapi.UpgradeWriter).
func CheckTerminal() httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if _, err := processSelector(c); err != nil {
			return err
		}
		if _, err := terminalFrom(c); err != nil {
			return err
		}
		if !websocket.IsWebSocketUpgrade(c.Request) {
			return domain.Errorf(domain.CodeInvalidRequest, "a terminal is a WebSocket: send an upgrade request (Connection: Upgrade, Upgrade: websocket)")
		}
		httpapi.DropKeyProtocol(c.Request)
		c.Writer = httpapi.UpgradeWriter{ResponseWriter: c.Writer}
		return nil
	}
}

// terminalFrom is a terminal's from query parameter; start by default,
// so that a client that attaches again sees the screen drawn again.
func terminalFrom(c *gin.Context) (domain.AttachFrom, error) {
	if err := httpapi.OnlyQuery(c, "from"); err != nil {
		return 0, err
	}
	return attachFrom(c.Query("from"), domain.AttachStart)
}

// TerminalControl is a text frame of a terminal's WebSocket connection: from the client, a resize; from the server, the process's exit, output that was dropped, or an error.
type TerminalControl struct {
	Resize  *TerminalSize    `json:"resize,omitempty"`
	Exit    *ProcessExit     `json:"exit,omitempty"`
	Dropped *ProcessDropped  `json:"dropped,omitempty"`
	Error   *httpapi.Problem `json:"error,omitempty"`
} // @name TerminalControl

// HandleProcessTerminal serves a process's terminal over a WebSocket.
//
//	@Summary		A process's terminal, over WebSocket
//	@Description	Upgrades the connection to WebSocket, connected to the terminal of a process started with pty. Binary frames from the client are keystrokes (written to the terminal as typed); binary frames from the server are the terminal's output, from the start of what is kept (from=start, the default: a client that attaches again sees the screen drawn again) or from now (from=now). Text frames are JSON (TerminalControl): `{"resize":{"rows":30,"cols":100}}` from the client; `{"dropped":{...}}`, `{"error":{...}}` (a Problem) and, last, `{"exit":{...}}` from the server, which then closes the connection (1000 once the process exited, 1011 on an error, 1001 when the server shuts down). Closing the connection leaves the process running. Several clients may hold a terminal at once: each sees all its output, and their keystrokes mix.
//	@Description
//	@Description	The API key goes in Authorization, or, for browsers (which cannot set headers on WebSocket connections), in the subprotocol list: `Sec-WebSocket-Protocol: tether.v1, tether.bearer.<key>`; the server answers `tether.v1`. Each session is one record in the sandbox's activity (kind terminal, with what was typed, its first 4096 bytes, and the bytes both ways), written when it ends. Errors before the upgrade are problem documents: a process without a terminal is 409 PROCESS_STATE_CONFLICT.
//	@ID				openProcessTerminal
//	@Tags			processes
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"					example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid		path		string	true	"the process's pid, or its tag"	example(42)
//	@Param			from	query		string	false	"start (the default): what is kept first; now: only what comes next"	Enums(start, now)	example(start)
//	@Success		101		{object}	TerminalControl		"switching protocols: WebSocket from here on"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST (not an upgrade to WebSocket)"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT or PROCESS_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid}/terminal [get]
func HandleProcessTerminal(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		from, err := terminalFrom(c)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "open terminals", true)
		if err != nil {
			return err
		}
		pty, ok := call.procs.(domain.PTY)
		if !ok {
			return domain.Errorf(domain.CodeNotSupported, "provider %q does not support terminals", call.sb.Provider)
		}
		procs, err := call.procs.ListProcesses(c.Request.Context(), call.sb.ID)
		if err = httpapi.EndedMeanwhile(c, st, call.sb, "open terminals", err); err != nil {
			return err
		}
		p, ok := selected(procs, call.sel)
		switch {
		case !ok:
			return domain.Errorf(domain.CodeProcessNotFound, "no process %s in sandbox %s (an ended one is kept a minute)", selectorText(call.sel), call.sb.ID)
		case p.PTY == nil:
			return domain.Errorf(domain.CodeProcessStateConflict, "process %d has no terminal (start it with pty)", p.PID)
		}
		call.sel = domain.ProcessSelector{PID: p.PID} // the one checked, whatever starts with its tag meanwhile
		conn, err := terminalUpgrader.Upgrade(c.Writer, c.Request, nil)
		if err != nil {
			return nil //nolint:nilerr // the upgrader answered the client already
		}
		t := &terminalSession{c: c, log: log, conn: conn, st: st, call: call, pty: pty}
		began := time.Now()
		err = t.run(draining, from)
		in, out := t.in.Load(), t.out.Load()
		total := in + out
		a := processActivity(domain.ActivityTerminal, p.PID, strings.ToValidUTF8(string(t.typed), "\uFFFD"))
		a.Bytes = &total
		dataplane.RecordActivity(c, log, st, call.sb, a, began, err)
		return nil
	}
}

// terminalSession is one client's WebSocket to a terminal.
type terminalSession struct {
	c    *gin.Context
	log  *slog.Logger
	conn *websocket.Conn
	st   httpapi.SandboxGetter
	call processCall
	pty  domain.PTY
	// wmu serialises writes to conn: output from the attach, errors from
	// the reader.
	wmu sync.Mutex
	// in and out count the bytes typed and shown; typed keeps the first
	// of what was typed, for the record (read once the reader ended).
	in, out atomic.Int64
	typed   []byte
}

// errClientLeft is why a terminal ends when its client goes away.
var errClientLeft = errors.New("the client closed the terminal")

// run passes the terminal's output to the client and the client's
// keystrokes and resizes to the terminal until the process ends, the
// client leaves, or the server shuts down; the error is how it ended,
// nil for the process's end or the client's leaving.
func (t *terminalSession) run(draining context.Context, from domain.AttachFrom) error {
	ctx, cancel := context.WithCancelCause(t.c.Request.Context())
	defer cancel(nil)
	defer context.AfterFunc(draining, func() { cancel(dataplane.ErrDraining) })()
	t.conn.SetReadLimit(maxTerminalInput)
	var reader sync.WaitGroup
	reader.Go(func() { cancel(t.read(ctx)) })
	err := t.call.procs.AttachProcess(ctx, t.call.sb.ID, t.call.sel, from, t.emit)
	cause := context.Cause(ctx)
	var result error
	switch {
	case err == nil:
		t.closeWith(websocket.CloseNormalClosure, "the process ended")
	case errors.Is(cause, errClientLeft):
	case errors.Is(cause, dataplane.ErrDraining):
		t.sendError(domain.Errorf(domain.CodeUnavailable, "the server is shutting down; attach again (through another replica)"))
		t.closeWith(websocket.CloseGoingAway, "the server is shutting down")
	default:
		result = httpapi.EndedMeanwhile(t.c, t.st, t.call.sb, "open terminals", err)
		t.sendError(result)
		t.closeWith(websocket.CloseInternalServerErr, "the terminal failed")
	}
	_ = t.conn.Close() // ends the reader
	cancel(nil)
	reader.Wait()
	return result
}

// emit passes one event of the attach to the client.
func (t *terminalSession) emit(ev domain.ProcessEvent) error {
	switch ev.Kind {
	case domain.ProcessStdout, domain.ProcessStderr, domain.ProcessPTYOutput:
		t.out.Add(int64(len(ev.Data)))
		return t.write(websocket.BinaryMessage, ev.Data)
	case domain.ProcessDropped:
		return t.control(TerminalControl{Dropped: &ProcessDropped{Bytes: ev.Dropped, Offset: ev.Offset}})
	case domain.ProcessEnd:
		exit := &ProcessExit{Code: -1, Status: "unknown"}
		if ev.Exit != nil {
			exit = toProcessExit(*ev.Exit)
		}
		return t.control(TerminalControl{Exit: exit})
	}
	return nil
}

// read passes the client's frames on until it leaves (errClientLeft) or
// ctx ends.
func (t *terminalSession) read(ctx context.Context) error {
	for {
		kind, data, err := t.conn.ReadMessage()
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err() // the session ended first: run closed the connection
		case err != nil:
			return errClientLeft
		}
		switch kind {
		case websocket.BinaryMessage:
			t.in.Add(int64(len(data)))
			if room := domain.MaxActivityTarget - len(t.typed); room > 0 {
				t.typed = append(t.typed, data[:min(room, len(data))]...)
			}
			err = t.call.procs.WriteStdin(ctx, t.call.sb.ID, t.call.sel, data)
		case websocket.TextMessage:
			err = t.controlFrom(ctx, data)
		}
		if err != nil && ctx.Err() == nil {
			t.sendError(processConflict(ctx, t.call, "write to the terminal", err))
		}
	}
}

// controlFrom acts on a text frame from the client.
func (t *terminalSession) controlFrom(ctx context.Context, data []byte) error {
	var ctl TerminalControl
	if err := jsoncodec.Decode(data, &ctl); err != nil {
		return err
	}
	if ctl.Resize == nil || ctl.Exit != nil || ctl.Dropped != nil || ctl.Error != nil {
		return domain.Errorf(domain.CodeInvalidRequest, `a client's text frame is {"resize":{"rows":R,"cols":C}}`)
	}
	size, err := terminalSize(ctl.Resize.Rows, ctl.Resize.Cols)
	if err != nil {
		return err
	}
	return t.pty.ResizePTY(ctx, t.call.sb.ID, t.call.sel, size)
}

// control sends a text frame.
func (t *terminalSession) control(ctl TerminalControl) error {
	b, err := json.Marshal(ctl)
	if err != nil {
		return err
	}
	return t.write(websocket.TextMessage, b)
}

// sendError sends err as a problem in a text frame.
func (t *terminalSession) sendError(err error) {
	p := httpapi.ProblemFor(t.c, t.log, err)
	_ = t.control(TerminalControl{Error: &p})
}

// write sends one frame.
func (t *terminalSession) write(kind int, data []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_ = t.conn.SetWriteDeadline(time.Now().Add(terminalWriteWait))
	return t.conn.WriteMessage(kind, data)
}

// closeWith sends the close frame.
func (t *terminalSession) closeWith(code int, text string) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_ = t.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// terminalWriteWait bounds a frame's write to a client that does not
// read: past it the session ends (the process goes on).
const terminalWriteWait = 30 * time.Second
