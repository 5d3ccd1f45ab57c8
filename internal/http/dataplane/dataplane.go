package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type ExecRequest struct {
	// Command is run with sh -c inside the sandbox.
	Command string `json:"command" example:"printf 'OPEN_SANDBOX_ALIVE\\n'"`
	// TimeoutSeconds bounds the command: absent means the default (60 s), 0 means the server's maximum (MAX_EXEC_TIMEOUT), anything else at most that maximum. Past it the command and everything it started are killed.
	TimeoutSeconds *int64 `json:"timeout_seconds,omitempty" format:"int64" example:"30"`
	// Env adds environment variables for this command.
	Env map[string]string `json:"env,omitempty" example:"PYTHONUNBUFFERED:1"`
	// WorkDir is where the command starts (default: the sandbox's working directory).
	WorkDir string `json:"workdir,omitempty" example:"/workspace"`
	// OutputEncoding is how the output comes back: "text" (the default) in output (or a stream's data) as UTF-8, each run of bytes that is not UTF-8 replaced by U+FFFD; "base64" in output_base64 (or a stream's data_base64), every byte as the command wrote it, and output (data) empty.
	OutputEncoding string `json:"output_encoding,omitempty" enums:"text,base64" x-enum-varnames:"ExecRequestOutputEncodingText,ExecRequestOutputEncodingBase64" example:"text"`
} // @name ExecRequest

// ExecResult is a command's outcome.
type ExecResult struct {
	// Output is the command's combined stdout and stderr, as UTF-8 text (each run of bytes that is not UTF-8 replaced by U+FFFD); empty with output_encoding base64, and in a streaming exec's exit event (the output came as stdout and stderr events).
	Output string `json:"output" example:"OPEN_SANDBOX_ALIVE\n"`
	// OutputBase64 is, with output_encoding base64, the command's combined stdout and stderr, every byte as it was written (binary output whole); absent otherwise, and when there was no output.
	OutputBase64 []byte `json:"output_base64,omitempty" swaggertype:"string" format:"byte" example:"T1BFTl9TQU5EQk9YX0FMSVZFCg=="`
	// ExitCode is the command's exit status.
	ExitCode int `json:"exit_code" example:"0"`
	// Truncated is true when the output exceeded the server's cap and was cut.
	Truncated bool `json:"truncated" example:"false"`
	// TimedOut is true when the command was killed at its timeout (exit_code is then 124).
	TimedOut bool `json:"timed_out" example:"false"`
	// TimeoutSeconds is the limit that applied: the one asked for, the default, or the server's maximum.
	TimeoutSeconds int64 `json:"timeout_seconds" format:"int64" example:"30"`
	// OOMKilled is true when the sandbox's memory limit killed a process while the command ran (its exit_code is then usually 137).
	OOMKilled bool `json:"oom_killed" example:"false"`
} // @name ExecResult

// ReadySandbox finds the sandbox a data-plane request is for and checks it
// is ready and its provider has the capability C.
func ReadySandbox[C any](c *gin.Context, st httpapi.SandboxGetter, providers map[string]domain.Provider, op string) (domain.Sandbox, C, error) {
	var zero C
	id, err := httpapi.SandboxID(c)
	if err != nil {
		return domain.Sandbox{}, zero, err
	}
	sb, looked := httpapi.RoutedSandbox(c)
	if !looked {
		if sb, err = st.GetSandbox(c.Request.Context(), httpapi.TenantOf(c), id); err != nil {
			return sb, zero, httpapi.NotFoundAs(err, id)
		}
	}
	if sb.State != domain.StateReady {
		return sb, zero, domain.StateConflict(id, sb.State, op+" (the sandbox must be ready)")
	}
	p, ok := providers[sb.Provider]
	if !ok {
		return sb, zero, domain.Errorf(domain.CodeProviderUnavailable, "provider %q is not enabled on this server", sb.Provider)
	}
	capability, ok := p.(C)
	if !ok {
		return sb, zero, domain.Errorf(domain.CodeNotSupported, "provider %q does not support %s", sb.Provider, op)
	}
	return sb, capability, nil
}

