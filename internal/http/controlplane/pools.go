package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Pool is a warm pool as the API shows it.
type Pool struct {
	// Name identifies the pool within the tenant: 1-63 lowercase letters, digits and '-'.
	Name     string `json:"name" example:"python"`
	Provider string `json:"provider" example:"sim"`
	// Params are the provider-specific options every member is created with (for local, params.image chooses the image).
	Params json.RawMessage `json:"params" swaggertype:"object"`
	// MinReady is how many members the pool keeps, ready or on their way; claims are refilled.
	MinReady int `json:"min_ready" example:"4"`
	// MaxSize caps the pool's unclaimed members: a refill never makes more, and lowering it ends the surplus (reason pool_shrunk).
	MaxSize int `json:"max_size" example:"8"`
	// Size counts the pool's live unclaimed members: requested, creating and ready.
	Size int `json:"size" example:"4"`
	// Ready counts the members ready to be claimed.
	Ready int `json:"ready" example:"3"`
	// Refill is the state of the pool's refills: whether they are backing off after failed members, and the last error they saw.
	Refill    PoolRefill `json:"refill"`
	CreatedAt time.Time  `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05.123456Z"`
	UpdatedAt time.Time  `json:"updated_at" format:"date-time" example:"2026-01-02T15:04:05.123456Z"`
} // @name Pool

// PoolRefill is the state of a pool's refills. A refill round whose members all failed (none became ready) backs the pool off: its next member is requested no sooner than next_attempt_at, then one at a time, each further failed round doubling the wait (POOL_REFILL_BACKOFF, up to POOL_REFILL_MAX_BACKOFF); a member ready again ends it.
type PoolRefill struct {
	// Failures counts the consecutive failed refill rounds; 0: the pool is not backing off.
	Failures int `json:"failures" example:"0"`
	// NextAttemptAt is the earliest the backing-off pool's next member is requested; null: at the refiller's next look.
	NextAttemptAt *time.Time `json:"next_attempt_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:09Z"`
	// LastError is the last error a refill saw: a failed member's error, or the tenant's live-sandbox quota stopping a refill; null if none yet. It stays after the cause is gone (see failures).
	LastError *string `json:"last_error" extensions:"x-nullable" example:"PROVIDER_UNAVAILABLE: image bookworm not found"`
	// LastErrorAt is when that member failed, or when a refill first found the quota reached.
	LastErrorAt *time.Time `json:"last_error_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:08Z"`
	// Pending counts the members refills requested whose outcome (ready or failed) no refill has seen yet.
	Pending int `json:"pending" example:"0"`
} // @name PoolRefill

func toPool(p domain.Pool) Pool {
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	r := PoolRefill{Failures: p.Refill.Failures, Pending: p.Refill.Pending}
	if !p.Refill.NextAt.IsZero() {
		r.NextAttemptAt = httpapi.UTC(&p.Refill.NextAt)
	}
	if p.Refill.Error != "" {
		r.LastError = &p.Refill.Error
	}
	if !p.Refill.ErrorAt.IsZero() {
		r.LastErrorAt = httpapi.UTC(&p.Refill.ErrorAt)
	}
	return Pool{Name: p.Name, Provider: p.Provider, Params: params, MinReady: p.MinReady, MaxSize: p.MaxSize,
		Size: p.Size, Ready: p.Ready, Refill: r, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}
}

// CreatePoolRequest is the body of POST /v1/pools.
type CreatePoolRequest struct {
	// Name identifies the pool within the tenant: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit.
	Name string `json:"name" example:"python"`
	// Provider of the members; default: the server's default provider.
	Provider string `json:"provider,omitempty" example:"sim"`
	// Params are the provider-specific options of every member, as for a create (see GET /v1/providers).
	Params json.RawMessage `json:"params,omitempty" swaggertype:"object"`
	// MinReady is how many members the pool keeps, 0 to max_size.
	MinReady *int `json:"min_ready" example:"4"`
	// MaxSize caps the pool's unclaimed members, 1 to 1000; default: min_ready (at least 1).
	MaxSize *int `json:"max_size,omitempty" example:"8"`
} // @name CreatePoolRequest

// UpdatePoolRequest is the body of PATCH /v1/pools/{name}: the sizes to change.
type UpdatePoolRequest struct {
	// MinReady, if set, is the new number of members to keep, 0 to max_size.
	MinReady *int `json:"min_ready,omitempty" example:"2"`
	// MaxSize, if set, is the new cap, 1 to 1000; below the pool's size, the surplus members end (reason pool_shrunk), those not yet ready first.
	MaxSize *int `json:"max_size,omitempty" example:"4"`
} // @name UpdatePoolRequest

