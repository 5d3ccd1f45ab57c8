package dataplane

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Activity is one exec, file transfer, or request to a port a client made in a sandbox.
type Activity struct {
	// ID orders activity; pass the last one seen as after (or cursor).
	ID        int64     `json:"id" format:"int64" example:"7"`
	SandboxID string    `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	At        time.Time `json:"at" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	// KeyID is the id of the API key the request was made with.
	KeyID *string `json:"key_id" extensions:"x-nullable" example:"key_k5m2q7x3w9r4t8vz"`
	// KeyName is that API key's name; null with key_id.
	KeyName *string `json:"key_name" extensions:"x-nullable" example:"ci-runner"`
	// Kind is what was done: a command run, or a file or folder (archive) read or written.
	// Kind port is an HTTP request (or WebSocket connection) proxied to a port with an API key; preview, one that came through a preview URL; e2b_host, one that came through an E2B sandbox host ({port}-{sandbox id}.E2B_DOMAIN), without a key.
	// Kinds process_start, process_input and process_signal are a background process started, input written to one, a signal sent to one; terminal, a terminal session over WebSocket (recorded when it ends).
	// Kind network_update is an edit of the sandbox's network rules (PATCH /v1/sandboxes/{id}/network); egress, a connection or DNS question of the sandbox's that the egress proxy allowed or refused.
	Kind string `json:"kind" enums:"exec,file_read,file_write,archive_read,archive_write,port,preview,process_start,process_input,process_signal,terminal,network_update,egress,e2b_host" x-enum-varnames:"ActivityKindExec,ActivityKindFileRead,ActivityKindFileWrite,ActivityKindArchiveRead,ActivityKindArchiveWrite,ActivityKindPort,ActivityKindPreview,ActivityKindProcessStart,ActivityKindProcessInput,ActivityKindProcessSignal,ActivityKindTerminal,ActivityKindNetworkUpdate,ActivityKindEgress,ActivityKindE2BHost" example:"exec"`
	// Command is the command of an exec or a process's start (its first 4096 bytes); null for the others.
	Command *string `json:"command" extensions:"x-nullable" example:"pytest -q"`
	// Path is the file's or folder's path; null for the others.
	Path *string `json:"path" extensions:"x-nullable" example:"/workspace/main.py"`
	// Request is a port's request, its method and path (no query); null for the others.
	Request *string `json:"request" extensions:"x-nullable" example:"GET /index.html"`
	// Port is the port in the sandbox; null for the others.
	Port *int `json:"port" extensions:"x-nullable" example:"8000"`
	// HTTPStatus is the status the sandbox's app answered (101 for WebSocket connections); null for the others, and when it gave no answer.
	HTTPStatus *int `json:"http_status" extensions:"x-nullable" example:"200"`
	// PreviewID is the preview URL a request came through (kind preview); null for the others.
	PreviewID *string `json:"preview_id" extensions:"x-nullable" example:"prv_k5m2q7x3w9r4t8vz"`
	// PID is the process's id inside the sandbox, for the process kinds and terminal (null for a start that failed); null for the others.
	PID *int `json:"pid" extensions:"x-nullable" example:"42"`
	// Input is what was written to a process (process_input) or typed in a terminal session (terminal), as text, its first 4096 bytes; null for the others.
	Input *string `json:"input" extensions:"x-nullable" example:"print(1)\n"`
	// Signal is the signal sent (process_signal), by name; null for the others.
	Signal *string `json:"signal" extensions:"x-nullable" example:"TERM"`
	// ExitCode is the exec's exit status; null for transfers and for an exec that failed to run.
	ExitCode *int `json:"exit_code" extensions:"x-nullable" example:"0"`
	// Bytes is how many bytes moved: the file or archive, an exec's output, or a port's request and answer (both ways, for WebSocket connections); null when unknown.
	Bytes *int64 `json:"bytes" extensions:"x-nullable" format:"int64" example:"1024"`
	// DurationMS is how long the operation took, in milliseconds.
	DurationMS int64 `json:"duration_ms" format:"int64" example:"412"`
	// TimedOut is true when the exec was killed at its timeout.
	TimedOut bool `json:"timed_out" example:"false"`
	// OOMKilled is true when the sandbox's memory limit killed a process while the exec ran.
	OOMKilled bool `json:"oom_killed" example:"false"`
	// Error is the error code the operation failed with (as in a Problem); null when it succeeded. For egress, why the proxy refused the connection (or ended it early).
	Error *string `json:"error" extensions:"x-nullable" example:"FILE_NOT_FOUND"`
	// Network is a network_update's edit, as JSON: the new allow list and, if the edit set them, the credentials (their secrets by name) and the policies; null for the others.
	Network *string `json:"network" extensions:"x-nullable" example:"{\"allow\":[\"pypi.org\",\"*.pythonhosted.org\"]}"`
	// Host is what an egress record's connection went to: the name the sandbox asked for (TLS server name, HTTP Host, DNS question) or else the address it dialled; null for the others.
	Host *string `json:"host" extensions:"x-nullable" example:"pypi.org"`
	// Allowed is an egress record's verdict; null for the others.
	Allowed *bool `json:"allowed" extensions:"x-nullable" example:"true"`
	// Rule is the allow-list entry that allowed an egress connection; null for the others and for refusals.
	Rule *string `json:"rule" extensions:"x-nullable" example:"pypi.org"`
	// BytesIn is how many bytes came back to the sandbox over an egress connection (bytes counts those it sent); null for the others.
	BytesIn *int64 `json:"bytes_in" extensions:"x-nullable" format:"int64" example:"52144"`
} // @name Activity