// HandleSandboxExec runs a command in a sandbox.
//
//	@Summary		Run a command in a sandbox
//	@Description	Runs sh -c command inside the ready sandbox and returns its combined output and exit code. Background processes the command starts keep running until the sandbox ends. A sandbox that is not ready is 409 SANDBOX_STATE_CONFLICT with its state; a provider without exec is 501 NOT_SUPPORTED.
//	@Description
//	@Description	The output is text by default: `output` holds it as UTF-8, each run of bytes that is not UTF-8 replaced by U+FFFD. With `"output_encoding":"base64"` it comes byte for byte instead, base64-encoded in `output_base64` (and `output` is empty): for binary output such as `head -c 4096 /dev/urandom`.
//	@Description
//	@Description	With `Accept: text/event-stream` the output streams as Server-Sent Events while the command runs: `stdout` and `stderr` events whose data is a JSON object `{"data":"<the chunk, as UTF-8 text>"}` (a character cut between chunks comes whole in the later one), or with `"output_encoding":"base64"` `{"data":"","data_base64":"<the chunk's bytes>"}`, then one `exit` event whose data is an ExecResult with an empty output. A failure after the stream began is an `error` event whose data is a Problem. A client that disconnects ends the command.
//	@ID				execInSandbox
//	@Tags			data plane
//	@Accept			json
//	@Produce		json,text/event-stream
//	@Param			id		path		string				true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		ExecRequest			true	"the command"
//	@Success		200		{object}	ExecResult			"the command's outcome, or (text/event-stream) its output as it comes"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST or INVALID_PATH"
//	@Failure		403		{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/exec [post]
func HandleSandboxExec(log *slog.Logger, cfg httpapi.Config, st Store, providers map[string]domain.Provider, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		call, err := execRequestOf(c, cfg)
		if err != nil {
			return err
		}
		execReq := call.Req
		if wantsEventStream(c) {
			sb, execer, err := ReadySandbox[domain.StreamExecer](c, st, providers, "streaming exec")
			if err != nil {
				return err
			}
			return httpapi.EndedMeanwhile(c, st, sb, "streaming exec",
				streamExec(c, log, draining, execer, sb.ID, call, func(res domain.ExecResult, output int64, started time.Time, err error) {
					RecordActivity(c, log, st, sb, execActivity(execReq.Command, res, output, err), started, err)
				}))
		}
		sb, execer, err := ReadySandbox[domain.Execer](c, st, providers, "exec")
		if err != nil {
			return err
		}
		started := time.Now()
		res, err := execer.Exec(c.Request.Context(), sb.ID, execReq)
		err = httpapi.EndedMeanwhile(c, st, sb, "exec", err)
		a := execActivity(execReq.Command, res, int64(len(res.Output)), err)
		if err != nil {
			RecordActivity(c, log, st, sb, a, started, err)
			return err
		}
		out := ExecResult{ExitCode: res.ExitCode, Truncated: res.Truncated,
			TimedOut: res.TimedOut, TimeoutSeconds: int64(execReq.Timeout / time.Second), OOMKilled: res.OOMKilled}
		if call.Base64 {
			out.OutputBase64 = []byte(res.Output)
		} else {
			out.Output = strings.ToValidUTF8(res.Output, "\uFFFD")
		}
		return answerThenRecord(c, log, st, sb, a, started, out)
	}
}

// CheckExecBody decodes and checks an exec's body before the call is
// routed (see dataRoutes), so that a bad body is refused by the replica
// that received it rather than after the hop to the sandbox's node. The
// body is then given again, as it came, for the hop.
func CheckExecBody(cfg httpapi.Config) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		raw, err := httpapi.ReadJSONBody(c)
		if err != nil {
			return err
		}
		call, err := parseExec(raw, cfg)
		if err != nil {
			return err
		}
		httpapi.State(c).Exec = &call
		httpapi.RestoreBody(c, raw)
		return nil
	}
}

// execRequestOf is the exec the request asks for: as checkExecBody
// decoded it, else decoded from the body now.
func execRequestOf(c *gin.Context, cfg httpapi.Config) (httpapi.ExecCall, error) {
	if call := httpapi.State(c).Exec; call != nil {
		return *call, nil
	}
	raw, err := httpapi.ReadJSONBody(c)
	if err != nil {
		return httpapi.ExecCall{}, err
	}
	return parseExec(raw, cfg)
}

