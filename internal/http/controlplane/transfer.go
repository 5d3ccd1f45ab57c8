package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// OwnerRequest is the body of an owner transfer.
type OwnerRequest struct {
	// Owner becomes the sandbox's owner.
	Owner string `json:"owner" example:"agent-43"`
} // @name OwnerRequest

// OwnerTransferrer is what an owner transfer needs of the store.
type OwnerTransferrer interface {
	outageSettler
	TransferOwner(ctx context.Context, tenant, id, owner string, ttl time.Duration, by domain.Caller) (domain.Sandbox, error)
}

// HandleSandboxOwner hands a sandbox to another owner.
//
//	@Summary		Transfer a sandbox to another owner
//	@Description	Makes owner the sandbox's owner, so that a new process can adopt a sandbox its predecessor created: the sandbox then lives as long as the new owner's lease, which starts with the default owner TTL if the owner has none live. A sandbox has one owner at a time; the change is recorded as an event (reason owner_transferred). Naming the current owner changes nothing. A sandbox that has ended is 409 SANDBOX_STATE_CONFLICT with its state.
//	@ID				transferSandboxOwner
//	@Tags			owners
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string			true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		OwnerRequest	true	"the new owner"
//	@Success		200		{object}	Sandbox
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/owner [put]
func HandleSandboxOwner(cfg httpapi.Config, st OwnerTransferrer) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		var req OwnerRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if err := httpapi.ValidateClientOwner(req.Owner); err != nil {
			return err
		}
		// The new owner's lease is judged: credit an outage first.
		if err := st.SettleOutage(c.Request.Context()); err != nil {
			return err
		}
		sb, err := st.TransferOwner(c.Request.Context(), httpapi.TenantOf(c), id, req.Owner, cfg.DefaultOwnerTTL, httpapi.CallerOf(c))
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSandbox(sb))
	}
}