// ActivityList is a page of a sandbox's activity, oldest first.
type ActivityList struct {
	Items []Activity `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null when this page was not full.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"7"`
} // @name ActivityList

// ActivityRecorder writes activity records.
type ActivityRecorder interface {
	RecordActivity(ctx context.Context, a domain.Activity) error
}

// ActivityLister reads a sandbox's activity.
type ActivityLister interface {
	httpapi.SandboxGetter
	SandboxActivity(ctx context.Context, sandboxID string, after int64, limit int) ([]domain.Activity, error)
}

// Store is what the data-plane handlers need: the sandbox, and a place to
// record what they did, and to say a record is on its way.
type Store interface {
	httpapi.SandboxGetter
	ActivityRecorder
	expect(sandboxID string) (done func())
}

// activityTimeout bounds the write of an activity record, which outlives
// the request whose operation it records.
const activityTimeout = 5 * time.Second

// RecordActivity writes the record of an operation on sb that began at
// started and ended with err. It runs after the operation, which has had
// its effect, so it does not fail the request: a record that cannot be
// written (Postgres unreachable) is logged as an error and counted in
// tether_activity_record_failures_total, which operators alert on (see
// docs/security.md). Input a record could not hold is refused before the
// operation (filePath, the exec checks).
func RecordActivity(c *gin.Context, log *slog.Logger, st ActivityRecorder, sb domain.Sandbox, a domain.Activity, started time.Time, err error) {
	writeActivity(c.Request.Context(), log, st, activityOf(c, sb, a, started, err), httpapi.RequestID(c))
}

// activityOf completes a, the record of an operation on sb that began at
// started and ended with err: who asked, how long it took, its error code.
func activityOf(c *gin.Context, sb domain.Sandbox, a domain.Activity, started time.Time, err error) domain.Activity {
	a.SandboxID, a.Tenant, a.Caller, a.Duration = sb.ID, sb.Tenant, httpapi.CallerOf(c), time.Since(started)
	if a.Kind == domain.ActivityPreview || a.Kind == domain.ActivityE2BHost {
		a.Caller = domain.Caller{} // no API key: the preview_id, or the kind, says how it came
	}
	if err != nil {
		// The code the client is (or would have been) answered with.
		a.Error = httpapi.ProblemFor(c, slog.New(slog.DiscardHandler), err).Code
	}
	return a
}

