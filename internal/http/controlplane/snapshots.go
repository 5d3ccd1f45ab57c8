package controlplane

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// Snapshot is a snapshot as the API shows it: a copy of a sandbox's
// /workspace that outlives the sandbox, which a new sandbox may start from
// (from_snapshot).
type Snapshot struct {
	ID string `json:"id" example:"snp_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// State is creating (being taken), ready (a create may start from it), failed (it could not be taken; error says why), lost (its provider no longer has its data) or deleted.
	State string `json:"state" enums:"creating,ready,failed,lost,deleted" x-enum-varnames:"SnapshotStateCreating,SnapshotStateReady,SnapshotStateFailed,SnapshotStateLost,SnapshotStateDeleted" example:"ready"`
	// Kind is manual (POST /v1/sandboxes/{id}/snapshots) or exit (taken when a sandbox created with on_end snapshot ended).
	Kind string `json:"kind" enums:"manual,exit" x-enum-varnames:"SnapshotKindManual,SnapshotKindExit" example:"manual"`
	// Memory is true for a snapshot of the whole machine (its memory and device state with its disks, the microvm provider's): a sandbox created from it resumes the captured processes where they were. False: a copy of /workspace.
	Memory bool `json:"memory" example:"false"`
	// SourceSandboxID is the sandbox the snapshot was taken of.
	SourceSandboxID string `json:"source_sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	Provider        string `json:"provider" example:"local"`
	// SizeBytes is what the snapshot holds at its provider, once ready (the local provider's: the blocks its sparse image uses); 0 before.
	SizeBytes int64 `json:"size_bytes" format:"int64" example:"1048576"`
	// Error is why the snapshot failed or was lost, or the last retryable error while creating; null when there is none.
	Error     *string   `json:"error" extensions:"x-nullable" example:"its sandbox ended while the snapshot was being taken"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05.123456Z"`
	// ReadyAt is when it became ready; null until then.
	ReadyAt *time.Time `json:"ready_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:06.5Z"`
	// ExpiresAt is when the janitor deletes it (the server's SNAPSHOT_RETENTION after it was asked for); null: kept until deleted.
	ExpiresAt *time.Time `json:"expires_at" extensions:"x-nullable" format:"date-time" example:"2026-01-09T15:04:05Z"`
	// DeletedAt is when it was deleted; null until then.
	DeletedAt *time.Time `json:"deleted_at" extensions:"x-nullable" format:"date-time" example:"2026-01-03T15:04:05Z"`
} // @name Snapshot

// SnapshotList is a page of snapshots.
type SnapshotList struct {
	Items []Snapshot `json:"items"`
	// NextCursor fetches the next page (pass it as cursor); null at the end.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"MTc2NzM2NjI0NTEyMzQ1NnxzbnBfNXEzazh3MW0ybjRwNnI3czl0MHYxeDJ5M3o"`
} // @name SnapshotList

func toSnapshot(sn domain.Snapshot) Snapshot {
	return Snapshot{
		ID: sn.ID, State: string(sn.State), Kind: string(sn.Kind), Memory: sn.Memory, SourceSandboxID: sn.SourceID, Provider: sn.Provider,
		SizeBytes: sn.Size, Error: httpapi.Optional(sn.Error), CreatedAt: sn.CreatedAt.UTC(),
		ReadyAt: httpapi.UTC(sn.ReadyAt), ExpiresAt: httpapi.UTC(sn.ExpiresAt), DeletedAt: httpapi.UTC(sn.DeletedAt),
	}
}

// SnapshotRequest is the optional body of a snapshot request.
type SnapshotRequest struct {
	// Memory asks for a snapshot of the whole machine, its memory and device state with its disks, where the provider takes them (GET /v1/providers: memory_snapshots): sandboxes created from it (from_snapshot) resume its processes where they were, each with its own host name, machine id, random numbers and clock: a fork. The sandbox is stopped while the state is saved, then runs on. False or absent: a copy of /workspace.
	Memory bool `json:"memory" example:"true"`
} // @name SnapshotRequest

// SnapshotStore is what the snapshot handlers need of the store.
type SnapshotStore interface {
	RequestSnapshot(ctx context.Context, r domain.SnapshotRequest) (domain.Snapshot, error)
	GetSnapshot(ctx context.Context, tenant, id string) (domain.Snapshot, error)
	ListSnapshots(ctx context.Context, f domain.SnapshotFilter) ([]domain.Snapshot, *domain.Cursor, error)
	DeleteSnapshot(ctx context.Context, tenant, id string) (domain.Snapshot, bool, error)
}