// parseExec decodes and checks an exec's body.
func parseExec(raw []byte, cfg httpapi.Config) (httpapi.ExecCall, error) {
	var req ExecRequest
	if err := jsoncodec.Decode(raw, &req); err != nil {
		return httpapi.ExecCall{}, err
	}
	if req.Command == "" {
		return httpapi.ExecCall{}, domain.Errorf(domain.CodeInvalidRequest, "command is required")
	}
	if strings.ContainsRune(req.Command, 0) || strings.ContainsRune(req.WorkDir, 0) {
		return httpapi.ExecCall{}, domain.Errorf(domain.CodeInvalidRequest, "command and workdir must not contain NUL bytes")
	}
	timeout, err := execTimeout(req.TimeoutSeconds, cfg.MaxExecTimeout)
	if err != nil {
		return httpapi.ExecCall{}, err
	}
	for k, v := range req.Env {
		if !httpapi.EnvKeyPattern.MatchString(k) || len(v) > httpapi.MaxEnvValue || strings.ContainsRune(v, 0) {
			return httpapi.ExecCall{}, domain.Errorf(domain.CodeInvalidRequest, "env %q: names must match [A-Za-z_][A-Za-z0-9_]* and values be at most %d bytes with no NUL", k, httpapi.MaxEnvValue)
		}
	}
	if req.WorkDir != "" && req.WorkDir[0] != '/' {
		return httpapi.ExecCall{}, domain.Errorf(domain.CodeInvalidRequest, "workdir must be an absolute path")
	}
	if req.OutputEncoding != "" && req.OutputEncoding != OutputText && req.OutputEncoding != OutputBase64 {
		return httpapi.ExecCall{}, domain.Errorf(domain.CodeInvalidRequest, "output_encoding must be %q (the default) or %q", OutputText, OutputBase64)
	}
	return httpapi.ExecCall{Req: domain.ExecRequest{
		Command: req.Command, Timeout: timeout, Env: req.Env, WorkDir: req.WorkDir, MaxOutput: cfg.MaxExecOutput,
	}, Base64: req.OutputEncoding == OutputBase64}, nil
}

// The output encodings an exec may ask for (ExecRequest.OutputEncoding),
// and a process's output stream (its encoding query parameter).
const (
	OutputText   = "text"
	OutputBase64 = "base64"
)

// execActivity is the activity record of an exec of command.
func execActivity(command string, res domain.ExecResult, output int64, err error) domain.Activity {
	a := domain.Activity{Kind: domain.ActivityExec, Target: command, Bytes: &output, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled}
	if err == nil {
		a.ExitCode = &res.ExitCode
	}
	return a
}

// wantsEventStream reports whether the client asked for Server-Sent Events.
func wantsEventStream(c *gin.Context) bool {
	for part := range strings.SplitSeq(c.GetHeader("Accept"), ",") {
		media, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(media), "text/event-stream") {
			return true
		}
	}
	return false
}

// ErrDraining is why a stream ends when the server shuts down.
var ErrDraining = errors.New("the server is shutting down")

// OutputChunk is the data of a streaming exec's stdout and stderr events.
type OutputChunk struct {
	// Data is a chunk of the command's output, as UTF-8 text (a character split between chunks comes whole in the later one; bytes that are not UTF-8 are replaced by U+FFFD); empty with output_encoding base64.
	Data string `json:"data" example:"hello\n"`
	// DataBase64 is, with output_encoding base64, the chunk's bytes exactly as the command wrote them; absent otherwise.
	DataBase64 []byte `json:"data_base64,omitempty" swaggertype:"string" format:"byte" example:"aGVsbG8K"`
} // @name OutputChunk

// streamExec runs the command, passing its output on as Server-Sent Events.
// The headers go out with the first event, so that a failure before any
// output is still a problem response. done is told how the command ended
// (and how many bytes of output it made) before the client is.
func streamExec(c *gin.Context, log *slog.Logger, draining context.Context, execer domain.StreamExecer, id string, call httpapi.ExecCall,
	done func(res domain.ExecResult, output int64, started time.Time, err error),
) error {
	req := call.Req
	// A shutdown ends the stream (and the command) with a retryable error.
	ctx, cancel := context.WithCancelCause(c.Request.Context())
	defer cancel(nil)
	defer context.AfterFunc(draining, func() { cancel(ErrDraining) })()
	started := false
	event := func(name string, v any) error {
		if !started {
			started = true
			c.Header("Content-Type", "text/event-stream")
			c.Header("Cache-Control", "no-store")
			c.Header("X-Accel-Buffering", "no")
			c.Status(http.StatusOK)
		}
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(c.Writer, "event: %s\ndata: %s\n\n", name, data); err != nil {
			return err
		}
		c.Writer.Flush()
		return nil
	}
	began, output := time.Now(), int64(0)
	enc := ChunkEncoder{Base64: call.Base64}
	res, err := execer.ExecStream(ctx, id, req, func(stream string, chunk []byte) error {
		output += int64(len(chunk))
		return event(stream, enc.Chunk(stream, chunk))
	})
	if err == nil {
		err = enc.Flush(event)
	}
	done(res, output, began, err)
	switch {
	case err != nil && !started:
		return err
	case err != nil && errors.Is(context.Cause(ctx), ErrDraining):
		err = domain.Errorf(domain.CodeUnavailable, "the server is shutting down; the command was ended; retry on another replica")
		if !started {
			return err
		}
		return event("error", httpapi.ProblemFor(c, log, err))
	case err != nil && c.Request.Context().Err() != nil:
		// The client left, which ended the command: nobody to tell.
		log.DebugContext(c.Request.Context(), "streaming exec ended by the client", "sandbox", id, "err", err)
		return nil //nolint:nilerr // handled: there is no one to answer
	case err != nil:
		return event("error", httpapi.ProblemFor(c, log, err))
	}
	return event("exit", ExecResult{ExitCode: res.ExitCode, Truncated: res.Truncated, TimedOut: res.TimedOut,
		TimeoutSeconds: int64(req.Timeout / time.Second), OOMKilled: res.OOMKilled})
}