// writeActivity writes the complete record a of the request whose context
// is ctx (see RecordActivity), within activityTimeout even if the request
// ends first.
func writeActivity(ctx context.Context, log *slog.Logger, st ActivityRecorder, a domain.Activity, reqID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), activityTimeout)
	defer cancel()
	if rerr := st.RecordActivity(ctx, a); rerr != nil {
		log.ErrorContext(ctx, "activity not recorded", "err", rerr, "sandbox", a.SandboxID, "kind", a.Kind,
			"request_id", reqID)
	}
}

// answerThenRecord answers a successful operation on sb, which began at
// started, with out (200), while its record a is written: the client does
// not wait for the record's round trip to Postgres (about a seventh of a
// local exec's), and the record does not wait for the client to read the
// answer. The handler returns once both are done. A read of the sandbox's
// activity through this replica waits for the records on their way
// (auditedStore.expect); a call another node forwarded is recorded before
// it is answered, so that the node which relays the answer can read the
// record at once too. A read through any other replica, or of the table,
// may come before the record, by the record's round trip.
func answerThenRecord(c *gin.Context, log *slog.Logger, st Store, sb domain.Sandbox, a domain.Activity, started time.Time, out any) error {
	return AnswerWithThenRecord(c, log, st, sb, a, started, http.StatusOK, out)
}

// AnswerWithThenRecord is answerThenRecord with another status than 200.
func AnswerWithThenRecord(c *gin.Context, log *slog.Logger, st Store, sb domain.Sandbox, a domain.Activity, started time.Time,
	status int, out any,
) error {
	a = activityOf(c, sb, a, started, nil)
	ctx, reqID := c.Request.Context(), httpapi.RequestID(c)
	if httpapi.Forwarded(c) {
		writeActivity(ctx, log, st, a, reqID)
		return httpapi.WriteJSON(c, status, out)
	}
	done := st.expect(sb.ID)
	var recording sync.WaitGroup
	recording.Go(func() {
		defer done()
		writeActivity(ctx, log, st, a, reqID)
	})
	httpapi.AnswerNow(c, status, out)
	recording.Wait()
	return nil
}

// recordsOnTheirWay holds, per sandbox, the activity records being written
// while their operations are answered: a channel each, closed once it is
// written.
type recordsOnTheirWay struct {
	mu      sync.Mutex
	pending map[string]map[chan struct{}]struct{}
}

func newRecordsOnTheirWay() *recordsOnTheirWay {
	return &recordsOnTheirWay{pending: map[string]map[chan struct{}]struct{}{}}
}

// expect adds a record of the sandbox id on its way, until done.
func (r *recordsOnTheirWay) expect(id string) (done func()) {
	written := make(chan struct{})
	r.mu.Lock()
	if r.pending[id] == nil {
		r.pending[id] = map[chan struct{}]struct{}{}
	}
	r.pending[id][written] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.pending[id], written)
		if len(r.pending[id]) == 0 {
			delete(r.pending, id)
		}
		r.mu.Unlock()
		close(written)
	}
}

// await waits until the records of the sandbox id that were on their way
// when it was called are written (each within activityTimeout, whatever
// its client does), or ctx ends. Records expected meanwhile are not waited
// for, so a sandbox busy with execs cannot hold a read up.
func (r *recordsOnTheirWay) await(ctx context.Context, id string) {
	r.mu.Lock()
	waits := make([]chan struct{}, 0, len(r.pending[id]))
	for written := range r.pending[id] {
		waits = append(waits, written)
	}
	r.mu.Unlock()
	for _, written := range waits {
		select {
		case <-written:
		case <-ctx.Done():
			return
		}
	}
}

// AuditedStore counts the activity records its store could not write,
// and makes a read of a sandbox's activity wait for its records on their
// way (answerThenRecord).
type AuditedStore struct {
	dataStore
	failures   prometheus.Counter
	onTheirWay *recordsOnTheirWay
}

// dataStore is the store an auditedStore wraps: what the data plane reads
// and writes.
type dataStore interface {
	ActivityLister
	ActivityRecorder
	PreviewStore
}

// NewAuditedStore wraps st, counting on reg the records it fails to write.
func NewAuditedStore(st dataStore, reg prometheus.Registerer) AuditedStore {
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_activity_record_failures_total",
		Help: "Data-plane operations (exec, file and archive transfers) whose activity record could not be written.",
	})
	if reg != nil {
		reg.MustRegister(failures)
	}
	return AuditedStore{dataStore: st, failures: failures, onTheirWay: newRecordsOnTheirWay()}
}

