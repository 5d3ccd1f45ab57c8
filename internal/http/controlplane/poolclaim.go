package controlplane

import (
	"maps"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// poolMetrics count the creates that named a pool, by outcome: hit (a
// ready member was claimed), miss (none was; a sandbox was created
// instead) or empty (none was, and pool_only refused).
type poolMetrics struct {
	claims  *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewPoolMetrics registers the pool claim metrics on reg.
func NewPoolMetrics(reg prometheus.Registerer) *poolMetrics {
	m := &poolMetrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_pool_claims_total",
			Help: "Creates that named a warm pool, by outcome: hit (a ready member claimed), miss (created instead), empty (pool_only refused).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_pool_claim_duration_seconds",
			Help:    "Time a create that named a warm pool spent in the registry, by outcome (hit, miss, empty).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.claims, m.latency)
	}
	return m
}

func (m *poolMetrics) observe(outcome string, since time.Time) {
	m.claims.WithLabelValues(outcome).Inc()
	m.latency.WithLabelValues(outcome).Observe(time.Since(since).Seconds())
}

// validateClaim checks a create that names a pool, and returns the
// claim it asks for.
func validateClaim(cfg httpapi.Config, req *CreateSandboxRequest) (domain.ClaimParams, error) {
	var p domain.ClaimParams
	switch {
	case req.Pool == "":
		return p, domain.Errorf(domain.CodeInvalidRequest, "pool_only needs pool")
	case !domain.ValidPoolName(req.Pool):
		return p, domain.Errorf(domain.CodeInvalidRequest, "pool must be a pool name: 1-63 lowercase letters, digits and '-'")
	case req.ID != "":
		return p, domain.Errorf(domain.CodeInvalidRequest, "id cannot be chosen on a pool claim: the pool's members exist before it")
	case req.Provider != "" || len(req.Params) > 0:
		return p, domain.Errorf(domain.CodeInvalidRequest, "provider and params are the pool's on a pool claim: leave them out")
	case len(req.Env) > 0 || req.Setup != "":
		return p, domain.Errorf(domain.CodeInvalidRequest,
			"env and setup cannot apply to a pool claim: its members were created before it; pass env with each exec, or create without pool")
	}
	if req.Owner != "" {
		if err := httpapi.ValidateClientOwner(req.Owner); err != nil {
			return p, err
		}
	}
	if err := httpapi.ValidateLabels(req.Labels); err != nil {
		return p, err
	}
	ttl, err := resolveTTL(cfg, req.TTLSeconds, req.Owner != "")
	if err != nil {
		return p, err
	}
	return domain.ClaimParams{Pool: req.Pool, Owner: req.Owner, Labels: req.Labels, TTL: ttl,
		Explicit: req.TTLSeconds != nil || req.Owner == "", OwnerTTL: cfg.DefaultOwnerTTL, MaxLifetime: cfg.MaxLifetime}, nil
}

// claimFromPool serves a create that names a pool: a ready member claimed
// (201), or a sandbox created like the pool's members when none is ready
// (202; 409 POOL_EMPTY with pool_only). A retry with the same idempotency
// key answers what the first request got (200). Only the fallback passes
// the create quotas q: a claimed member was counted against the tenant's
// live-sandbox cap when it was requested, and moves without a new one.
func claimFromPool(c *gin.Context, cfg httpapi.Config, st SandboxCreator, providers map[string]domain.Provider, q *httpapi.Quotas, pm *poolMetrics, req *CreateSandboxRequest) error {
	p, err := validateClaim(cfg, req)
	if err != nil {
		return err
	}
	p.Tenant, p.Caller = httpapi.TenantOf(c), httpapi.CallerOf(c)
	if p.IdempotencyKey, p.RequestHash, err = idempotencyOf(c, *req); err != nil {
		return err
	}
	if p.Owner != "" {
		// The owner's lease is judged: credit an outage first.
		if err := st.SettleOutage(c.Request.Context()); err != nil {
			return err
		}
	}
	start := time.Now()
	got, err := st.ClaimFromPool(c.Request.Context(), p)
	if err != nil {
		return poolNotFoundAs(err, p.Pool)
	}
	switch {
	case got.Replayed:
		c.Header("Location", "/v1/sandboxes/"+got.Sandbox.ID)
		return httpapi.WriteJSON(c, http.StatusOK, toSandbox(got.Sandbox))
	case got.Claimed:
		pm.observe("hit", start)
		c.Header("Location", "/v1/sandboxes/"+got.Sandbox.ID)
		return httpapi.WriteJSON(c, http.StatusCreated, toSandbox(got.Sandbox))
	case req.PoolOnly:
		pm.observe("empty", start)
		return domain.Errorf(domain.CodePoolEmpty, "pool %s has no ready sandbox (it has %d on their way)", p.Pool, got.Pool.Size)
	}
	// A sandbox like the pool's members, labelled as the pool's.
	labels := maps.Clone(req.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[domain.PoolLabel] = p.Pool
	member := CreateSandboxRequest{Provider: got.Pool.Provider, Params: got.Pool.Params, Owner: req.Owner, Labels: labels, TTLSeconds: req.TTLSeconds}
	cp, err := validateCreate(cfg, &member, providers)
	if err != nil {
		return err
	}
	cp.Tenant, cp.Caller, cp.IdempotencyKey, cp.RequestHash = p.Tenant, p.Caller, p.IdempotencyKey, p.RequestHash
	// The fallback is a new sandbox: it passes the create quotas (the
	// live-sandbox cap and the create rate) like any create.
	if err := q.CheckCreate(c, p.Tenant); err != nil {
		pm.observe("miss", start)
		return err
	}
	err = createSandbox(c, st, cp)
	pm.observe("miss", start)
	return err
}
