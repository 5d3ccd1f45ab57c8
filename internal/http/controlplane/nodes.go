package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Node is a host Tether replicas run on.
type Node struct {
	// ID is the node's id (NODE_ID).
	ID string `json:"id" example:"host-a-3f9c2e1d"`
	// Providers are the providers enabled on the node.
	Providers []string `json:"providers" example:"local,sim"`
	// Alive is true while the node's heartbeat is within NODE_GRACE.
	Alive bool `json:"alive" example:"true"`
	// StartedAt is when a replica of the node last started.
	StartedAt time.Time `json:"started_at" format:"date-time" example:"2026-12-01T09:00:00Z"`
	// HeartbeatAt is the node's last heartbeat, at the database's clock.
	HeartbeatAt time.Time `json:"heartbeat_at" format:"date-time" example:"2026-12-01T09:30:00Z"`
	// LiveSandboxes counts the caller's tenant's live sandboxes placed on the node.
	LiveSandboxes int `json:"live_sandboxes" example:"12"`
} // @name Node

// NodeList lists the nodes.
type NodeList struct {
	Items []Node `json:"items"`
} // @name NodeList

// NodeLister lists the nodes with a tenant's sandbox counts.
type NodeLister interface {
	Nodes(ctx context.Context, tenant string) ([]domain.Node, error)
}

// HandleNodeList lists the nodes.
//
//	@Summary		List nodes
//	@Description	The nodes (hosts) Tether replicas run on, alive or not, by id. A sandbox of a host-bound provider (local) lives on one node (its `node` field); a node whose heartbeat lapses past NODE_GRACE is dead, and its ready sandboxes end with reason lost. Counts are of the caller's tenant's sandboxes. Nodes' addresses are not shown.
//	@ID				listNodes
//	@Tags			providers
//	@Produce		json
//	@Success		200	{object}	NodeList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter (it takes none)"
//	@Security		BearerAuth
//	@Router			/v1/nodes [get]
func HandleNodeList(st NodeLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		nodes, err := st.Nodes(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := NodeList{Items: make([]Node, len(nodes))}
		for i, n := range nodes {
			out.Items[i] = Node{
				ID: n.ID, Providers: n.Providers, Alive: n.Alive,
				StartedAt: n.StartedAt.UTC(), HeartbeatAt: n.HeartbeatAt.UTC(), LiveSandboxes: n.LiveSandboxes,
			}
		}
		c.JSON(http.StatusOK, out)
		return nil
	}
}
