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

// ReconcileEvent is one thing the janitor's reconciliation found at a
// provider and did about it.
type ReconcileEvent struct {
	// ID orders the findings; pass the last one seen as after (or cursor).
	ID        int64     `json:"id" format:"int64" example:"7"`
	At        time.Time `json:"at" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	Provider  string    `json:"provider" example:"local"`
	SandboxID string    `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// Action is what was done: an orphaned resource destroyed (or a failed attempt, retried next round), or a ready sandbox the provider no longer has ended as lost; for snapshots (sandbox_id then holds the snapshot's id), an orphaned snapshot's data removed (or a failed attempt), or a ready snapshot whose data is gone marked lost.
	Action  string `json:"action" enums:"orphan_destroyed,orphan_destroy_failed,lost,snapshot_orphan_deleted,snapshot_orphan_delete_failed,snapshot_lost" x-enum-varnames:"ReconcileActionOrphanDestroyed,ReconcileActionOrphanDestroyFailed,ReconcileActionLost,ReconcileActionSnapshotOrphanDeleted,ReconcileActionSnapshotOrphanDeleteFailed,ReconcileActionSnapshotLost" example:"lost"`
	Message string `json:"message" example:"the provider no longer has this sandbox"`
} // @name ReconcileEvent

// ReconcileEventList is a page of reconciliation findings, oldest first.
type ReconcileEventList struct {
	Items []ReconcileEvent `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null when this page was not full.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"7"`
} // @name ReconcileEventList

// ReconcileLister is what the reconcile events page needs of the store.
type ReconcileLister interface {
	ReconcileEvents(ctx context.Context, tenant string, after int64, limit int) ([]domain.ReconcileEvent, error)
}

// HandleReconcileEvents returns what reconciliation found among the
// tenant's sandboxes.
//
//	@Summary		What reconciliation found
//	@Description	The janitor's reconciliation findings for the tenant's sandboxes, oldest first: resources destroyed as orphans (a sandbox already released whose resource was still there, or a create that finished after its sandbox was cancelled), failed attempts at that, and ready sandboxes their provider lost. Resources of no sandbox Tether knows belong to no tenant and are not shown here (they are in the reconcile_events table). Paged like the event feed.
//	@ID				listReconcileEvents
//	@Tags			events
//	@Produce		json
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"											minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"										example(7)
//	@Param			after	query		integer	false	"return findings after this id (the same position as cursor; pass one)"	format(int64)	minimum(0)	example(7)
//	@Success		200		{object}	ReconcileEventList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Security		BearerAuth
//	@Router			/v1/reconcile-events [get]
func HandleReconcileEvents(st ReconcileLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		after, limit, err := httpapi.ParseEventPage(c)
		if err != nil {
			return err
		}
		items, err := st.ReconcileEvents(c.Request.Context(), httpapi.TenantOf(c), after, limit)
		if err != nil {
			return err
		}
		out := ReconcileEventList{Items: make([]ReconcileEvent, len(items))}
		for i, e := range items {
			out.Items[i] = ReconcileEvent{ID: e.ID, At: e.At.UTC(), Provider: e.Provider, SandboxID: e.SandboxID, Action: e.Action, Message: e.Message}
		}
		if len(items) == limit {
			s := strconv.FormatInt(items[len(items)-1].ID, 10)
			out.NextCursor = &s
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}
