package http

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// Event is one entry of a sandbox's history: one transition.
type Event struct {
	// ID orders events; pass the last one seen as after (or cursor).
	ID        int64     `json:"id" example:"42"`
	SandboxID string    `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3z"`
	At        time.Time `json:"at"`
	// From is null for the event that records the request.
	From    *string `json:"from" example:"creating"`
	To      string  `json:"to" example:"ready"`
	Reason  *string `json:"reason" example:"requested"`
	Actor   string  `json:"actor" enums:"client,executor,janitor" example:"executor"`
	Message string  `json:"message"`
} // @name Event

// EventList is a page of events, oldest first.
type EventList struct {
	Items []Event `json:"items"`
	// NextCursor fetches the next page; null when this page was not full.
	NextCursor *string `json:"next_cursor"`
} // @name EventList

type eventLister interface {
	sandboxGetter
	SandboxEvents(ctx context.Context, sandboxID string, after int64, limit int) ([]sandbox.Event, error)
	TenantEvents(ctx context.Context, tenant string, after int64, limit int) ([]sandbox.Event, error)
}

func toEventList(events []sandbox.Event, limit int) EventList {
	out := EventList{Items: make([]Event, len(events))}
	for i, e := range events {
		out.Items[i] = Event{
			ID: e.ID, SandboxID: e.SandboxID, At: e.At.UTC(), From: optional(string(e.From)), To: string(e.To),
			Reason: optional(string(e.Reason)), Actor: string(e.Actor), Message: e.Message,
		}
	}
	if len(events) == limit && limit > 0 {
		s := strconv.FormatInt(events[len(events)-1].ID, 10)
		out.NextCursor = &s
	}
	return out
}

// parseAfter reads the event position from after or cursor (they are the
// same: the id of the last event seen).
func parseAfter(c *gin.Context) (int64, error) {
	v, ok := c.GetQuery("after")
	if cur, has := c.GetQuery("cursor"); has {
		if ok && cur != v {
			return 0, sandbox.Errorf(sandbox.CodeInvalidRequest, "after and cursor disagree; pass one")
		}
		v, ok = cur, true
	}
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, sandbox.Errorf(sandbox.CodeInvalidRequest, "after/cursor must be an event id (a non-negative integer)")
	}
	return n, nil
}

// parseEventPage reads an event page's position and size from the query,
// refusing any other parameter.
func parseEventPage(c *gin.Context) (after int64, limit int, err error) {
	if err := onlyQuery(c, "after", "limit", "cursor"); err != nil {
		return 0, 0, err
	}
	if limit, err = parseLimit(c); err != nil {
		return 0, 0, err
	}
	after, err = parseAfter(c)
	return after, limit, err
}

// handleSandboxEvents returns a sandbox's history.
//
//	@Summary		A sandbox's event history
//	@Description	Every transition of the sandbox, oldest first.
//	@Tags			events
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"
//	@Param			cursor	query		string	false	"next_cursor of the previous page"
//	@Success		200		{object}	EventList
//	@Failure		400		{object}	Problem
//	@Failure		401		{object}	Problem
//	@Failure		404		{object}	Problem
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/events [get]
func handleSandboxEvents(st eventLister) handlerFunc {
	return func(c *gin.Context) error {
		id, err := sandboxID(c)
		if err != nil {
			return err
		}
		after, limit, err := parseEventPage(c)
		if err != nil {
			return err
		}
		if _, err := st.GetSandbox(c.Request.Context(), tenantOf(c), id); err != nil {
			return notFoundAs(err, id)
		}
		events, err := st.SandboxEvents(c.Request.Context(), id, after, limit)
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusOK, toEventList(events, limit))
	}
}

// handleEvents returns the tenant's event feed.
//
//	@Summary		The tenant's event feed
//	@Description	Every transition of every sandbox of the tenant, oldest first, for ops tooling: poll with after set to the last id seen.
//	@Tags			events
//	@Produce		json
//	@Param			after	query		int	false	"return events after this event id"
//	@Param			limit	query		int	false	"page size, 1-500 (default 50)"
//	@Success		200		{object}	EventList
//	@Failure		400		{object}	Problem
//	@Failure		401		{object}	Problem
//	@Security		BearerAuth
//	@Router			/v1/events [get]
func handleEvents(st eventLister) handlerFunc {
	return func(c *gin.Context) error {
		after, limit, err := parseEventPage(c)
		if err != nil {
			return err
		}
		events, err := st.TenantEvents(c.Request.Context(), tenantOf(c), after, limit)
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusOK, toEventList(events, limit))
	}
}
