package events

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Event stream settings.
const (
	streamBatch     = 500
	streamPoll      = 250 * time.Millisecond
	streamHeartbeat = 15 * time.Second
)

// EventStreamer is what the event stream needs of the store.
type EventStreamer interface {
	StreamStart(ctx context.Context) (domain.StreamPosition, error)
	StreamEvents(ctx context.Context, tenant string, after domain.StreamPosition, limit int) ([]domain.StreamedEvent, error)
}

// allChanges wakes a stream when anything changed; the notifier has it.
type allChanges interface {
	Subscribe() (<-chan domain.Change, func())
}

// StreamSlots counts the open streams of each tenant.
type StreamSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewStreamSlots allows each tenant max open streams.
func NewStreamSlots(max int) *StreamSlots {
	return &StreamSlots{max: max, n: map[string]int{}}
}

func (s *StreamSlots) take(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[tenant] >= s.max {
		return false
	}
	s.n[tenant]++
	return true
}

func (s *StreamSlots) give(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[tenant]--
}

// HandleEventStream streams the tenant's events as they happen.
//
//	@Summary		Follow the tenant's events live
//	@Description	Server-Sent Events: each of the tenant's events as an `event` whose `id` is its stream position and whose data is the Event. Resume after a disconnect with the Last-Event-ID header (or the cursor parameter) set to the last id received: the stream never skips an event and never repeats one, even when transactions commit out of id order. Its order is by transaction, then event id (each sandbox's events in their order). Without a position the stream starts now. A comment line every 15 s keeps idle connections open. A tenant may hold a bounded number of streams at once (429 past it).
//	@ID				streamEvents
//	@Tags			events
//	@Produce		text/event-stream
//	@Param			cursor			query		string	false	"stream position to resume after (the id of the last event received)"	example(1234-56)
//	@Param			Last-Event-ID	header		string	false	"stream position to resume after, as browsers send it"				example(1234-56)
//	@Success		200				{string}	string	"the stream"
//	@Failure		400				{object}	httpapi.Problem	"INVALID_REQUEST"
//	@Failure		429				{object}	httpapi.Problem	"QUOTA_EXCEEDED: too many open streams, or over the API key's request rate"
//	@Security		BearerAuth
//	@Router			/v1/events/stream [get]
func HandleEventStream(st EventStreamer, changes httpapi.ChangeSubscriber, slots *StreamSlots, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c, "cursor"); err != nil {
			return err
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		pos, err := streamFrom(c, st)
		if err != nil {
			return err
		}
		if !slots.take(tenant) {
			return httpapi.Exceeded(c, 5*time.Second, "tenant %s has %d event streams open, its limit", tenant, slots.max)
		}
		defer slots.give(tenant)

		var wake <-chan domain.Change
		if all, ok := changes.(allChanges); ok {
			ch, unsubscribe := all.Subscribe()
			defer unsubscribe()
			wake = ch
		}
		c.Header("Content-Type", "text/event-stream")
		c.Header("Cache-Control", "no-store")
		c.Header("X-Accel-Buffering", "no")
		c.Status(http.StatusOK)
		c.Writer.WriteHeaderNow()
		c.Writer.Flush()
		s := &eventStream{c: c, st: st, tenant: tenant, pos: pos}
		return s.follow(ctx, wake, draining)
	}
}

// streamFrom is the position a stream starts after: the cursor parameter,
// else the Last-Event-ID header, else now.
func streamFrom(c *gin.Context, st EventStreamer) (domain.StreamPosition, error) {
	raw := c.GetHeader("Last-Event-ID")
	if cur, ok := c.GetQuery("cursor"); ok {
		raw = cur
	}
	if raw != "" {
		return httpapi.ParseStreamPosition(raw)
	}
	return st.StreamStart(c.Request.Context())
}

// eventStream is one open event stream: the tenant's events after pos,
// written to c.
type eventStream struct {
	c      *gin.Context
	st     EventStreamer
	tenant string
	pos    domain.StreamPosition
}

// follow sends the events as they come until the client leaves, the
// server drains or the store fails; wake (when not nil) says something
// changed, and the stream also polls and sends a heartbeat comment.
func (s *eventStream) follow(ctx context.Context, wake <-chan domain.Change, draining context.Context) error {
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	heartbeat := time.NewTicker(streamHeartbeat)
	defer heartbeat.Stop()
	for {
		n, stop, err := s.sendBatch(ctx)
		if stop || err != nil {
			return err
		}
		if n == streamBatch {
			continue // more is waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-draining.Done():
			return nil // shutting down: the client resumes elsewhere
		case <-wake:
		case <-poll.C:
		case <-heartbeat.C:
			if _, err := fmt.Fprint(s.c.Writer, ": keep-alive\n\n"); err != nil {
				return nil //nolint:nilerr // the client left
			}
			s.c.Writer.Flush()
		}
	}
}

// sendBatch sends up to streamBatch events after s.pos and moves s.pos
// past them; it returns how many it sent, and stop when the stream is over
// (the client left, or the store failed and the stream said so).
func (s *eventStream) sendBatch(ctx context.Context) (n int, stop bool, err error) {
	events, err := s.st.StreamEvents(ctx, s.tenant, s.pos, streamBatch)
	if err != nil {
		if ctx.Err() != nil {
			return 0, true, nil //nolint:nilerr // the client left
		}
		// Headers are out: say so in the stream, then end it; the client
		// resumes from its last position.
		b, _ := json.Marshal(httpapi.NewProblem(s.c, http.StatusServiceUnavailable, domain.CodeUnavailable,
			"the event stream stopped; resume with Last-Event-ID", ""))
		_, _ = fmt.Fprintf(s.c.Writer, "event: error\ndata: %s\n\n", b)
		return 0, true, nil
	}
	for _, e := range events {
		data, err := json.Marshal(toEvent(e.Event))
		if err != nil {
			return 0, true, err
		}
		if _, err := fmt.Fprintf(s.c.Writer, "id: %s\nevent: event\ndata: %s\n\n", httpapi.FormatStreamPosition(e.Position), data); err != nil {
			return 0, true, nil //nolint:nilerr // the client left
		}
		s.pos = e.Position
	}
	s.c.Writer.Flush()
	return len(events), false, nil
}