// ChunkEncoder turns a streaming exec's chunks into the events' data: as
// they are, in base64, or as text. As text, the bytes of a character
// split between two chunks are held back and sent whole with the next
// chunk of the same stream, so that only bytes that are not UTF-8 become
// U+FFFD.
type ChunkEncoder struct {
	// Base64 sends the chunks as they are, in base64, rather than as text.
	Base64 bool
	// Held is, per stream, the start of a character the last chunk cut.
	Held map[string][]byte
}

// Chunk is the data of the event that carries chunk of stream.
func (e *ChunkEncoder) Chunk(stream string, chunk []byte) OutputChunk {
	if e.Base64 {
		return OutputChunk{DataBase64: chunk}
	}
	b := chunk
	if held := e.Held[stream]; len(held) > 0 {
		b = slices.Concat(held, chunk)
	}
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i // a character's start, its end yet to come
			}
			break
		}
	}
	if e.Held == nil {
		e.Held = map[string][]byte{}
	}
	e.Held[stream] = append([]byte(nil), b[cut:]...)
	return OutputChunk{Data: strings.ToValidUTF8(string(b[:cut]), "\uFFFD")}
}

// Flush sends, through event, what is held of each stream once the
// command ended: the start of a character that never ended, as U+FFFD.
func (e *ChunkEncoder) Flush(event func(name string, v any) error) error {
	for _, stream := range []string{domain.Stdout, domain.Stderr} {
		if held := e.Held[stream]; len(held) > 0 {
			delete(e.Held, stream)
			if err := event(stream, OutputChunk{Data: strings.ToValidUTF8(string(held), "\uFFFD")}); err != nil {
				return err
			}
		}
	}
	return nil
}

// execTimeout is the limit an exec runs under: the default when none is
// asked for, the server's maximum for 0 (as agent frameworks mean "no
// timeout"), else the one asked for, which must not exceed the maximum.
func execTimeout(asked *int64, maxTimeout time.Duration) (time.Duration, error) {
	maxSeconds := int64(maxTimeout / time.Second)
	switch {
	case asked == nil:
		return min(httpapi.DefaultExecTimeout, maxTimeout), nil
	case *asked == 0:
		return maxTimeout, nil
	case *asked < 0 || *asked > maxSeconds:
		return 0, domain.Errorf(domain.CodeInvalidRequest, "timeout_seconds must be between 0 (the server's maximum) and %d", maxSeconds)
	}
	return time.Duration(*asked) * time.Second, nil
}

func filePath(c *gin.Context) (string, error) {
	if err := httpapi.OnlyQuery(c, "path"); err != nil {
		return "", err
	}
	p := c.Query("path")
	if p == "" || p[0] != '/' {
		return "", domain.Errorf(domain.CodeInvalidPath, "path must be an absolute path inside the sandbox, e.g. ?path=/workspace/main.py")
	}
	// The activity record keeps the path exactly, as text: one it could not
	// keep (not UTF-8, a NUL, longer than a record holds) would let an
	// operation go unrecorded, and no Linux path needs any of these.
	if !utf8.ValidString(p) || strings.ContainsRune(p, 0) || len(p) > domain.MaxActivityTarget {
		return "", domain.Errorf(domain.CodeInvalidPath, "path must be valid UTF-8 without NUL bytes, at most %d bytes", domain.MaxActivityTarget)
	}
	return p, nil
}