// PoolList is the tenant's pools, by name.
type PoolList struct {
	Items []Pool `json:"items"`
} // @name PoolList

// PoolDeleted reports what deleting a pool did.
type PoolDeleted struct {
	Name string `json:"name" example:"python"`
	// SandboxesEnded counts the unclaimed members this request ended (reason pool_deleted).
	SandboxesEnded int `json:"sandboxes_ended" example:"4"`
} // @name PoolDeleted

// maxPoolSize caps a pool's max_size.
const maxPoolSize = 1000

// PoolStore is what the pool handlers need of the store.
type PoolStore interface {
	CreatePool(ctx context.Context, p domain.Pool) (domain.Pool, error)
	GetPool(ctx context.Context, tenant, name string) (domain.Pool, error)
	ListPools(ctx context.Context, tenant string) ([]domain.Pool, error)
	UpdatePool(ctx context.Context, tenant, name string, u domain.PoolUpdate, by domain.Caller) (domain.Pool, []domain.Sandbox, error)
	DeletePool(ctx context.Context, tenant, name string, by domain.Caller) ([]domain.Sandbox, error)
}

// poolName returns the path's pool name; a malformed one is not found.
func poolName(c *gin.Context) (string, error) {
	name := c.Param("name")
	if !domain.ValidPoolName(name) {
		return "", domain.Errorf(domain.CodeNotFound, "pool %q not found", name)
	}
	return name, nil
}

func poolNotFoundAs(err error, name string) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.CodeNotFound, "pool %s not found", name)
	}
	return err
}

// checkSizes checks a pool's sizes.
func checkSizes(minReady, maxSize int) error {
	if maxSize < 1 || maxSize > maxPoolSize {
		return domain.Errorf(domain.CodeInvalidRequest, "max_size must be between 1 and %d", maxPoolSize)
	}
	if minReady < 0 || minReady > maxSize {
		return domain.Errorf(domain.CodeInvalidRequest, "min_ready must be between 0 and max_size (%d)", maxSize)
	}
	return nil
}

