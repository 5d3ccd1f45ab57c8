package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Owner is an owner with its lease and its live sandboxes.
type Owner struct {
	Owner string `json:"owner" example:"agent-42"`
	// ExpiresAt is when its lease lapses (or lapsed) unless renewed.
	ExpiresAt time.Time `json:"expires_at" format:"date-time" example:"2026-01-02T15:05:05Z"`
	// Alive is true while the lease has not lapsed.
	Alive     bool      `json:"alive" example:"true"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// LiveSandboxes counts its sandboxes that have not ended.
	LiveSandboxes int `json:"live_sandboxes" example:"2"`
} // @name Owner

// OwnerList is a page of owners, by name.
type OwnerList struct {
	Items []Owner `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null when this page was not full.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"agent-42"`
} // @name OwnerList

// OwnerLister is what the owner list needs of the store.
type OwnerLister interface {
	ListOwners(ctx context.Context, tenant, after string, limit int) ([]domain.Owner, error)
}

// HandleOwnerList lists the tenant's owners.
//
//	@Summary		List owners
//	@Description	The tenant's owners by name, each with its lease (alive or lapsed) and how many of its sandboxes have not ended. Page with cursor (next_cursor of the previous page).
//	@ID				listOwners
//	@Tags			owners
//	@Produce		json
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"	minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"	example(agent-42)
//	@Success		200		{object}	OwnerList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Security		BearerAuth
//	@Router			/v1/owners [get]
func HandleOwnerList(st OwnerLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c, "limit", "cursor"); err != nil {
			return err
		}
		limit, err := httpapi.ParseLimit(c)
		if err != nil {
			return err
		}
		after := c.Query("cursor")
		if after != "" {
			if err := httpapi.ValidateOwner(after); err != nil {
				return domain.Errorf(domain.CodeInvalidRequest, "cursor must be the next_cursor of a previous page")
			}
		}
		owners, err := st.ListOwners(c.Request.Context(), httpapi.TenantOf(c), after, limit)
		if err != nil {
			return err
		}
		now := time.Now()
		out := OwnerList{Items: make([]Owner, len(owners))}
		for i, o := range owners {
			out.Items[i] = Owner{Owner: o.Name, ExpiresAt: o.ExpiresAt.UTC(), Alive: o.ExpiresAt.After(now),
				CreatedAt: o.CreatedAt.UTC(), LiveSandboxes: o.Live}
		}
		if len(owners) == limit {
			next := owners[len(owners)-1].Name
			out.NextCursor = &next
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}