type snapshotGetter interface {
	GetSnapshot(ctx context.Context, tenant, id string) (domain.Snapshot, error)
}

// snapshotCreator is what the snapshot request needs.
type snapshotCreator interface {
	httpapi.SandboxGetter
	SnapshotStore
}

// snapshotPoll is how often a ?wait= on a snapshot re-reads it besides the
// store's announcements.
const snapshotPoll = time.Second

// HandleSnapshotCreate asks for a snapshot of a sandbox.
//
//	@Summary		Snapshot a sandbox
//	@Description	Records a snapshot of a ready or paused sandbox's /workspace (with {"memory": true}, of the whole machine: a fork's source), in state creating; an executor then takes it at the provider (under a lease on the sandbox, so that no release destroys the sandbox meanwhile) and it becomes ready, or failed with error. The sandbox keeps running. One not taken within the server's SNAPSHOT_TIMEOUT fails; a sandbox that ends while its snapshot is being taken fails it. With wait, blocks until the snapshot is no longer creating, or the wait ends. A tenant holds at most SNAPSHOT_MAX_PER_TENANT creating and ready snapshots, and SNAPSHOT_MAX_BYTES_PER_TENANT bytes of them.
//	@ID				createSnapshot
//	@Tags			snapshots
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string				true	"sandbox id"																example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			wait	query		string				false	"how long to wait for the snapshot to settle: a Go duration or whole seconds"	example(30s)
//	@Param			body	body		SnapshotRequest		false	"what to snapshot; none: the workspace"
//	@Success		202		{object}	Snapshot			"recorded; Location names the snapshot"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter, or the body"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND: no such sandbox"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT: the sandbox is not ready or paused; state says what it is"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: the tenant's snapshots are at SNAPSHOT_MAX_PER_TENANT or SNAPSHOT_MAX_BYTES_PER_TENANT (delete some), or over the API key's request rate"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: the sandbox's provider cannot snapshot sandboxes, or memory was asked of one that cannot take memory snapshots"
//	@Header			202		{string}	Location			"the snapshot's URL path, /v1/snapshots/{id}"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/snapshots [post]
func HandleSnapshotCreate(cfg httpapi.Config, st snapshotCreator, changes httpapi.ChangeSubscriber, providers map[string]domain.Provider, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		wait, err := waitQuery(c, cfg)
		if err != nil {
			return err
		}
		req, err := snapshotBody(c)
		if err != nil {
			return err
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		cur, err := st.GetSandbox(ctx, tenant, id)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		if p := providers[cur.Provider]; p == nil || !domain.CanSnapshot(p) {
			return domain.Errorf(domain.CodeNotSupported, "provider %s cannot snapshot sandboxes", cur.Provider)
		} else if req.Memory && !domain.CanSnapshotMemory(p) {
			return domain.Errorf(domain.CodeNotSupported, "provider %s cannot take memory snapshots (microvm can)", cur.Provider)
		}
		sn, err := st.RequestSnapshot(ctx, domain.SnapshotRequest{
			Memory: req.Memory,
			Tenant: tenant, SourceID: id, Caller: httpapi.CallerOf(c), Timeout: cfg.SnapshotTimeout, Retention: cfg.SnapshotRetention,
			MaxCount: cfg.SnapshotMaxPerTenant, MaxBytes: cfg.SnapshotMaxBytesPerTenant,
		})
		if err != nil {
			if domain.ErrorCode(err) == domain.CodeQuotaExceeded {
				c.Header("Retry-After", "60") // once snapshots are deleted, or expire
			}
			return httpapi.NotFoundAs(err, id)
		}
		c.Header("Location", "/v1/snapshots/"+sn.ID)
		if sn, err = awaitSnapshot(ctx, st, changes, draining, wait, sn); err != nil {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusAccepted, toSnapshot(sn))
	}
}

// snapshotBody reads the optional body of a snapshot request: none (or
// only white space) is the defaults.
func snapshotBody(c *gin.Context) (SnapshotRequest, error) {
	var req SnapshotRequest
	body, err := httpapi.ReadJSONBody(c)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return req, err
	}
	return req, jsoncodec.Decode(body, &req)
}