// HandleFilePut uploads a file into a sandbox.
//
//	@Summary		Upload a file into a sandbox
//	@Description	Streams the raw request body into the file at path (parent folders are created). The file is replaced only once the whole body arrived: a failed or rejected upload leaves the previous file as it was. Only the sandbox's writable areas (/workspace, /tmp for the local provider) accept writes; other paths are 400 INVALID_PATH. A directory at path is 400 IS_DIRECTORY; a folder the sandbox user may not write is 403 PERMISSION_DENIED. Bodies over the server's file limit are 413.
//	@ID				putFile
//	@Tags			data plane
//	@Accept			octet-stream
//	@Produce		json
//	@Param			id		path	string	true	"sandbox id"						example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			path	query	string	true	"absolute path inside the sandbox"	example(/workspace/main.py)
//	@Param			content	body	string	true	"the file's bytes"
//	@Success		204		"written"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_PATH, IS_DIRECTORY, INVALID_REQUEST"
//	@Failure		403		{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND (the sandbox)"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/files [put]
func HandleFilePut(log *slog.Logger, cfg httpapi.Config, st Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		path, err := filePath(c)
		if err != nil {
			return err
		}
		sb, files, err := ReadySandbox[domain.Files](c, st, providers, "write files")
		if err != nil {
			return err
		}
		started, body := time.Now(), &countingReader{r: c.Request.Body}
		err = httpapi.BodyError(c, files.WriteFile(c.Request.Context(), sb.ID, path, body, cfg.MaxFileBytes))
		err = httpapi.EndedMeanwhile(c, st, sb, "write files", err)
		RecordActivity(c, log, st, sb, domain.Activity{Kind: domain.ActivityFileWrite, Target: path, Bytes: &body.n}, started, err)
		if err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}

// lazyWriter sends the success headers with the first byte, so that a
// failure before any content can still be answered as a problem.
type lazyWriter struct {
	c           *gin.Context
	contentType string // default application/octet-stream
	started     bool
	n           int64 // bytes written
}

func (w *lazyWriter) start() {
	if !w.started {
		w.started = true
		w.c.Header("Content-Type", cmp.Or(w.contentType, "application/octet-stream"))
		w.c.Status(http.StatusOK)
		w.c.Writer.WriteHeaderNow()
	}
}

func (w *lazyWriter) Write(b []byte) (int, error) {
	w.start()
	n, err := w.c.Writer.Write(b)
	w.n += int64(n)
	return n, err
}

// HandleFileGet downloads a file from a sandbox.
//
//	@Summary		Download a file from a sandbox
//	@Description	Streams the file at path. A file over the server's file limit (MAX_FILE_BYTES) is 413 PAYLOAD_TOO_LARGE. A missing file is 404 FILE_NOT_FOUND (a missing sandbox is 404 NOT_FOUND); a directory is 400 IS_DIRECTORY; anything but a regular file is 400 INVALID_PATH; a file the sandbox user may not read is 403 PERMISSION_DENIED.
//	@ID				getFile
//	@Tags			data plane
//	@Produce		octet-stream
//	@Param			id		path		string				true	"sandbox id"						example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			path	query		string				true	"absolute path inside the sandbox"	example(/workspace/main.py)
//	@Success		200		{file}		binary				"the file's bytes"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_PATH, IS_DIRECTORY"
//	@Failure		403		{object}	httpapi.Problem				"PERMISSION_DENIED"
//	@Failure		404		{object}	httpapi.Problem				"FILE_NOT_FOUND or NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/files [get]
func HandleFileGet(log *slog.Logger, cfg httpapi.Config, st Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		path, err := filePath(c)
		if err != nil {
			return err
		}
		sb, files, err := ReadySandbox[domain.Files](c, st, providers, "read files")
		if err != nil {
			return err
		}
		w, started := &lazyWriter{c: c}, time.Now()
		err = files.ReadFile(c.Request.Context(), sb.ID, path, w, cfg.MaxFileBytes)
		err = httpapi.EndedMeanwhile(c, st, sb, "read files", err)
		RecordActivity(c, log, st, sb, domain.Activity{Kind: domain.ActivityFileRead, Target: path, Bytes: &w.n}, started, err)
		if err != nil && w.started {
			// Too late for a problem document: cut the response short.
			panic(http.ErrAbortHandler)
		}
		if err != nil {
			return err
		}
		w.start() // an empty file
		return nil
	}
}
