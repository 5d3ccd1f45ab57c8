package processes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// streamHeartbeat is how often an idle stream gets a comment, as the
// events stream does: often enough for proxies that end idle connections
// after 30 s or more.
const streamHeartbeat = 15 * time.Second

// sseStream writes Server-Sent Events: the headers go out with the first
// event (so that a failure before it is still a problem answer), and a
// comment every streamHeartbeat keeps an idle stream open through
// proxies. Events and comments come from two goroutines, hence the lock.
type sseStream struct {
	c       *gin.Context
	mu      sync.Mutex
	started bool
}

// event writes one event whose data is v as JSON.
func (s *sseStream) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start()
	if _, err := fmt.Fprintf(s.c.Writer, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return err
	}
	s.c.Writer.Flush()
	return nil
}

// start sends the headers, once; s.mu is held.
func (s *sseStream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	s.c.Status(http.StatusOK)
	s.c.Writer.WriteHeaderNow()
	s.c.Writer.Flush()
}

// begun reports whether the headers went out.
func (s *sseStream) begun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// heartbeat writes a comment every streamHeartbeat until ctx ends; the
// caller runs it and waits for it.
func (s *sseStream) heartbeat(ctx context.Context) {
	t := time.NewTicker(streamHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			if s.started {
				_, _ = fmt.Fprint(s.c.Writer, ": keep-alive\n\n")
				s.c.Writer.Flush()
			}
			s.mu.Unlock()
		}
	}
}

// follow runs fn, the stream's source, with the heartbeat beside it and
// the server's shutdown ending it; fn's error is then answered: as a
// problem when nothing went out yet, as an error event after, not at all
// when the client left.
func (s *sseStream) follow(log *slog.Logger, draining context.Context, fn func(ctx context.Context) error) error {
	c := s.c
	ctx, cancel := context.WithCancelCause(c.Request.Context())
	defer cancel(nil)
	defer context.AfterFunc(draining, func() { cancel(dataplane.ErrDraining) })()
	var beats sync.WaitGroup
	beats.Go(func() { s.heartbeat(ctx) })
	err := fn(ctx)
	cancel(nil)
	beats.Wait()
	switch {
	case err == nil:
		return nil
	case errors.Is(context.Cause(ctx), dataplane.ErrDraining):
		err = domain.Errorf(domain.CodeUnavailable, "the server is shutting down; attach again (through another replica)")
	case c.Request.Context().Err() != nil:
		log.DebugContext(c.Request.Context(), "stream ended by the client", "err", err)
		return nil //nolint:nilerr // handled: there is no one to answer
	}
	if !s.begun() {
		return err
	}
	return s.event("error", httpapi.ProblemFor(c, log, err))
}

// outputQuery is an output stream's query: where it starts, and how its
// chunks are encoded.
func outputQuery(c *gin.Context) (domain.AttachFrom, bool, error) {
	if err := httpapi.OnlyQuery(c, "from", "encoding"); err != nil {
		return 0, false, err
	}
	from, err := attachFrom(c.Query("from"), domain.AttachNow)
	if err != nil {
		return 0, false, err
	}
	switch c.Query("encoding") {
	case "", dataplane.OutputText:
		return from, false, nil
	case dataplane.OutputBase64:
		return from, true, nil
	}
	return 0, false, domain.Errorf(domain.CodeInvalidRequest, "encoding must be %q (the default) or %q", dataplane.OutputText, dataplane.OutputBase64)
}

// attachFrom reads a from query parameter: now or start, def if absent.
func attachFrom(s string, def domain.AttachFrom) (domain.AttachFrom, error) {
	switch s {
	case "":
		return def, nil
	case "now":
		return domain.AttachNow, nil
	case "start":
		return domain.AttachStart, nil
	}
	return 0, domain.Errorf(domain.CodeInvalidRequest, "from must be now or start")
}

