package processes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// Processes: commands that run in the background of a ready sandbox,
// belonging to the sandbox rather than to the request that started them
// (docs/processes.md). The provider keeps them (domain.Processes); these
// handlers check the input, call it, and record every start, input and
// signal in the sandbox's activity. terminal.go serves a process's
// terminal over a WebSocket; watch.go, a folder's changes.

// Limits on a process's start.
const (
	// maxProcessSpec bounds a start's command (or argv) in bytes.
	maxProcessSpec = 64 << 10
	// maxArgv bounds how many arguments argv may hold.
	maxArgv = 4096
	// maxTerminalDim bounds a terminal's rows and columns.
	maxTerminalDim = 65535
	// maxProcessTimeout bounds a start's timeout_seconds (a year).
	maxProcessTimeout = 365 * 24 * 3600
)

// TerminalSize is a terminal's size in characters.
type TerminalSize struct {
	// Rows is its height, 1-65535.
	Rows int `json:"rows" minimum:"1" maximum:"65535" example:"24"`
	// Cols is its width, 1-65535.
	Cols int `json:"cols" minimum:"1" maximum:"65535" example:"80"`
} // @name TerminalSize

// StartProcessRequest is the body of POST /v1/sandboxes/{id}/processes.
type StartProcessRequest struct {
	// Command is run with sh -c; give it or argv, not both.
	Command string `json:"command,omitempty" example:"python3 -m http.server 8000"`
	// Argv is run as it is (argv[0] looked up in PATH); give it or command, not both.
	Argv []string `json:"argv,omitempty" example:"python3,-m,http.server,8000"`
	// Env adds environment variables for this process, after the sandbox's own.
	Env map[string]string `json:"env,omitempty" example:"PYTHONUNBUFFERED:1"`
	// Cwd is where it starts, an absolute path (default: the sandbox's working directory).
	Cwd string `json:"cwd,omitempty" example:"/workspace"`
	// Tag is a name of the client's choice to select the process by (in place of its pid): a letter, then up to 63 letters, digits, '.', '_' or '-'.
	Tag string `json:"tag,omitempty" example:"devserver"`
	// Stdin, when true, keeps a pipe to its stdin open for POST .../stdin; otherwise it reads /dev/null. A process with pty reads its terminal whatever this says.
	Stdin bool `json:"stdin,omitempty" example:"false"`
	// PTY, when set, gives the process a pseudo-terminal of that size instead of pipes (TERM defaults to xterm-256color; set it in env to change it).
	PTY *TerminalSize `json:"pty,omitempty"`
	// TimeoutSeconds, when not 0, kills the process (and its process group) that long after its start; 0 or absent: it runs until it ends or the sandbox does. At most a year.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty" format:"int64" minimum:"0" example:"0"`
} // @name StartProcessRequest

// ProcessExit is how a process ended.
type ProcessExit struct {
	// Code is its exit status, or -1 when a signal ended it.
	Code int `json:"code" example:"0"`
	// Signal is the number of the signal that ended it (15 for SIGTERM); 0 when it exited.
	Signal int `json:"signal" example:"0"`
	// Exited is true when it exited, false when a signal ended it.
	Exited bool `json:"exited" example:"true"`
	// Status says it in words.
	Status string `json:"status" example:"exit status 0"`
} // @name ProcessExit