// expect implements Store.
func (s AuditedStore) expect(sandboxID string) (done func()) { return s.onTheirWay.expect(sandboxID) }

// SandboxActivity reads the sandbox's activity once the records this
// replica was writing when the read began are in.
func (s AuditedStore) SandboxActivity(ctx context.Context, sandboxID string, after int64, limit int) ([]domain.Activity, error) {
	s.onTheirWay.await(ctx, sandboxID)
	return s.dataStore.SandboxActivity(ctx, sandboxID, after, limit)
}

// RecordActivity implements activityRecorder.
func (s AuditedStore) RecordActivity(ctx context.Context, a domain.Activity) error {
	err := s.dataStore.RecordActivity(ctx, a)
	if err != nil {
		s.failures.Inc()
	}
	return err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}

func toActivity(a domain.Activity) Activity {
	out := Activity{
		ID: a.ID, SandboxID: a.SandboxID, At: a.At.UTC(), KeyID: httpapi.Optional(a.Caller.KeyID), KeyName: httpapi.CallerName(a.Caller),
		Kind: string(a.Kind), ExitCode: a.ExitCode, Bytes: a.Bytes, DurationMS: a.Duration.Milliseconds(),
		TimedOut: a.TimedOut, OOMKilled: a.OOMKilled, Error: httpapi.Optional(a.Error), PID: optionalInt(a.PID),
	}
	target := a.Target
	switch a.Kind {
	case domain.ActivityExec, domain.ActivityProcessStart:
		out.Command = &target
	case domain.ActivityProcessInput, domain.ActivityTerminal:
		out.Input = &target
	case domain.ActivityProcessSignal:
		out.Signal = &target
	case domain.ActivityPort, domain.ActivityPreview, domain.ActivityE2BHost:
		out.Request, out.PreviewID = &target, httpapi.Optional(a.PreviewID)
		out.Port, out.HTTPStatus = optionalInt(a.Port), optionalInt(a.Status)
	case domain.ActivityNetworkUpdate:
		out.Network = &target
	case domain.ActivityEgress:
		out.Host, out.Port, out.Allowed = &target, optionalInt(a.Port), a.Allowed
		out.Rule, out.BytesIn = httpapi.Optional(a.Rule), a.BytesIn
	default:
		out.Path = &target
	}
	return out
}

// HandleSandboxActivity returns what clients did in a sandbox.
//
//	@Summary		A sandbox's activity
//	@Description	Every exec, file or archive transfer, request to one of its ports (through the API, a preview URL or an E2B sandbox host), process start, input to a process, signal and terminal session made in the sandbox, edit of its network rules, and connection of its own the egress proxy decided, oldest first: who (the API key, or the preview; neither for an E2B host), when, what (the command, truncated to 4096 bytes, the path, the port and request, the process's pid and its input or signal), and how it ended (exit code, HTTP status, bytes moved, duration, timeout, error code). Recorded after each operation; requests refused before reaching the sandbox (bad input, a sandbox that is not ready) are not recorded. Page with cursor (next_cursor of the previous page) or, equivalently, after (the id of the last record seen).
//	@ID				listSandboxActivity
//	@Tags			events
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"																	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"													minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"												example(7)
//	@Param			after	query		integer	false	"return records after this record id (the same position as cursor; pass one)"	format(int64)	minimum(0)	example(7)
//	@Success		200		{object}	ActivityList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/activity [get]
func HandleSandboxActivity(st ActivityLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		items, limit, err := httpapi.SandboxPage(c, st, st.SandboxActivity)
		if err != nil {
			return err
		}
		out := ActivityList{Items: make([]Activity, len(items))}
		for i, a := range items {
			out.Items[i] = toActivity(a)
		}
		if len(items) == limit {
			s := strconv.FormatInt(items[len(items)-1].ID, 10)
			out.NextCursor = &s
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// optionalInt is n, or nil for zero.
func optionalInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