// waitQuery reads the only query parameter, wait, if given.
func waitQuery(c *gin.Context, cfg httpapi.Config) (time.Duration, error) {
	if err := httpapi.OnlyQuery(c, "wait"); err != nil {
		return 0, err
	}
	if w := c.Query("wait"); w != "" {
		return httpapi.ParseWait(w, cfg.MaxWait)
	}
	return 0, nil
}

// awaitSnapshot re-reads sn until it is no longer creating, wait passes,
// the client goes or the server drains; it returns the last read. The
// store announces a snapshot leaving creating (domain.SnapshotChanged), so
// the answer comes at once; a slow poll backs up the announcements, which
// are best effort.
func awaitSnapshot(ctx context.Context, st SnapshotStore, changes httpapi.ChangeSubscriber, draining context.Context, wait time.Duration, sn domain.Snapshot) (domain.Snapshot, error) {
	if wait <= 0 || sn.State != domain.SnapshotCreating {
		return sn, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(snapshotPoll)
	defer tick.Stop()
	// Subscribed after the caller's read: the first re-read below, at once,
	// catches a change announced between the two.
	updates, stop := changes.SubscribeSandbox(sn.ID)
	defer stop()
	for first := true; sn.State == domain.SnapshotCreating; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return sn, ctx.Err()
			case <-draining.Done():
				return sn, nil
			case <-timer.C:
				return sn, nil
			case <-updates:
			case <-tick.C:
			}
		}
		cur, err := st.GetSnapshot(ctx, sn.Tenant, sn.ID)
		if err != nil {
			return sn, err
		}
		sn = cur
	}
	return sn, nil
}

// snapshotIDParam is the path's snapshot id; a malformed one is not found.
func snapshotIDParam(c *gin.Context) (string, error) {
	id := c.Param("id")
	if !domain.ValidSnapshotID(id) {
		return "", snapshotNotFound(id)
	}
	return id, nil
}

func snapshotNotFound(id string) error {
	return domain.Errorf(domain.CodeNotFound, "snapshot %q not found", id)
}

// snapshotNotFoundAs names the snapshot in a not-found error.
func snapshotNotFoundAs(err error, id string) error {
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return snapshotNotFound(id)
	}
	return err
}

// HandleSnapshotGet returns one snapshot.
//
//	@Summary		Get a snapshot
//	@Description	Returns the snapshot, deleted ones included. With wait, blocks until it is no longer creating, or the wait ends.
//	@ID				getSnapshot
//	@Tags			snapshots
//	@Produce		json
//	@Param			id		path		string				true	"snapshot id"																example(snp_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			wait	query		string				false	"how long to wait for the snapshot to settle: a Go duration or whole seconds"	example(30s)
//	@Success		200		{object}	Snapshot			"the snapshot"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND: no such snapshot, or another tenant's"
//	@Security		BearerAuth
//	@Router			/v1/snapshots/{id} [get]
func HandleSnapshotGet(cfg httpapi.Config, st SnapshotStore, changes httpapi.ChangeSubscriber, draining context.Context) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := snapshotIDParam(c)
		if err != nil {
			return err
		}
		wait, err := waitQuery(c, cfg)
		if err != nil {
			return err
		}
		sn, err := st.GetSnapshot(c.Request.Context(), httpapi.TenantOf(c), id)
		if err != nil {
			return snapshotNotFoundAs(err, id)
		}
		if sn, err = awaitSnapshot(c.Request.Context(), st, changes, draining, wait, sn); err != nil {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSnapshot(sn))
	}
}

