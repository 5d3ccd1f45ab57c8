package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Sandbox is a sandbox as the API shows it.
//
// Schema rules, which the OpenAPI document and its tests hold to: a field
// without omitempty is always present (required); a pointer field without
// omitempty is null when unset and carries extensions:"x-nullable"; times
// are RFC 3339 (format date-time); an enum names its constants
// (x-enum-varnames) and, when more than one field shares it, its schema
// (extensions:"x-enum-schema=NAME"). internal/openapi applies these.
type Sandbox struct {
	ID string `json:"id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// State is where the sandbox is in its lifecycle: requested, creating, ready, pausing, paused and resuming are live, the rest terminal.
	State    string `json:"state" extensions:"x-enum-schema=SandboxState" enums:"requested,creating,ready,pausing,paused,resuming,cancelled,terminated,failed" x-enum-varnames:"SandboxStateRequested,SandboxStateCreating,SandboxStateReady,SandboxStatePausing,SandboxStatePaused,SandboxStateResuming,SandboxStateCancelled,SandboxStateTerminated,SandboxStateFailed" example:"ready"`
	Provider string `json:"provider" example:"sim"`
	// Owner is the client that owns the sandbox; null for a sandbox without one.
	Owner  *string           `json:"owner" extensions:"x-nullable" example:"agent-42"`
	Labels map[string]string `json:"labels" example:"team:ml"`
	// Reason says why a terminal sandbox ended; null while it is live.
	Reason *string `json:"reason" extensions:"x-nullable,x-enum-schema=SandboxReason" enums:"requested,owner_released,owner_expired,expired,create_failed,lost,pause_failed,resume_failed,pool_deleted,pool_shrunk" x-enum-varnames:"SandboxReasonRequested,SandboxReasonOwnerReleased,SandboxReasonOwnerExpired,SandboxReasonExpired,SandboxReasonCreateFailed,SandboxReasonLost,SandboxReasonPauseFailed,SandboxReasonResumeFailed,SandboxReasonPoolDeleted,SandboxReasonPoolShrunk" example:"requested"`
	// Error is why creation (or a pause or resume) failed or was refused, or the last retryable error while creating, pausing or resuming; null when there is none.
	Error *string `json:"error" extensions:"x-nullable" example:"provider sim: out of capacity"`
	// Released is true once the provider confirmed the sandbox's resources gone.
	Released bool `json:"released" example:"false"`
	// ReleaseError is the last failed destroy's error while released is false; absent when there is none.
	ReleaseError *string `json:"release_error,omitempty"`
	// ProviderID is the provider's own name for the sandbox, once ready; null before.
	ProviderID *string `json:"provider_id" extensions:"x-nullable" example:"sim-5q3k8w1m"`
	// WorkDir is the working directory inside the sandbox, once ready; null before.
	WorkDir *string `json:"work_dir" extensions:"x-nullable" example:"/workspace"`
	// Node is the node (host) a sandbox of a host-bound provider (local) was placed on when its creation began; null for other providers and before. Any replica serves its exec and file calls, forwarding them to this node.
	Node *string `json:"node" extensions:"x-nullable" example:"host-a-3f9c2e1d"`
	// Attempts counts the provider create calls made so far.
	Attempts  int       `json:"attempts" example:"1"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05.123456Z"`
	UpdatedAt time.Time `json:"updated_at" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	// ReadyAt is when the sandbox became ready; null until then.
	ReadyAt *time.Time `json:"ready_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	// EndedAt is when the sandbox reached a terminal state; null while it is live.
	EndedAt *time.Time `json:"ended_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T16:04:05Z"`
	// ReleasedAt is when the provider confirmed the resources gone; null until then.
	ReleasedAt *time.Time `json:"released_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T16:04:06Z"`
	// ExpiresAt is the deadline after which the sandbox is ended (reason expired).
	// While it is paused and the operator set PAUSED_TTL, it is the paused
	// deadline: the TTL clock is stopped, and a resume sets it to the TTL left.
	ExpiresAt time.Time `json:"expires_at" format:"date-time" example:"2026-01-02T16:04:05Z"`
	// CreateDeadline is when creation gives up and the sandbox fails.
	CreateDeadline time.Time `json:"create_deadline" format:"date-time" example:"2026-01-02T15:09:05Z"`
	// PauseDeadline is when the pause or resume in flight (or the last one) gives up and the sandbox fails; null before the first.
	PauseDeadline *time.Time `json:"pause_deadline" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:11:05Z"`
	// OnEnd is snapshot for a sandbox whose /workspace is snapshotted when it ends by owner_expired, expired or requested (an exit snapshot); null: none.
	OnEnd *string `json:"on_end" extensions:"x-nullable" example:"snapshot"`
	// FromSnapshot is the snapshot the sandbox started from; null for a fresh one.
	FromSnapshot *string `json:"from_snapshot" extensions:"x-nullable" example:"snp_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
} // @name Sandbox

func toSandbox(sb domain.Sandbox) Sandbox {
	labels := sb.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	out := Sandbox{
		ID:             sb.ID,
		State:          string(sb.State),
		Provider:       sb.Provider,
		Owner:          httpapi.Optional(sb.Owner),
		Labels:         labels,
		Reason:         httpapi.Optional(string(sb.Reason)),
		Error:          httpapi.Optional(sb.Error),
		Released:       sb.Released,
		ProviderID:     httpapi.Optional(sb.ProviderID),
		WorkDir:        httpapi.Optional(sb.WorkDir),
		Node:           httpapi.Optional(sb.Node),
		Attempts:       sb.Attempts,
		CreatedAt:      sb.CreatedAt.UTC(),
		UpdatedAt:      sb.UpdatedAt.UTC(),
		ReadyAt:        httpapi.UTC(sb.ReadyAt),
		EndedAt:        httpapi.UTC(sb.EndedAt),
		ReleasedAt:     httpapi.UTC(sb.ReleasedAt),
		ExpiresAt:      sb.ExpiresAt.UTC(),
		CreateDeadline: sb.CreateDeadline.UTC(),
		PauseDeadline:  httpapi.UTC(sb.PauseDeadline),
		OnEnd:          httpapi.Optional(sb.OnEnd),
		FromSnapshot:   httpapi.Optional(sb.FromSnapshot),
	}
	if !sb.Released {
		out.ReleaseError = httpapi.Optional(sb.ReleaseError)
	}
	return out
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// ID is the sandbox's id, chosen by the client so that it knows the id before any I/O: "sbx_" and 26 characters of the alphabet 0-9 a-z without i l o u (the first 10 encode the creation time in milliseconds, the rest are random). Default: the server chooses one. A create with an id is idempotent on it (the same request again returns the same sandbox, 200); another request with the same id is 409 IDEMPOTENCY_KEY_REUSED, and an id already taken is 409 SANDBOX_ID_TAKEN.
	ID string `json:"id,omitempty" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// Provider to create the sandbox with; default: the server's default provider.
	Provider string `json:"provider,omitempty" example:"sim"`
	// Owner is the client that owns the sandbox; the sandbox ends when the owner's lease lapses.
	Owner string `json:"owner,omitempty" example:"agent-42"`
	// Labels are free-form key/value pairs to filter by.
	Labels map[string]string `json:"labels,omitempty" example:"team:ml"`
	// TTLSeconds is the sandbox's lifetime; default: the server's default TTL.
	TTLSeconds *int64 `json:"ttl_seconds,omitempty" format:"int64" example:"3600"`
	// Env is set for the setup script and commands run in the sandbox.
	Env map[string]string `json:"env,omitempty" example:"PYTHONUNBUFFERED:1"`
	// Setup is a shell script run inside the sandbox before it counts as ready; failure means failed.
	Setup string `json:"setup,omitempty" example:"pip install -q requests"`
	// Params are provider-specific options, a JSON object of any shape (see GET /v1/providers and docs/providers.md).
	Params json.RawMessage `json:"params,omitempty" swaggertype:"object"`
	// Pool names a warm pool of the tenant to take a ready sandbox from (201, ready at once): its owner, labels and ttl_seconds apply to the member taken; its provider and params are the pool's, and id, provider, params, env and setup are refused (400; pass env per exec instead). With no member ready, the sandbox is created like the pool's members (202), unless pool_only.
	Pool string `json:"pool,omitempty" example:"python"`
	// PoolOnly, with pool, answers 409 POOL_EMPTY instead of creating a sandbox when no member is ready.
	PoolOnly bool `json:"pool_only,omitempty" example:"false"`
	// FromSnapshot names a ready snapshot of the tenant, of the create's provider, that the sandbox starts from: its /workspace holds the snapshot's files. An unknown snapshot (or another tenant's) is 404 NOT_FOUND, one not ready 409 SNAPSHOT_NOT_READY, one of another provider 422 SNAPSHOT_PROVIDER_MISMATCH; a provider without snapshots, 501 NOT_SUPPORTED. Not with pool.
	FromSnapshot string `json:"from_snapshot,omitempty" example:"snp_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// OnEnd "snapshot" takes an exit snapshot of the sandbox's /workspace before its resources are destroyed when it ends by owner_expired, expired or requested (its owner crashed, its TTL ran out, a client deleted it), so that a new sandbox can start from it; "none" takes none. Default: the server's DEFAULT_ON_END for a provider that snapshots. Not with pool.
	OnEnd string `json:"on_end,omitempty" enums:"snapshot,none" x-enum-varnames:"OnEndSnapshot,OnEndNone" example:"snapshot"`
} // @name CreateSandboxRequest

// SandboxList is a page of sandboxes.
type SandboxList struct {
	Items []Sandbox `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null at the end.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"MTc2NzM2NjI0NTEyMzQ1NnxzYnhfNXEzazh3MW0ybjRwNnI3czl0MHYxeDJ5M3o"`
} // @name SandboxList

// SandboxCreator is what a create (and a pool claim) needs of the store.
type SandboxCreator interface {
	outageSettler
	poolClaimer
	CreateSandbox(ctx context.Context, p domain.CreateParams) (domain.Sandbox, bool, error)
	GetSnapshot(ctx context.Context, tenant, id string) (domain.Snapshot, error)
}

// SandboxLister is what the sandbox list needs of the store.
type SandboxLister interface {
	ListSandboxes(ctx context.Context, f domain.ListFilter) ([]domain.Sandbox, *domain.Cursor, error)
}

// SandboxEnder is what an end (DELETE) needs of the store.
type SandboxEnder interface {
	EndSandbox(ctx context.Context, tenant, id string, reason domain.Reason, actor domain.Actor, by domain.Caller, message string) (domain.Sandbox, bool, error)
}

// HandleSandboxCreate requests a sandbox.
//
//	@Summary		Request a sandbox
//	@Description	Records the request and returns at once with the sandbox in state requested; an executor creates it asynchronously. With an Idempotency-Key (or a client-chosen id, which then serves as the key), repeating the same request returns the same sandbox (200) and a different request with the same key is 409 IDEMPOTENCY_KEY_REUSED. With pool, a ready member of that warm pool is claimed instead, in one statement, and returned ready (201): it moves from the pool's owner to owner (an owner_transferred event), and labels and ttl_seconds apply; with no member ready, a sandbox like the pool's members is requested (202), or with pool_only the answer is 409 POOL_EMPTY.
//	@ID				createSandbox
//	@Tags			sandboxes
//	@Accept			json
//	@Produce		json
//	@Param			Idempotency-Key	header		string					false	"makes retries of this request safe: 1-255 printable ASCII characters"	minlength(1)	maxlength(255)	example(create-7f3a9c)
//	@Param			request			body		CreateSandboxRequest	true	"the sandbox to create"
//	@Success		202				{object}	Sandbox					"accepted; Location names the sandbox"
//	@Success		201				{object}	Sandbox					"claimed from the pool, ready; Location names the sandbox"
//	@Success		200				{object}	Sandbox					"an earlier request with this Idempotency-Key made this sandbox"
//	@Failure		400				{object}	httpapi.Problem					"INVALID_REQUEST or UNKNOWN_PROVIDER"
//	@Failure		403				{object}	httpapi.Problem					"FORBIDDEN: params the operator has not enabled"
//	@Failure		404				{object}	httpapi.Problem					"NOT_FOUND: the pool named does not exist, or the snapshot from_snapshot names (or it is another tenant's)"
//	@Failure		409				{object}	httpapi.Problem					"IDEMPOTENCY_KEY_REUSED, or SANDBOX_ID_TAKEN: the client-chosen id names another sandbox, or POOL_EMPTY: pool_only and no member ready, or SNAPSHOT_NOT_READY: from_snapshot names a snapshot that is not ready"
//	@Failure		413				{object}	httpapi.Problem					"PAYLOAD_TOO_LARGE"
//	@Failure		422				{object}	httpapi.Problem					"SNAPSHOT_PROVIDER_MISMATCH: from_snapshot names a snapshot of another provider"
//	@Failure		429				{object}	httpapi.Problem					"QUOTA_EXCEEDED: over the tenant's live-sandbox cap or create rate (TENANT_MAX_LIVE, TENANT_CREATES_PER_MINUTE, or the tenant's own; a quota of 0 is no limit), or the API key's request rate; retry after Retry-After seconds"
//	@Failure		501				{object}	httpapi.Problem					"NOT_SUPPORTED: from_snapshot or on_end snapshot with a provider that cannot snapshot sandboxes"
//	@Failure		503				{object}	httpapi.Problem					"PROVIDER_UNAVAILABLE: the provider cannot create sandboxes on this host; or UNAVAILABLE"
//	@Header			200,201,202		{string}	Location				"the sandbox's URL path, /v1/sandboxes/{id}"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes [post]
func HandleSandboxCreate(cfg httpapi.Config, st SandboxCreator, providers map[string]domain.Provider, q *httpapi.Quotas, pm *poolMetrics) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		var req CreateSandboxRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.Pool != "" || req.PoolOnly {
			if req.FromSnapshot != "" || req.OnEnd != "" {
				return domain.Errorf(domain.CodeInvalidRequest, "from_snapshot and on_end cannot be given with pool")
			}
			// A claim of a ready member adds no sandbox: the create quotas
			// apply to its fallback create only (claimFromPool).
			return claimFromPool(c, cfg, st, providers, q, pm, &req)
		}
		// Over a create quota: 429 before anything is written.
		if err := q.CheckCreate(c, httpapi.TenantOf(c)); err != nil {
			return err
		}
		p, err := validateCreate(cfg, &req, providers)
		if err != nil {
			return err
		}
		p.Tenant, p.Caller = httpapi.TenantOf(c), httpapi.CallerOf(c)
		prov := providers[p.Provider]
		if p.OnEnd, err = resolveOnEnd(cfg, prov, req.OnEnd); err != nil {
			return err
		}
		if req.FromSnapshot != "" {
			if err := startFrom(c.Request.Context(), st, prov, p.Tenant, req.FromSnapshot, &p); err != nil {
				return err
			}
		}
		if p.IdempotencyKey, p.RequestHash, err = idempotencyOf(c, req); err != nil {
			return err
		}
		return createSandbox(c, st, p)
	}
}

// createSandbox records the validated create p and answers it.
func createSandbox(c *gin.Context, st SandboxCreator, p domain.CreateParams) error {
	if p.Owner != "" {
		// The owner's lease is judged: credit an outage first.
		if err := st.SettleOutage(c.Request.Context()); err != nil {
			return err
		}
	}
	sb, created, err := st.CreateSandbox(c.Request.Context(), p)
	if err != nil {
		return err
	}
	c.Header("Location", "/v1/sandboxes/"+sb.ID)
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
	}
	return httpapi.WriteJSON(c, status, toSandbox(sb))
}

// idempotencyOf returns the create's idempotency key, and the hash of the
// request it covers; none without a key.
func idempotencyOf(c *gin.Context, req CreateSandboxRequest) (string, []byte, error) {
	key := c.GetHeader("Idempotency-Key")
	if key != "" && !validIdempotencyKey(key) {
		return "", nil, domain.Errorf(domain.CodeInvalidRequest,
			"Idempotency-Key must be 1-%d printable ASCII characters", httpapi.MaxIdempotencyKey)
	}
	if key == "" {
		// A client-chosen id is the request's idempotency key: a retry
		// after a lost answer returns the sandbox the first try made.
		key = req.ID
	}
	if key == "" {
		return "", nil, nil
	}
	// The hash covers the request as decoded and re-encoded, so two
	// bodies that differ only in formatting are the same request.
	canonical, _ := json.Marshal(req)
	sum := sha256.Sum256(canonical)
	return key, sum[:], nil
}

// validIdempotencyKey reports whether key is 1-255 printable ASCII
// characters (spaces allowed).
func validIdempotencyKey(key string) bool {
	if key == "" || len(key) > httpapi.MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < ' ' || key[i] > '~' {
			return false
		}
	}
	return true
}

// validateCreate checks a create request and turns it into the store's
// parameters: the id's shape, the provider, owner, labels, env and setup,
// the TTL, then the params (made canonical) as the provider judges them.
func validateCreate(cfg httpapi.Config, req *CreateSandboxRequest, providers map[string]domain.Provider) (domain.CreateParams, error) {
	var p domain.CreateParams
	if req.ID != "" && !domain.ValidID(req.ID) {
		return p, domain.Errorf(domain.CodeInvalidRequest,
			`id must be "sbx_" and 26 characters of 0-9 and a-z without i, l, o and u`)
	}
	if req.Provider == "" {
		req.Provider = cfg.DefaultProvider
	}
	prov, err := enabledProvider(providers, req.Provider)
	if err != nil {
		return p, err
	}
	if req.Owner != "" {
		if err := httpapi.ValidateClientOwner(req.Owner); err != nil {
			return p, err
		}
	}
	if err := httpapi.ValidateLabels(req.Labels); err != nil {
		return p, err
	}
	if err := httpapi.ValidateEnvAndSetup(req.Env, req.Setup); err != nil {
		return p, err
	}
	ttl, err := resolveTTL(cfg, req.TTLSeconds, req.Owner != "")
	if err != nil {
		return p, err
	}
	if req.Params, err = canonicalParams(req.Params); err != nil {
		return p, err
	}
	if err := prov.ValidateParams(req.Params); err != nil {
		return p, err
	}
	if info := prov.Info(context.Background()); !info.Available {
		return p, domain.Errorf(domain.CodeProviderUnavailable, "provider %q is unavailable on this server: %s", req.Provider, info.Reason)
	}
	return domain.CreateParams{
		ID:            req.ID,
		Provider:      req.Provider,
		Owner:         req.Owner,
		Labels:        req.Labels,
		Env:           req.Env,
		Setup:         req.Setup,
		Params:        req.Params,
		TTL:           ttl,
		OwnerTTL:      cfg.DefaultOwnerTTL,
		CreateTimeout: cfg.CreateTimeout,
	}, nil
}

// enabledProvider is the enabled provider name, or UNKNOWN_PROVIDER naming
// the enabled ones.
func enabledProvider(providers map[string]domain.Provider, name string) (domain.Provider, error) {
	if prov, ok := providers[name]; ok {
		return prov, nil
	}
	names := slices.Sorted(maps.Keys(providers))
	return nil, domain.Errorf(domain.CodeUnknownProvider,
		"provider %q is not enabled on this server (enabled: %s)", name, strings.Join(names, ", "))
}

// canonicalParams re-encodes a create's params in a canonical form (sorted
// keys, no spacing), so that the idempotency hash ignores formatting; no
// params (or null) is nil.
func canonicalParams(raw json.RawMessage) (json.RawMessage, error) {
	params := bytes.TrimSpace(raw)
	if len(params) == 0 || string(params) == "null" {
		return nil, nil
	}
	notObject := domain.Errorf(domain.CodeInvalidRequest, "params must be a JSON object")
	if params[0] != '{' {
		return nil, notObject
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, notObject
	}
	canonical, err := json.Marshal(obj)
	if err != nil {
		return nil, notObject
	}
	return canonical, nil
}

// resolveTTL applies the TTL rules: an explicit ttl_seconds must be positive
// and within the max lifetime; without one, a sandbox with an owner lives as
// long as its owner (up to the max lifetime) and one without an owner gets
// the default TTL.
func resolveTTL(cfg httpapi.Config, seconds *int64, hasOwner bool) (time.Duration, error) {
	if seconds == nil {
		if hasOwner {
			return cfg.MaxLifetime, nil
		}
		return min(cfg.DefaultTTL, cfg.MaxLifetime), nil
	}
	maxSeconds := int64(cfg.MaxLifetime / time.Second)
	if *seconds <= 0 || *seconds > maxSeconds {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "ttl_seconds must be between 1 and %d (the max lifetime)", maxSeconds)
	}
	return time.Duration(*seconds) * time.Second, nil
}

// HandleSandboxGet returns one sandbox, optionally waiting for it to settle.
//
//	@Summary		Get a sandbox
//	@Description	With wait (a Go duration such as 30s, at most the server's max wait), blocks until the sandbox is no longer requested, creating, pausing or resuming, or the wait ends, and returns it as it is then. With until=released, waits instead until its resources are confirmed released.
//	@ID				getSandbox
//	@Tags			sandboxes
//	@Produce		json
//	@Param			id		path		string	true	"sandbox id"																	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			wait	query		string	false	"how long to wait for the sandbox to settle: a Go duration or whole seconds"	example(30s)
//	@Param			until	query		string	false	"what to wait for: settled (default) or released"								Enums(settled, released)	example(settled)
//	@Success		200		{object}	Sandbox
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id} [get]
func HandleSandboxGet(cfg httpapi.Config, st httpapi.SandboxGetter, changes httpapi.ChangeSubscriber, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c, "wait", "until"); err != nil {
			return err
		}
		// A plain GET has no query to parse (gin's parse is a map or two).
		var wait time.Duration
		var until string
		if c.Request.URL.RawQuery != "" {
			if w := c.Query("wait"); w != "" {
				wait, err = httpapi.ParseWait(w, cfg.MaxWait)
				if err != nil {
					return err
				}
			}
			until = c.Query("until")
		}
		// done says when waiting is over: by default once the sandbox has
		// settled; with until=released, once its resources are confirmed gone.
		done := func(sb domain.Sandbox) bool { return sb.State.Settled() }
		// mayBeDone says whether a change is worth a re-read: a change to
		// another state that is still not done is not (changes are
		// monotone, and a subscription always holds the latest). A change
		// without an id is a "re-read everything" from the notifier.
		mayBeDone := func(ch domain.Change) bool { return ch.ID == "" || ch.State.Settled() }
		switch until {
		case "", "settled":
		case "released":
			done = func(sb domain.Sandbox) bool { return sb.Released }
			mayBeDone = func(ch domain.Change) bool { return ch.ID == "" || ch.Released }
		default:
			return domain.Errorf(domain.CodeInvalidRequest, "until must be settled or released")
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		var (
			updates <-chan domain.Change
			stop    = func() {}
		)
		if wait > 0 {
			// Subscribe before reading so that no change slips between.
			updates, stop = changes.SubscribeSandbox(id)
		}
		defer stop()
		sb, err := st.GetSandbox(ctx, tenant, id)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		sb, answer, err := awaitSandbox(ctx, st, waiting{updates: updates, draining: draining, wait: wait, done: done, mayBeDone: mayBeDone}, sb)
		if err != nil || !answer {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSandbox(sb))
	}
}

// waiting is how awaitSandbox waits: for up to wait, on updates (a
// subscription to the sandbox's changes made before it was first read),
// until done; a change worth a re-read is one mayBeDone accepts. A
// draining server stops waiting.
type waiting struct {
	updates   <-chan domain.Change
	draining  context.Context
	wait      time.Duration
	done      func(domain.Sandbox) bool
	mayBeDone func(domain.Change) bool
}

// awaitSandbox re-reads sb until w says it is done or the wait ends, and
// returns it as it is then. answer is false when the client left.
func awaitSandbox(ctx context.Context, st httpapi.SandboxGetter, w waiting, sb domain.Sandbox) (_ domain.Sandbox, answer bool, err error) {
	if w.wait <= 0 || w.done(sb) {
		return sb, true, nil
	}
	deadline := time.NewTimer(w.wait)
	defer deadline.Stop()
	// A poll backs up the notifications, which are best effort.
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for !w.done(sb) {
		select {
		case <-ctx.Done():
			return sb, false, nil // the client left
		case <-deadline.C:
			return sb, true, nil
		case <-w.draining.Done():
			return sb, true, nil // shutting down: answer with the sandbox as it is
		case ch := <-w.updates:
			if !w.mayBeDone(ch) {
				continue
			}
		case <-poll.C:
		}
		if sb, err = st.GetSandbox(ctx, sb.Tenant, sb.ID); err != nil {
			return sb, false, httpapi.NotFoundAs(err, sb.ID)
		}
	}
	return sb, true, nil
}

// providerNamePattern is the shape of a provider name.
var providerNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

func parseTime(name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, domain.Errorf(domain.CodeInvalidRequest, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
	}
	return t, nil
}

// parseListFilter reads the list filters from the query.
func parseListFilter(q url.Values) (domain.ListFilter, error) {
	var f domain.ListFilter
	var err error
	if f.States, err = listValues(q["state"], "state", "a sandbox state", domain.States); err != nil {
		return f, err
	}
	if f.Reasons, err = listValues(q["reason"], "reason", "a reason a sandbox ends with", domain.Reasons); err != nil {
		return f, err
	}
	if v, ok := q["owner"]; ok {
		if err := httpapi.ValidateOwner(v[0]); err != nil {
			return f, err
		}
		f.Owner = v[0]
	}
	if v, ok := q["provider"]; ok {
		if !providerNamePattern.MatchString(v[0]) {
			return f, domain.Errorf(domain.CodeInvalidRequest, "provider must be a provider name such as sim or local")
		}
		f.Provider = v[0]
	}
	if f.Labels, err = parseLabelFilter(q["label"]); err != nil {
		return f, err
	}
	for name, dst := range map[string]*time.Time{"created_after": &f.CreatedAfter, "created_before": &f.CreatedBefore} {
		if v, ok := q[name]; ok {
			t, err := parseTime(name, v[0])
			if err != nil {
				return f, err
			}
			*dst = t
		}
	}
	if v, ok := q["released"]; ok {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return f, domain.Errorf(domain.CodeInvalidRequest, "released must be true or false")
		}
		f.Released = &b
	}
	return f, nil
}

// listValues reads a repeatable, comma-separated filter whose values must
// be among known.
func listValues[T ~string](values []string, name, what string, known []T) ([]T, error) {
	var out []T
	for _, s := range values {
		for part := range strings.SplitSeq(s, ",") {
			if !slices.Contains(known, T(part)) {
				names := make([]string, len(known))
				for i, k := range known {
					names[i] = string(k)
				}
				return nil, domain.Errorf(domain.CodeInvalidRequest, "%s %q is not %s (%s)", name, part, what, strings.Join(names, ", "))
			}
			out = append(out, T(part))
		}
	}
	return out, nil
}

// parseLabelFilter reads label=key=value filters: all must match, a key
// twice must name one value.
func parseLabelFilter(filters []string) (map[string]string, error) {
	var labels map[string]string
	for _, l := range filters {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "label filter %q must look like key=value", l)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		if prev, dup := labels[k]; dup && prev != v {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "label filter names key %q twice with different values", k)
		}
		labels[k] = v
	}
	if err := httpapi.ValidateLabels(labels); err != nil {
		return nil, err
	}
	return labels, nil
}

// HandleSandboxList lists the tenant's sandboxes.
//
//	@Summary		List sandboxes
//	@Description	Newest first, with keyset pagination: pass next_cursor back as cursor for the next page. Filters combine with AND.
//	@ID				listSandboxes
//	@Tags			sandboxes
//	@Produce		json
//	@Param			state			query		[]string	false	"only these states (repeatable, or comma-separated)"									collectionFormat(multi)	example(ready)
//	@Param			reason			query		[]string	false	"only sandboxes that ended for these reasons: requested, owner_released, owner_expired, expired, create_failed, lost, pool_deleted, pool_shrunk (repeatable, or comma-separated)"	collectionFormat(multi)	example(lost)
//	@Param			owner			query		string		false	"only this owner's sandboxes"															example(agent-42)
//	@Param			provider		query		string		false	"only this provider's sandboxes"														example(sim)
//	@Param			label			query		[]string	false	"key=value; repeatable, all must match"													collectionFormat(multi)	example(team=ml)
//	@Param			created_after	query		string		false	"only sandboxes created after this RFC 3339 time"										format(date-time)		example(2026-01-02T15:04:05Z)
//	@Param			created_before	query		string		false	"only sandboxes created before this RFC 3339 time"										format(date-time)		example(2026-01-03T15:04:05Z)
//	@Param			released		query		bool		false	"only sandboxes whose resources are (true) or are not yet (false) confirmed released"	example(false)
//	@Param			limit			query		int			false	"page size, 1-500 (default 50)"															minimum(1)	maximum(500)	example(50)
//	@Param			cursor			query		string		false	"next_cursor of the previous page, unchanged"											example(MTc2NzM2NjI0NTEyMzQ1NnxzYnhfNXEzazh3MW0ybjRwNnI3czl0MHYxeDJ5M3o)
//	@Success		200				{object}	SandboxList
//	@Failure		400				{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes [get]
func HandleSandboxList(st SandboxLister) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c, "state", "reason", "owner", "provider", "label", "created_after", "created_before", "released", "limit", "cursor"); err != nil {
			return err
		}
		q := c.Request.URL.Query()
		f, err := parseListFilter(q)
		if err != nil {
			return err
		}
		if f.Limit, err = httpapi.ParseLimit(c); err != nil {
			return err
		}
		if cur, ok := q["cursor"]; ok {
			if f.After, err = httpapi.DecodeCursor(cur[0]); err != nil {
				return err
			}
		}
		f.Tenant = httpapi.TenantOf(c)
		items, next, err := st.ListSandboxes(c.Request.Context(), f)
		if err != nil {
			return err
		}
		out := SandboxList{Items: make([]Sandbox, len(items)), NextCursor: httpapi.EncodeCursor(next)}
		for i, sb := range items {
			out.Items[i] = toSandbox(sb)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleSandboxDelete cancels or terminates a sandbox.
//
//	@Summary		Cancel or terminate a sandbox
//	@Description	A requested or creating sandbox is cancelled, a ready one terminated (reason requested); Tether then releases whatever the provider holds, and released turns true. Idempotent: 202 when this call ended the sandbox, 200 when it had already ended.
//	@ID				deleteSandbox
//	@Tags			sandboxes
//	@Produce		json
//	@Param			id	path		string				true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Success		202	{object}	Sandbox				"ended by this request"
//	@Success		200	{object}	Sandbox				"already ended"
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id} [delete]
func HandleSandboxDelete(st SandboxEnder) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		sb, changed, err := st.EndSandbox(c.Request.Context(), httpapi.TenantOf(c), id, domain.ReasonRequested, domain.ActorClient, httpapi.CallerOf(c), "deleted by client")
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		status := http.StatusOK
		if changed {
			status = http.StatusAccepted
		}
		return httpapi.WriteJSON(c, status, toSandbox(sb))
	}
}
