package events

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Event is one entry of a sandbox's history: one transition.
type Event struct {
	// ID orders events; pass the last one seen as after (or cursor).
	ID        int64     `json:"id" format:"int64" example:"42"`
	SandboxID string    `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	At        time.Time `json:"at" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	// From is the state before the transition; null for the event that records the request.
	From *string `json:"from" extensions:"x-nullable,x-enum-schema=SandboxState" enums:"requested,creating,ready,pausing,paused,resuming,cancelled,terminated,failed" x-enum-varnames:"SandboxStateRequested,SandboxStateCreating,SandboxStateReady,SandboxStatePausing,SandboxStatePaused,SandboxStateResuming,SandboxStateCancelled,SandboxStateTerminated,SandboxStateFailed" example:"creating"`
	// To is the state after the transition.
	To string `json:"to" extensions:"x-enum-schema=SandboxState" enums:"requested,creating,ready,pausing,paused,resuming,cancelled,terminated,failed" x-enum-varnames:"SandboxStateRequested,SandboxStateCreating,SandboxStateReady,SandboxStatePausing,SandboxStatePaused,SandboxStateResuming,SandboxStateCancelled,SandboxStateTerminated,SandboxStateFailed" example:"ready"`
	// Reason is the reason recorded with the transition (a sandbox's end reason, owner_transferred, outage_credited for an outage credited to its deadline or its owner's lease, or snapshot_requested, snapshot_ready, snapshot_failed, snapshot_lost, snapshot_deleted for a change of one of its snapshots, named in message; those three kinds are records with from equal to to, not transitions); null when there is none.
	Reason *string `json:"reason" extensions:"x-nullable" example:"requested"`
	// Actor is who caused the transition.
	Actor string `json:"actor" enums:"client,executor,janitor" x-enum-varnames:"EventActorClient,EventActorExecutor,EventActorJanitor" example:"executor"`
	// ActorKeyID is the id of the API key a client's transition was made with; null for the executor's and the janitor's.
	ActorKeyID *string `json:"actor_key_id" extensions:"x-nullable" example:"key_k5m2q7x3w9r4t8vz"`
	// ActorKeyName is that API key's name; null with actor_key_id.
	ActorKeyName *string `json:"actor_key_name" extensions:"x-nullable" example:"ci-runner"`
	Message      string  `json:"message" example:"created by provider sim"`
} // @name Event

// EventList is a page of events, oldest first.
type EventList struct {
	Items []Event `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null when this page was not full.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"42"`
} // @name EventList

// EventLister is what the events pages need of the store.
type EventLister interface {
	httpapi.SandboxGetter
	SandboxEvents(ctx context.Context, sandboxID string, after int64, limit int) ([]domain.Event, error)
	TenantEvents(ctx context.Context, tenant string, after int64, limit int) ([]domain.Event, error)
}

func toEvent(e domain.Event) Event {
	return Event{
		ID: e.ID, SandboxID: e.SandboxID, At: e.At.UTC(), From: httpapi.Optional(string(e.From)), To: string(e.To),
		Reason: httpapi.Optional(string(e.Reason)), Actor: string(e.Actor), Message: e.Message,
		ActorKeyID: httpapi.Optional(e.Caller.KeyID), ActorKeyName: httpapi.CallerName(e.Caller),
	}
}

func toEventList(events []domain.Event, limit int) EventList {
	out := EventList{Items: make([]Event, len(events))}
	for i, e := range events {
		out.Items[i] = toEvent(e)
	}
	if len(events) == limit && limit > 0 {
		s := strconv.FormatInt(events[len(events)-1].ID, 10)
		out.NextCursor = &s
	}
	return out
}

// HandleSandboxEvents returns a sandbox's history.
//
//	@Summary		A sandbox's event history
//	@Description	Every transition of the sandbox, oldest first. Page with cursor (next_cursor of the previous page) or, equivalently, after (the id of the last event seen).
//	@ID				listSandboxEvents
//	@Tags			events
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"																example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"												minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"											example(42)
//	@Param			after	query		integer	false	"return events after this event id (the same position as cursor; pass one)"	format(int64)	minimum(0)	example(42)
//	@Success		200		{object}	EventList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/events [get]
func HandleSandboxEvents(st EventLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		events, limit, err := httpapi.SandboxPage(c, st, st.SandboxEvents)
		if err != nil {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, toEventList(events, limit))
	}
}

// HandleEvents returns the tenant's event feed.
//
//	@Summary		The tenant's event feed
//	@Description	Every transition of every sandbox of the tenant, oldest first, for ops tooling. Page with cursor (next_cursor of the previous page) or, equivalently, after (the id of the last event seen); poll with the last id seen to follow the feed.
//	@ID				listEvents
//	@Tags			events
//	@Produce		json
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"												minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"											example(42)
//	@Param			after	query		integer	false	"return events after this event id (the same position as cursor; pass one)"	format(int64)	minimum(0)	example(42)
//	@Success		200		{object}	EventList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Security		BearerAuth
//	@Router			/v1/events [get]
func HandleEvents(st EventLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		after, limit, err := httpapi.ParseEventPage(c)
		if err != nil {
			return err
		}
		events, err := st.TenantEvents(c.Request.Context(), httpapi.TenantOf(c), after, limit)
		if err != nil {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, toEventList(events, limit))
	}
}