// HandleProcessOutput streams a process's output.
//
//	@Summary		Follow a process's output
//	@Description	Streams the process's output as Server-Sent Events, from now (from=now, the default) or from the start of what the sandbox keeps of it (from=start: all of it, unless more than PROCESS_OUTPUT_BYTES came). Any number of clients may follow one process at once; a client that leaves (or is slow) neither holds up the process nor ends it.
//	@Description
//	@Description	Events: `start` (`{"pid"}`) first; then `stdout`, `stderr` or (a terminal's) `pty`, each a ProcessOutput (`{"data","offset"}`, or with encoding=base64 `{"data":"","data_base64","offset"}`); `dropped` (a ProcessDropped: output that fell out of the kept window before this client read it); and last `exit` (a ProcessExit), after which the stream ends. A process that ended (kept a minute) answers at once: start, its output, exit. A failure after the stream began (the sandbox ended) is an `error` event whose data is a Problem. A comment every 15 s keeps an idle stream open.
//	@ID				followProcessOutput
//	@Tags			processes
//	@Produce		text/event-stream,json
//	@Param			id			path		string	true	"sandbox id"												example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			pid			path		string	true	"the process's pid, or its tag"								example(42)
//	@Param			from		query		string	false	"now (the default): only what comes next; start: what is kept first"	Enums(now, start)	example(start)
//	@Param			encoding	query		string	false	"text (the default) or base64"								Enums(text, base64)	example(text)
//	@Success		200			{object}	ProcessOutput		"the events (text/event-stream)"
//	@Failure		400			{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404			{object}	httpapi.Problem				"NOT_FOUND (the sandbox) or PROCESS_NOT_FOUND"
//	@Failure		409			{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		501			{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503			{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/processes/{pid}/output [get]
func HandleProcessOutput(log *slog.Logger, st dataplane.Store, providers map[string]domain.Provider, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		from, base64, err := outputQuery(c)
		if err != nil {
			return err
		}
		call, err := processOf(c, st, providers, "read processes", true)
		if err != nil {
			return err
		}
		s := &sseStream{c: c}
		out := outputEvents{s: s, enc: dataplane.ChunkEncoder{Base64: base64}}
		return s.follow(log, draining, func(ctx context.Context) error {
			err := call.procs.AttachProcess(ctx, call.sb.ID, call.sel, from, out.emit)
			return httpapi.EndedMeanwhile(c, st, call.sb, "read processes", err)
		})
	}
}

// outputEvents turns an attach's events into a stream's.
type outputEvents struct {
	s   *sseStream
	enc dataplane.ChunkEncoder
	// heldAt is, per stream, the offset of what enc holds back.
	heldAt map[string]int64
}

// emit passes one event of an attach on.
func (o *outputEvents) emit(ev domain.ProcessEvent) error {
	switch ev.Kind {
	case domain.ProcessStart:
		return o.s.event("start", ProcessStarted{PID: ev.PID})
	case domain.ProcessStdout, domain.ProcessStderr, domain.ProcessPTYOutput:
		stream := string(ev.Kind)
		held := int64(len(o.enc.Held[stream]))
		chunk := o.enc.Chunk(stream, ev.Data)
		if o.heldAt == nil {
			o.heldAt = map[string]int64{}
		}
		o.heldAt[stream] = ev.Offset + int64(len(ev.Data)-len(o.enc.Held[stream]))
		return o.s.event(stream, ProcessOutput{Data: chunk.Data, DataBase64: chunk.DataBase64, Offset: ev.Offset - held})
	case domain.ProcessDropped:
		return o.s.event("dropped", ProcessDropped{Bytes: ev.Dropped, Offset: ev.Offset})
	case domain.ProcessEnd:
		if err := o.flush(); err != nil {
			return err
		}
		if ev.Exit == nil {
			return o.s.event("exit", ProcessExit{Code: -1, Status: "unknown"})
		}
		return o.s.event("exit", toProcessExit(*ev.Exit))
	}
	return nil
}

// flush sends what the text encoder holds of each stream (the start of a
// character that never ended) before the exit.
func (o *outputEvents) flush() error {
	for _, stream := range []domain.ProcessEventKind{domain.ProcessStdout, domain.ProcessStderr, domain.ProcessPTYOutput} {
		held := o.enc.Held[string(stream)]
		if len(held) == 0 {
			continue
		}
		delete(o.enc.Held, string(stream))
		out := ProcessOutput{Data: strings.ToValidUTF8(string(held), "\uFFFD"), Offset: o.heldAt[string(stream)]}
		if err := o.s.event(string(stream), out); err != nil {
			return err
		}
	}
	return nil
}
