package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// TTLRequest is the body of a lease heartbeat or a renewal.
type TTLRequest struct {
	// TTLSeconds is the new lifetime from now, 1 to the server's max lifetime.
	TTLSeconds *int64 `json:"ttl_seconds" format:"int64" example:"60"`
} // @name TTLRequest

// OwnerLease is an owner's lease.
type OwnerLease struct {
	Owner string `json:"owner" example:"agent-42"`
	// ExpiresAt is when the lease lapses unless renewed.
	ExpiresAt time.Time `json:"expires_at" format:"date-time" example:"2026-01-02T15:05:05Z"`
} // @name OwnerLease

// OwnerRelease reports what ending an owner did.
type OwnerRelease struct {
	Owner string `json:"owner" example:"agent-42"`
	// SandboxesEnded counts the live sandboxes this request ended.
	SandboxesEnded int `json:"sandboxes_ended" example:"2"`
	// SandboxIDs are the ids of the sandboxes this request ended.
	SandboxIDs []string `json:"sandbox_ids" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
} // @name OwnerRelease

// RenewedSandbox is a sandbox after a renewal. The OpenAPI document shows it
// as Sandbox plus capped (renewSandbox's 200 response, Sandbox{capped=bool}),
// not as a second copy of Sandbox's fields.
type RenewedSandbox struct {
	Sandbox
	// Capped is true when now+ttl_seconds ran past the max lifetime and the
	// deadline was set to the max lifetime instead.
	Capped bool `json:"capped"`
}

// AppendJSON is not the embedded Sandbox's, which would leave capped out:
// a RenewedSandbox is encoded by encoding/json.
func (RenewedSandbox) AppendJSON(b []byte) ([]byte, bool) { return b, false }

// outageSettler credits any outage before a lease is judged (see
// store.SettleOutage): every handler whose call may end an owner's
// sandboxes for a lapsed lease runs it first.
type outageSettler interface {
	SettleOutage(ctx context.Context) error
}

// OwnerStore is what the owner lease handlers need of the store.
type OwnerStore interface {
	outageSettler
	RenewOwnerLease(ctx context.Context, tenant, owner string, ttl time.Duration) (time.Time, error)
	ReleaseOwner(ctx context.Context, tenant, owner string, by domain.Caller) ([]domain.Sandbox, error)
}

// SandboxRenewer is what a renew needs of the store.
type SandboxRenewer interface {
	RenewSandbox(ctx context.Context, tenant, id string, ttl, maxLifetime time.Duration) (domain.Sandbox, bool, error)
}

// decodeTTL reads a TTLRequest and checks its bounds.
func decodeTTL(c *gin.Context, maxLifetime time.Duration) (time.Duration, error) {
	var req TTLRequest
	if err := httpapi.DecodeJSON(c, &req); err != nil {
		return 0, err
	}
	if req.TTLSeconds == nil {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "ttl_seconds is required")
	}
	maxSeconds := int64(maxLifetime / time.Second)
	if *req.TTLSeconds <= 0 || *req.TTLSeconds > maxSeconds {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "ttl_seconds must be between 1 and %d (the max lifetime)", maxSeconds)
	}
	return time.Duration(*req.TTLSeconds) * time.Second, nil
}

func ownerParam(c *gin.Context) (string, error) {
	owner := c.Param("owner")
	if err := httpapi.ValidateClientOwner(owner); err != nil {
		return "", err
	}
	return owner, nil
}

// HandleOwnerLease renews an owner's lease.
//
//	@Summary		Heartbeat an owner's lease
//	@Description	The owner is alive until now+ttl_seconds. When the lease lapses, the janitor ends the owner's sandboxes (reason owner_expired). An owner comes into being when a create names it; an owner this tenant never named is 404. A heartbeat after the lease lapsed starts a new lease; the sandboxes that outlived the old one are ended.
//	@ID				putOwnerLease
//	@Tags			owners
//	@Accept			json
//	@Produce		json
//	@Param			owner	path		string		true	"owner name"	example(agent-42)
//	@Param			request	body		TTLRequest	true	"the lease length"
//	@Success		200		{object}	OwnerLease
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND: an owner no create named"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Security		BearerAuth
//	@Router			/v1/owners/{owner}/lease [put]
func HandleOwnerLease(cfg httpapi.Config, st OwnerStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		owner, err := ownerParam(c)
		if err != nil {
			return err
		}
		ttl, err := decodeTTL(c, cfg.MaxLifetime)
		if err != nil {
			return err
		}
		// A lapsed lease ends the owner's sandboxes: credit an outage first.
		if err := st.SettleOutage(c.Request.Context()); err != nil {
			return err
		}
		expires, err := st.RenewOwnerLease(c.Request.Context(), httpapi.TenantOf(c), owner, ttl)
		if err != nil {
			if domain.ErrorCode(err) == domain.CodeNotFound {
				return domain.Errorf(domain.CodeNotFound, "owner %q not found: an owner comes into being when a sandbox create names it", owner)
			}
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, OwnerLease{Owner: owner, ExpiresAt: expires.UTC()})
	}
}

// HandleOwnerRelease ends an owner.
//
//	@Summary		End an owner
//	@Description	The owner is done: its lease ends and all its live sandboxes are cancelled or terminated with reason owner_released. Idempotent; an owner with no sandboxes is not an error.
//	@ID				releaseOwner
//	@Tags			owners
//	@Produce		json
//	@Param			owner	path		string	true	"owner name"	example(agent-42)
//	@Success		202		{object}	OwnerRelease
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: not an owner name"
//	@Security		BearerAuth
//	@Router			/v1/owners/{owner} [delete]
func HandleOwnerRelease(st OwnerStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		owner, err := ownerParam(c)
		if err != nil {
			return err
		}
		ended, err := st.ReleaseOwner(c.Request.Context(), httpapi.TenantOf(c), owner, httpapi.CallerOf(c))
		if err != nil {
			return err
		}
		out := OwnerRelease{Owner: owner, SandboxesEnded: len(ended), SandboxIDs: make([]string, len(ended))}
		for i, sb := range ended {
			out.SandboxIDs[i] = sb.ID
		}
		return httpapi.WriteJSON(c, http.StatusAccepted, out)
	}
}

// HandleSandboxRenew moves a sandbox's deadline.
//
//	@Summary		Renew a sandbox's TTL
//	@Description	Sets the deadline to now+ttl_seconds, capped at the sandbox's creation plus the max lifetime (capped says so). Renewing a sandbox that has ended is 409 SANDBOX_STATE_CONFLICT.
//	@ID				renewSandbox
//	@Tags			sandboxes
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string					true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		TTLRequest				true	"the new lifetime"
//	@Success		200		{object}	Sandbox{capped=bool}	"the sandbox; capped is true when the deadline was cut to the max lifetime"
//	@Failure		400		{object}	httpapi.Problem					"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem					"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem					"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem					"PAYLOAD_TOO_LARGE"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/renew [post]
func HandleSandboxRenew(cfg httpapi.Config, st SandboxRenewer) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		ttl, err := decodeTTL(c, cfg.MaxLifetime)
		if err != nil {
			return err
		}
		sb, capped, err := st.RenewSandbox(c.Request.Context(), httpapi.TenantOf(c), id, ttl, cfg.MaxLifetime)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, RenewedSandbox{Sandbox: toSandbox(sb), Capped: capped})
	}
}