// Process is a process of a sandbox, as it was started and as it is now.
type Process struct {
	// PID is the process's id inside the sandbox.
	PID int `json:"pid" example:"42"`
	// Tag is the tag it was started with; empty when none.
	Tag  string   `json:"tag" example:"devserver"`
	Argv []string `json:"argv" example:"sh,-c,python3 -m http.server 8000"`
	// Env is the environment it was started with (its own, not the sandbox's).
	Env map[string]string `json:"env" example:"PYTHONUNBUFFERED:1"`
	Cwd string            `json:"cwd" example:"/workspace"`
	// PTY is its terminal's size now (after a resize, the new one);
	// absent when it has pipes.
	PTY *TerminalSize `json:"pty,omitempty"`
	// Stdin is true when it was started with a stdin to write to.
	Stdin     bool      `json:"stdin" example:"false"`
	StartedAt time.Time `json:"started_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// Running is true until it ends; exit then says how (absent while it runs).
	Running bool         `json:"running" example:"true"`
	Exit    *ProcessExit `json:"exit,omitempty"`
	// KeptBytes is how much of its output the sandbox keeps (the latest, up to PROCESS_OUTPUT_BYTES); DroppedBytes how much fell out of that window since its start.
	KeptBytes    int64 `json:"kept_bytes" format:"int64" example:"1024"`
	DroppedBytes int64 `json:"dropped_bytes" format:"int64" example:"0"`
} // @name Process

// ProcessList is a sandbox's processes, oldest first.
type ProcessList struct {
	Items []Process `json:"items"`
} // @name ProcessList

// SignalRequest is the body of POST .../processes/{pid}/signal.
type SignalRequest struct {
	// Signal is a name (TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH, ALRM, with or without SIG) or a number 1-64 as a string.
	Signal string `json:"signal" example:"TERM"`
} // @name SignalRequest

// ProcessStarted is the data of a process output stream's start event.
type ProcessStarted struct {
	PID int `json:"pid" example:"42"`
} // @name ProcessStarted

// ProcessOutput is the data of a process output stream's stdout, stderr and pty events.
type ProcessOutput struct {
	// Data is the chunk as UTF-8 text (a character split between chunks comes whole in the later one; bytes that are not UTF-8 become U+FFFD); empty with encoding=base64.
	Data string `json:"data" example:"Serving HTTP on 0.0.0.0 port 8000\n"`
	// DataBase64 is, with encoding=base64, the chunk's bytes exactly as written; absent otherwise.
	DataBase64 []byte `json:"data_base64,omitempty" swaggertype:"string" format:"byte" example:"aGVsbG8K"`
	// Offset is where the chunk starts in all of the process's output (stdout and stderr counted together from 0): a client that reattaches with from=start skips what it has seen.
	Offset int64 `json:"offset" format:"int64" example:"0"`
} // @name ProcessOutput

// ProcessDropped is the data of a process output stream's dropped event.
type ProcessDropped struct {
	// Bytes of output fell out of the kept window before this client read them, just before offset.
	Bytes  int64 `json:"bytes" format:"int64" example:"4096"`
	Offset int64 `json:"offset" format:"int64" example:"1048576"`
} // @name ProcessDropped

// toProcess is the API's view of a process.
func toProcess(p domain.ProcessInfo) Process {
	out := Process{PID: p.PID, Tag: p.Tag, Argv: p.Argv, Env: p.Env, Cwd: p.Cwd, Stdin: p.Stdin,
		StartedAt: p.StartedAt.UTC(), Running: p.Running, KeptBytes: p.Kept, DroppedBytes: p.Dropped}
	if out.Argv == nil {
		out.Argv = []string{}
	}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if p.PTY != nil {
		out.PTY = &TerminalSize{Rows: p.PTY.Rows, Cols: p.PTY.Cols}
	}
	if p.Exit != nil {
		out.Exit = toProcessExit(*p.Exit)
	}
	return out
}

func toProcessExit(e domain.ProcessExit) *ProcessExit {
	return &ProcessExit{Code: e.Code, Signal: e.Signal, Exited: e.Exited, Status: e.Status}
}

// processSelector is the request's {pid}: digits are a pid, a tag
// otherwise.
func processSelector(c *gin.Context) (domain.ProcessSelector, error) {
	s := c.Param("pid")
	if pid, err := strconv.Atoi(s); err == nil && pid > 0 && strconv.Itoa(pid) == s {
		return domain.ProcessSelector{PID: pid}, nil
	}
	if domain.ValidProcessTag(s) {
		return domain.ProcessSelector{Tag: s}, nil
	}
	return domain.ProcessSelector{}, domain.Errorf(domain.CodeInvalidRequest,
		"a process is named by its pid (a positive number) or its tag (a letter, then up to 63 letters, digits, '.', '_' or '-'); got %q", s)
}

// selected is the process sel names among procs, as the provider picks
// it: by pid, or the latest with the tag, a running one first.
func selected(procs []domain.ProcessInfo, sel domain.ProcessSelector) (domain.ProcessInfo, bool) {
	var found *domain.ProcessInfo
	for i := range procs {
		p := &procs[i]
		switch {
		case sel.PID != 0 && p.PID == sel.PID:
			return *p, true
		case sel.PID == 0 && p.Tag == sel.Tag && (found == nil || p.Running || !found.Running):
			found = p
		}
	}
	if found == nil {
		return domain.ProcessInfo{}, false
	}
	return *found, true
}

// processStart is a start's body, decoded and checked: the spec to start
// and the command its activity record shows.
type processStart struct {
	spec    domain.ProcessSpec
	command string
}

// parseProcessStart decodes and checks a start's body.
func parseProcessStart(raw []byte) (processStart, error) {
	var req StartProcessRequest
	if err := jsoncodec.Decode(raw, &req); err != nil {
		return processStart{}, err
	}
	argv, command, err := processArgv(req)
	if err != nil {
		return processStart{}, err
	}
	if err := validateProcessEnv(req.Env); err != nil {
		return processStart{}, err
	}
	if req.Cwd != "" && (req.Cwd[0] != '/' || strings.ContainsRune(req.Cwd, 0) || !utf8.ValidString(req.Cwd) || len(req.Cwd) > domain.MaxActivityTarget) {
		return processStart{}, domain.Errorf(domain.CodeInvalidRequest, "cwd must be an absolute path, valid UTF-8 without NUL bytes, at most %d bytes", domain.MaxActivityTarget)
	}
	if req.Tag != "" && !domain.ValidProcessTag(req.Tag) {
		return processStart{}, domain.Errorf(domain.CodeInvalidRequest, "tag must be a letter, then up to 63 letters, digits, '.', '_' or '-'")
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxProcessTimeout {
		return processStart{}, domain.Errorf(domain.CodeInvalidRequest, "timeout_seconds must be between 0 (none) and %d", maxProcessTimeout)
	}
	spec := domain.ProcessSpec{Argv: argv, Env: req.Env, Cwd: req.Cwd, Tag: req.Tag, Stdin: req.Stdin,
		Timeout: time.Duration(req.TimeoutSeconds) * time.Second}
	if req.PTY != nil {
		size, err := terminalSize(req.PTY.Rows, req.PTY.Cols)
		if err != nil {
			return processStart{}, err
		}
		spec.PTY = &size
	}
	return processStart{spec: spec, command: command}, nil
}

// processArgv is the argv a start runs, and the command its record
// shows: command under sh -c, or argv as it is.
func processArgv(req StartProcessRequest) ([]string, string, error) {
	switch {
	case (req.Command == "") == (len(req.Argv) == 0):
		return nil, "", domain.Errorf(domain.CodeInvalidRequest, "give command (run with sh -c) or argv, one of them")
	case req.Command != "":
		if len(req.Command) > maxProcessSpec || strings.ContainsRune(req.Command, 0) || !utf8.ValidString(req.Command) {
			return nil, "", domain.Errorf(domain.CodeInvalidRequest, "command must be valid UTF-8 without NUL bytes, at most %d bytes", maxProcessSpec)
		}
		return []string{"sh", "-c", req.Command}, req.Command, nil
	}
	total := 0
	for _, a := range req.Argv {
		total += len(a) + 1
		if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			return nil, "", domain.Errorf(domain.CodeInvalidRequest, "argv's strings must be valid UTF-8 without NUL bytes")
		}
	}
	if req.Argv[0] == "" || len(req.Argv) > maxArgv || total > maxProcessSpec {
		return nil, "", domain.Errorf(domain.CodeInvalidRequest, "argv must start with a program and hold at most %d strings of %d bytes in all", maxArgv, maxProcessSpec)
	}
	return req.Argv, shellJoin(req.Argv), nil
}

// validateProcessEnv checks a process's own environment as an exec's.
func validateProcessEnv(env map[string]string) error {
	if len(env) > httpapi.MaxEnv {
		return domain.Errorf(domain.CodeInvalidRequest, "env holds at most %d variables", httpapi.MaxEnv)
	}
	for k, v := range env {
		if !httpapi.EnvKeyPattern.MatchString(k) || len(v) > httpapi.MaxEnvValue || strings.ContainsRune(v, 0) {
			return domain.Errorf(domain.CodeInvalidRequest, "env %q: names must match [A-Za-z_][A-Za-z0-9_]* and values be at most %d bytes with no NUL", k, httpapi.MaxEnvValue)
		}
	}
	return nil
}

// terminalSize checks a terminal's size.
func terminalSize(rows, cols int) (domain.PTYSize, error) {
	if rows < 1 || cols < 1 || rows > maxTerminalDim || cols > maxTerminalDim {
		return domain.PTYSize{}, domain.Errorf(domain.CodeInvalidRequest, "a terminal's rows and cols must be 1-%d", maxTerminalDim)
	}
	return domain.PTYSize{Rows: rows, Cols: cols}, nil
}

// shellJoin writes argv as a shell would read it back, for the record.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// processCall is what every process route needs: the sandbox, its
// provider's processes capability, and (but for start and list) the
// process the request names.
type processCall struct {
	sb    domain.Sandbox
	procs domain.Processes
	sel   domain.ProcessSelector
}

// processOf checks the request's sandbox and process selector.
func processOf(c *gin.Context, st httpapi.SandboxGetter, providers map[string]domain.Provider, op string, named bool) (processCall, error) {
	var (
		call processCall
		err  error
	)
	if named {
		if call.sel, err = processSelector(c); err != nil {
			return call, err
		}
	}
	call.sb, call.procs, err = dataplane.ReadySandbox[domain.Processes](c, st, providers, op)
	return call, err
}

// pinTag turns a selector by tag into one by the pid it names now, so
// that the operation and its record name one process.
func pinTag(ctx context.Context, call *processCall) error {
	if call.sel.PID != 0 {
		return nil
	}
	procs, err := call.procs.ListProcesses(ctx, call.sb.ID)
	if err != nil {
		return err
	}
	p, ok := selected(procs, call.sel)
	if !ok {
		return domain.Errorf(domain.CodeProcessNotFound, "no process %s in sandbox %s (an ended one is kept a minute)", selectorText(call.sel), call.sb.ID)
	}
	call.sel = domain.ProcessSelector{PID: p.PID}
	return nil
}

// processConflict explains a process operation the provider refused: one
// it calls invalid (a process without stdin, or with its stdin closed;
// without a terminal) is the process's state, a 409; one it did not find
// is a 409 as well when the process is still kept, having ended.
func processConflict(ctx context.Context, call processCall, op string, err error) error {
	switch domain.ErrorCode(err) {
	case domain.CodeInvalidRequest:
		var e *domain.Error
		errors.As(err, &e)
		return domain.Errorf(domain.CodeProcessStateConflict, "cannot %s: %s", op, e.Message)
	case domain.CodeProcessNotFound:
		procs, lerr := call.procs.ListProcesses(ctx, call.sb.ID)
		if p, ok := selected(procs, call.sel); lerr == nil && ok && !p.Running {
			return domain.Errorf(domain.CodeProcessStateConflict, "cannot %s: process %d has ended", op, p.PID)
		}
	}
	return err
}

// processActivity is the record of an operation on a process.
func processActivity(kind domain.ActivityKind, pid int, target string) domain.Activity {
	return domain.Activity{Kind: kind, PID: pid, Target: target}
}

// CheckProcessStart decodes and checks a start's body before the call is
// routed, so that bad input is refused by the replica that received it;
// the body is then given again, as it came, for the hop.
func CheckProcessStart() httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		raw, err := httpapi.ReadJSONBody(c)
		if err != nil {
			return err
		}
		if _, err := parseProcessStart(raw); err != nil {
			return err
		}
		httpapi.RestoreBody(c, raw)
		return nil
	}
}

// HandleProcessStart starts a process in the background.
//
//	@Summary		Start a process in the background
//	@Description	Starts command (under sh -c) or argv in the ready sandbox and answers as soon as it runs, with its pid, while it goes on in the background: it belongs to the sandbox, not to this request, and survives the client's disconnect and a restart of Tether; it ends with the sandbox, at its timeout, or when it exits. Its output is kept (the latest PROCESS_OUTPUT_BYTES) for any number of clients to read (GET .../output); with stdin it takes input (POST .../stdin), with pty it runs in a terminal (GET .../terminal). Nothing of Tether's environment reaches it: it gets the sandbox's environment, then env. Recorded in the sandbox's activity (kind process_start).
//	@Description
//	@Description	A sandbox that already runs (or recently ran) PROCESS_MAX_PER_SANDBOX processes is 429 QUOTA_EXCEEDED; a program or cwd that does not exist is 400 INVALID_REQUEST; a provider without processes (or, with pty, without terminals) is 501 NOT_SUPPORTED.
//	@ID				startProcess
//	@Tags			processes
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string				true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		StartProcessRequest	true	"the process"
//	@Success		201		{object}	Process				"it runs"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox)"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: too many processes in the sandbox, or over the API key's request rate"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Header			201		{string}	Location			"the process's URL"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes [post]
func HandleProcessStart(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		raw, err := httpapi.ReadJSONBody(c)
		if err != nil {
			return err
		}
		start, err := parseProcessStart(raw)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "start processes", false)
		if err != nil {
			return err
		}
		if start.spec.PTY != nil {
			if _, ok := call.procs.(domain.PTY); !ok {
				return domain.Errorf(domain.CodeNotSupported, "provider %q does not support terminals", call.sb.Provider)
			}
		}
		began := time.Now()
		info, err := call.procs.StartProcess(c.Request.Context(), call.sb.ID, start.spec)
		err = httpapi.EndedMeanwhile(c, st, call.sb, "start processes", err)
		a := processActivity(domain.ActivityProcessStart, info.PID, start.command)
		if err != nil {
			dataplane.RecordActivity(c, log, st, call.sb, a, began, err)
			return err
		}
		c.Header("Location", "/v1/sandboxes/"+call.sb.ID+"/processes/"+strconv.Itoa(info.PID))
		return dataplane.AnswerWithThenRecord(c, log, st, call.sb, a, began, http.StatusCreated, toProcess(info))
	}
}

// HandleProcessList lists a sandbox's processes.
//
//	@Summary		List a sandbox's processes
//	@Description	The processes the sandbox keeps, oldest first: those running, and those that ended within the last minute (with how they ended).
//	@ID				listProcesses
//	@Tags			processes
//	@Produce		json
//	@Param			id	path		string	true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Success		200	{object}	ProcessList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND (the sandbox)"
//	@Failure		409	{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501	{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503	{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes [get]
func HandleProcessList(st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "list processes", false)
		if err != nil {
			return err
		}
		procs, err := call.procs.ListProcesses(c.Request.Context(), call.sb.ID)
		if err = httpapi.EndedMeanwhile(c, st, call.sb, "list processes", err); err != nil {
			return err
		}
		out := ProcessList{Items: make([]Process, len(procs))}
		for i, p := range procs {
			out.Items[i] = toProcess(p)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleProcessGet returns one process, after waiting for its end if
// asked.
//
//	@Summary		A process, or wait for its end
//	@Description	The process pid names (a pid, or a tag: the latest process started with it, a running one first). With wait (a Go duration such as 30s, or whole seconds, at most the server's max wait) it answers once the process ended, or the wait did, as it is then: running tells which.
//	@ID				getProcess
//	@Tags			processes
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"										example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid		path		string	true	"the process's pid, or its tag"						example(42)
//	@Param			wait	query		string	false	"how long to wait for its end: a Go duration or whole seconds"	example(30s)
//	@Success		200		{object}	Process
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid} [get]
func HandleProcessGet(cfg httpapi.Config, st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c, "wait"); err != nil {
			return err
		}
		var wait time.Duration
		if w := c.Query("wait"); w != "" {
			var err error
			if wait, err = httpapi.ParseWait(w, cfg.MaxWait); err != nil {
				return err
			}
		}
		call, err := processOf(c, st, providers, "read processes", true)
		if err != nil {
			return err
		}
		if wait > 0 {
			if err := awaitProcessEnd(c.Request.Context(), call, wait); err != nil {
				return httpapi.EndedMeanwhile(c, st, call.sb, "read processes", err)
			}
		}
		procs, err := call.procs.ListProcesses(c.Request.Context(), call.sb.ID)
		if err = httpapi.EndedMeanwhile(c, st, call.sb, "read processes", err); err != nil {
			return err
		}
		p, ok := selected(procs, call.sel)
		if !ok {
			return domain.Errorf(domain.CodeProcessNotFound, "no process %s in sandbox %s (an ended one is kept a minute)", selectorText(call.sel), call.sb.ID)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toProcess(p))
	}
}

// errWaited ends an attach whose wait is over.
var errWaited = errors.New("the wait is over")

// awaitProcessEnd waits until the selected process ended, or wait passed:
// an attach from now that returns at its end event.
func awaitProcessEnd(ctx context.Context, call processCall, wait time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, wait, errWaited)
	defer cancel()
	err := call.procs.AttachProcess(ctx, call.sb.ID, call.sel, domain.AttachNow, func(domain.ProcessEvent) error { return nil })
	if err != nil && errors.Is(context.Cause(ctx), errWaited) {
		return nil
	}
	return err
}

// selectorText names a selector in a message.
func selectorText(sel domain.ProcessSelector) string {
	if sel.PID != 0 {
		return strconv.Itoa(sel.PID)
	}
	return "tagged " + strconv.Quote(sel.Tag)
}

// HandleProcessStdin writes to a process's stdin or terminal.
//
//	@Summary		Write to a process's stdin
//	@Description	Writes the raw request body to the process's stdin (a process started with stdin: true) or, for a process with pty, to its terminal as if typed. With close=true its stdin is closed after (it reads end of file); a terminal ends input with ^D instead. Recorded in the sandbox's activity (kind process_input, with the input as text, its first 4096 bytes). A process without stdin, whose stdin is closed, or that has ended is 409 PROCESS_STATE_CONFLICT; nothing is written then.
//	@ID				writeProcessStdin
//	@Tags			processes
//	@Accept			octet-stream
//	@Produce		json
//	@Param			id		path	string	true	"sandbox id"						example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid		path	string	true	"the process's pid, or its tag"		example(42)
//	@Param			close	query	bool	false	"close stdin after writing the body"	example(false)
//	@Param			input	body	string	false	"the bytes to write"
//	@Success		204		"written"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT or PROCESS_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid}/stdin [post]
func HandleProcessStdin(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		closeAfter, err := closeParam(c)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "write to processes", true)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(c.Request.Body)
		if err != nil {
			return httpapi.BodyError(c, err)
		}
		if len(data) == 0 && !closeAfter {
			return domain.Errorf(domain.CodeInvalidRequest, "the body is the input to write; send some, or close=true")
		}
		ctx, began := c.Request.Context(), time.Now()
		if err := pinTag(ctx, &call); err != nil {
			return httpapi.EndedMeanwhile(c, st, call.sb, "write to processes", err)
		}
		if len(data) > 0 {
			err = call.procs.WriteStdin(ctx, call.sb.ID, call.sel, data)
		}
		if err == nil && closeAfter {
			err = call.procs.CloseStdin(ctx, call.sb.ID, call.sel)
		}
		err = httpapi.EndedMeanwhile(c, st, call.sb, "write to processes", processConflict(ctx, call, "write to the process", err))
		n := int64(len(data))
		a := processActivity(domain.ActivityProcessInput, call.sel.PID, strings.ToValidUTF8(string(data), "\uFFFD"))
		a.Bytes = &n
		dataplane.RecordActivity(c, log, st, call.sb, a, began, err)
		if err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}

// closeParam is stdin's close query parameter.
func closeParam(c *gin.Context) (bool, error) {
	if err := httpapi.OnlyQuery(c, "close"); err != nil {
		return false, err
	}
	switch c.Query("close") {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, domain.Errorf(domain.CodeInvalidRequest, "close must be true or false")
}

// signals are the signals a client may name, and their numbers on Linux.
var signals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "ALRM": 14, "TERM": 15,
	"CONT": 18, "STOP": 19, "WINCH": 28,
}

// signalNumber is the signal a SignalRequest names, and its name.
func signalNumber(s string) (int, string, error) {
	name := strings.TrimPrefix(s, "SIG")
	if n, ok := signals[name]; ok {
		return n, name, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= 64 && strconv.Itoa(n) == s {
		for name, m := range signals {
			if m == n {
				return n, name, nil
			}
		}
		return n, s, nil
	}
	names := make([]string, 0, len(signals))
	for name := range signals {
		names = append(names, name)
	}
	slices.Sort(names)
	return 0, "", domain.Errorf(domain.CodeInvalidRequest, "signal must be one of %s (SIG prefix optional) or a number 1-64", strings.Join(names, ", "))
}

// HandleProcessSignal sends a signal to a process.
//
//	@Summary		Send a signal to a process
//	@Description	Sends the signal to the process and its process group (everything it started that did not leave the group). Recorded in the sandbox's activity (kind process_signal). A process that has ended is 409 PROCESS_STATE_CONFLICT; one the sandbox does not keep, 404 PROCESS_NOT_FOUND.
//	@ID				signalProcess
//	@Tags			processes
//	@Accept			json
//	@Produce		json
//	@Param			id		path	string			true	"sandbox id"					example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid		path	string			true	"the process's pid, or its tag"	example(42)
//	@Param			request	body	SignalRequest	true	"the signal"
//	@Success		204		"sent"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT or PROCESS_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid}/signal [post]
func HandleProcessSignal(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		var req SignalRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		n, name, err := signalNumber(req.Signal)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "signal processes", true)
		if err != nil {
			return err
		}
		ctx, began := c.Request.Context(), time.Now()
		if err := pinTag(ctx, &call); err != nil {
			return httpapi.EndedMeanwhile(c, st, call.sb, "signal processes", err)
		}
		err = call.procs.SignalProcess(ctx, call.sb.ID, call.sel, n)
		err = httpapi.EndedMeanwhile(c, st, call.sb, "signal processes", processConflict(ctx, call, "signal the process", err))
		dataplane.RecordActivity(c, log, st, call.sb, processActivity(domain.ActivityProcessSignal, call.sel.PID, name), began, err)
		if err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}

// HandleProcessResize resizes a process's terminal.
//
//	@Summary		Resize a process's terminal
//	@Description	Sets the terminal's size; the program gets SIGWINCH. A process without a terminal (started without pty), or that has ended, is 409 PROCESS_STATE_CONFLICT.
//	@ID				resizeProcess
//	@Tags			processes
//	@Accept			json
//	@Produce		json
//	@Param			id		path	string			true	"sandbox id"					example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid		path	string			true	"the process's pid, or its tag"	example(42)
//	@Param			request	body	TerminalSize	true	"the new size"
//	@Success		204		"resized"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT or PROCESS_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid}/resize [post]
func HandleProcessResize(st dataplane.Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		var req TerminalSize
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		size, err := terminalSize(req.Rows, req.Cols)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "resize terminals", true)
		if err != nil {
			return err
		}
		err = resizeTerminal(c.Request.Context(), call, size)
		if err = httpapi.EndedMeanwhile(c, st, call.sb, "resize terminals", err); err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}

// resizeTerminal resizes the selected process's terminal.
func resizeTerminal(ctx context.Context, call processCall, size domain.PTYSize) error {
	pty, ok := call.procs.(domain.PTY)
	if !ok {
		return domain.Errorf(domain.CodeNotSupported, "provider %q does not support terminals", call.sb.Provider)
	}
	return processConflict(ctx, call, "resize the terminal", pty.ResizePTY(ctx, call.sb.ID, call.sel, size))
}