// HandleSnapshotList lists the tenant's snapshots.
//
//	@Summary		List snapshots
//	@Description	The tenant's snapshots that are not deleted, newest first, a page at a time; sandbox selects the snapshots of one sandbox.
//	@ID				listSnapshots
//	@Tags			snapshots
//	@Produce		json
//	@Param			sandbox	query		string				false	"only the snapshots of this sandbox"			example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			limit	query		int					false	"page size, 1-500 (default 100)"				minimum(1)	maximum(500)	example(100)
//	@Param			cursor	query		string				false	"next_cursor of the previous page"	example(MTc2NzM2NjI0NTEyMzQ1NnxzbnBfNXEzazh3MW0ybjRwNnI3czl0MHYxeDJ5M3o)
//	@Success		200		{object}	SnapshotList		"a page of snapshots"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter, or a bad cursor"
//	@Security		BearerAuth
//	@Router			/v1/snapshots [get]
func HandleSnapshotList(st SnapshotStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c, "sandbox", "limit", "cursor"); err != nil {
			return err
		}
		f := domain.SnapshotFilter{Tenant: httpapi.TenantOf(c), SourceID: c.Query("sandbox")}
		if f.SourceID != "" && !domain.ValidID(f.SourceID) {
			return domain.Errorf(domain.CodeInvalidRequest, "sandbox must be a sandbox id")
		}
		var err error
		if f.Limit, err = httpapi.ParseLimit(c); err != nil {
			return err
		}
		if cur, ok := c.GetQuery("cursor"); ok {
			if f.After, err = httpapi.DecodeCursorOf(cur, domain.ValidSnapshotID); err != nil {
				return err
			}
		}
		items, next, err := st.ListSnapshots(c.Request.Context(), f)
		if err != nil {
			return err
		}
		out := SnapshotList{Items: make([]Snapshot, len(items)), NextCursor: httpapi.EncodeCursor(next)}
		for i, sn := range items {
			out.Items[i] = toSnapshot(sn)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleSnapshotDelete deletes a snapshot.
//
//	@Summary		Delete a snapshot
//	@Description	Marks the snapshot deleted; its data at the provider is removed by the janitor's next reconciliation (or at once by the executor taking a creating one). A sandbox already started from it keeps its files. Idempotent: 202 when this call deleted it, 200 when it was deleted already.
//	@ID				deleteSnapshot
//	@Tags			snapshots
//	@Produce		json
//	@Param			id	path		string				true	"snapshot id"	example(snp_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Success		202	{object}	Snapshot			"deleted by this request"
//	@Success		200	{object}	Snapshot			"already deleted"
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND: no such snapshot, or another tenant's"
//	@Security		BearerAuth
//	@Router			/v1/snapshots/{id} [delete]
func HandleSnapshotDelete(st SnapshotStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := snapshotIDParam(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		sn, deleted, err := st.DeleteSnapshot(c.Request.Context(), httpapi.TenantOf(c), id)
		if err != nil {
			return snapshotNotFoundAs(err, id)
		}
		status := http.StatusOK
		if deleted {
			status = http.StatusAccepted
		}
		return httpapi.WriteJSON(c, status, toSnapshot(sn))
	}
}

// startFrom validates a create's from_snapshot against the tenant's
// catalog and the create's provider, and sets it (and, for a host-bound
// provider, the node holding it) on p: an unknown snapshot, or another
// tenant's, is NOT_FOUND; one not ready, SNAPSHOT_NOT_READY; one of another
// provider, SNAPSHOT_PROVIDER_MISMATCH.
func startFrom(ctx context.Context, st snapshotGetter, prov domain.Provider, tenant, id string, p *domain.CreateParams) error {
	if !domain.CanSnapshot(prov) {
		return domain.Errorf(domain.CodeNotSupported, "provider %s cannot start sandboxes from snapshots", prov.Name())
	}
	if !domain.ValidSnapshotID(id) {
		return snapshotNotFound(id)
	}
	sn, err := st.GetSnapshot(ctx, tenant, id)
	if err != nil {
		return snapshotNotFoundAs(err, id)
	}
	if sn.State != domain.SnapshotReady {
		return domain.Errorf(domain.CodeSnapshotNotReady, "snapshot %s is %s: a sandbox starts only from a ready one", id, sn.State)
	}
	if sn.Provider != prov.Name() {
		return domain.Errorf(domain.CodeSnapshotProviderMismatch, "snapshot %s is of provider %s, not %s", id, sn.Provider, prov.Name())
	}
	p.FromSnapshot, p.Node = sn.ID, sn.Node
	return nil
}

// resolveOnEnd is a create's on_end as the store records it: "snapshot" or
// "", from the request's ("snapshot", "none" or "": the server's default
// for a provider that snapshots).
func resolveOnEnd(cfg httpapi.Config, prov domain.Provider, onEnd string) (string, error) {
	switch onEnd {
	case "none":
		return "", nil
	case "":
		if cfg.DefaultOnEnd == domain.OnEndSnapshot && domain.CanSnapshot(prov) {
			return domain.OnEndSnapshot, nil
		}
		return "", nil
	case domain.OnEndSnapshot:
		if !domain.CanSnapshot(prov) {
			return "", domain.Errorf(domain.CodeNotSupported, "provider %s cannot snapshot sandboxes: on_end snapshot is not possible", prov.Name())
		}
		return onEnd, nil
	}
	return "", domain.Errorf(domain.CodeInvalidRequest, `on_end must be "snapshot" or "none"`)
}