// validatePool checks a pool's request and gives its provider and params
// the checks and the canonical form of a create's.
func validatePool(cfg httpapi.Config, req CreatePoolRequest, providers map[string]domain.Provider) (domain.Pool, error) {
	if !domain.ValidPoolName(req.Name) {
		return domain.Pool{}, domain.Errorf(domain.CodeInvalidRequest,
			"name must be 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
	if req.MinReady == nil {
		return domain.Pool{}, domain.Errorf(domain.CodeInvalidRequest, "min_ready is required")
	}
	maxSize := max(*req.MinReady, 1)
	if req.MaxSize != nil {
		maxSize = *req.MaxSize
	}
	if err := checkSizes(*req.MinReady, maxSize); err != nil {
		return domain.Pool{}, err
	}
	member := CreateSandboxRequest{Provider: req.Provider, Params: req.Params}
	p, err := validateCreate(cfg, &member, providers)
	if err != nil {
		return domain.Pool{}, err
	}
	return domain.Pool{Name: req.Name, Provider: p.Provider, Params: p.Params, MinReady: *req.MinReady, MaxSize: maxSize}, nil
}

// HandlePoolCreate creates a warm pool.
//
//	@Summary		Create a warm pool
//	@Description	Records the pool, empty; Tether's refiller then keeps min_ready members in it: ordinary sandboxes of the pool's provider and params, owned by the owner pool:NAME (a lease Tether holds while the pool exists) and labelled tether.pool=NAME. A create naming the pool (POST /v1/sandboxes with pool) takes a ready member at once. Members count against the tenant's live-sandbox quota.
//	@ID				createPool
//	@Tags			pools
//	@Accept			json
//	@Produce		json
//	@Param			request	body		CreatePoolRequest	true	"the pool"
//	@Success		201		{object}	Pool				"created; Location names the pool"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST or UNKNOWN_PROVIDER"
//	@Failure		403		{object}	httpapi.Problem				"FORBIDDEN: params the operator has not enabled"
//	@Failure		409		{object}	httpapi.Problem				"POOL_EXISTS: the tenant has a pool of that name"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: the tenant has 100 pools, or is over the API key's request rate; retry after Retry-After seconds"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE: the provider cannot create sandboxes on this host; or UNAVAILABLE"
//	@Header			201		{string}	Location			"the pool's URL path, /v1/pools/{name}"
//	@Security		BearerAuth
//	@Router			/v1/pools [post]
func HandlePoolCreate(cfg httpapi.Config, st PoolStore, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		var req CreatePoolRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		p, err := validatePool(cfg, req, providers)
		if err != nil {
			return err
		}
		p.Tenant = httpapi.TenantOf(c)
		p, err = st.CreatePool(c.Request.Context(), p)
		if domain.ErrorCode(err) == domain.CodeQuotaExceeded {
			return httpapi.Exceeded(c, time.Minute, "%s", err.Error())
		}
		if err != nil {
			return err
		}
		c.Header("Location", "/v1/pools/"+p.Name)
		return httpapi.WriteJSON(c, http.StatusCreated, toPool(p))
	}
}

// HandlePoolList lists the tenant's pools.
//
//	@Summary		List warm pools
//	@Description	The tenant's pools by name, each with its size and ready members.
//	@ID				listPools
//	@Tags			pools
//	@Produce		json
//	@Success		200	{object}	PoolList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Security		BearerAuth
//	@Router			/v1/pools [get]
func HandlePoolList(st PoolStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		pools, err := st.ListPools(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := PoolList{Items: make([]Pool, len(pools))}
		for i, p := range pools {
			out.Items[i] = toPool(p)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandlePoolGet returns one pool.
//
//	@Summary		Get a warm pool
//	@Description	The pool with its size (live unclaimed members) and ready (members ready to claim).
//	@ID				getPool
//	@Tags			pools
//	@Produce		json
//	@Param			name	path		string	true	"pool name"	example(python)
//	@Success		200		{object}	Pool
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/pools/{name} [get]
func HandlePoolGet(st PoolStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name, err := poolName(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		p, err := st.GetPool(c.Request.Context(), httpapi.TenantOf(c), name)
		if err != nil {
			return poolNotFoundAs(err, name)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toPool(p))
	}
}

// HandlePoolUpdate changes a pool's sizes.
//
//	@Summary		Resize a warm pool
//	@Description	Changes min_ready and max_size. Lowering max_size below the pool's size ends the surplus unclaimed members at once (reason pool_shrunk), those not yet ready first; raising min_ready is filled by the refiller within an interval. Claimed members are their owners' and are never touched.
//	@ID				updatePool
//	@Tags			pools
//	@Accept			json
//	@Produce		json
//	@Param			name	path		string				true	"pool name"	example(python)
//	@Param			request	body		UpdatePoolRequest	true	"the sizes to change"
//	@Success		200		{object}	Pool
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Security		BearerAuth
//	@Router			/v1/pools/{name} [patch]
func HandlePoolUpdate(st PoolStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name, err := poolName(c)
		if err != nil {
			return err
		}
		var req UpdatePoolRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.MinReady == nil && req.MaxSize == nil {
			return domain.Errorf(domain.CodeInvalidRequest, "name min_ready, max_size or both")
		}
		// Each given size within its bounds; the store checks the pair.
		if err := checkSizes(ptrOr(req.MinReady, 0), ptrOr(req.MaxSize, maxPoolSize)); err != nil {
			return err
		}
		p, _, err := st.UpdatePool(c.Request.Context(), httpapi.TenantOf(c), name,
			domain.PoolUpdate{MinReady: req.MinReady, MaxSize: req.MaxSize}, httpapi.CallerOf(c))
		if err != nil {
			return poolNotFoundAs(err, name)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toPool(p))
	}
}

func ptrOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// HandlePoolDelete deletes a pool.
//
//	@Summary		Delete a warm pool
//	@Description	Deletes the pool and ends its unclaimed members at once (reason pool_deleted); Tether then releases them. Claimed members are their owners' and live on.
//	@ID				deletePool
//	@Tags			pools
//	@Produce		json
//	@Param			name	path		string	true	"pool name"	example(python)
//	@Success		202		{object}	PoolDeleted
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/pools/{name} [delete]
func HandlePoolDelete(st PoolStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name, err := poolName(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		ended, err := st.DeletePool(c.Request.Context(), httpapi.TenantOf(c), name, httpapi.CallerOf(c))
		if err != nil {
			return poolNotFoundAs(err, name)
		}
		return httpapi.WriteJSON(c, http.StatusAccepted, PoolDeleted{Name: name, SandboxesEnded: len(ended)})
	}
}

// poolClaimer is what a create naming a pool needs.
type poolClaimer interface {
	ClaimFromPool(ctx context.Context, p domain.ClaimParams) (domain.PoolClaim, error)
}
