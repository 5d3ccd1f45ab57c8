package controlplane

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/webhook"
)

// Webhook is an endpoint that gets the tenant's events pushed to it (see docs/webhooks.md), without its secret (shown once, when created).
type Webhook struct {
	ID string `json:"id" example:"wh_k5m2q7x3w4r6t2vz"`
	// URL is where deliveries are POSTed.
	URL string `json:"url" example:"https://hooks.example.com/tether"`
	// Description says what the endpoint is for.
	Description string `json:"description" example:"ops alerts"`
	// Events is the endpoint's filter.
	Events WebhookFilter `json:"events"`
	// State is active while deliveries go out; failing once a delivery's retries ran out (WEBHOOK_RETRY_FOR): nothing more is sent until a replay.
	State string `json:"state" enums:"active,failing" x-enum-varnames:"WebhookStateActive,WebhookStateFailing" example:"active"`
	// FailingSince is when the endpoint became failing; null while active.
	FailingSince *time.Time `json:"failing_since" extensions:"x-nullable" format:"date-time" example:"2026-01-03T09:00:00Z"`
	// Cursor is the event stream position delivered through (as GET /v1/events/stream spells positions): every matching event up to it was answered 2xx.
	Cursor    string    `json:"cursor" example:"1234-56"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// CreatedBy is the id of the API key that created the endpoint.
	CreatedBy *string `json:"created_by" extensions:"x-nullable" example:"key_a1b2c3d4e5f6g7h8"`
} // @name Webhook

// WebhookFilter chooses the events an endpoint gets: an event is delivered when its to-state is in states, its reason in reasons and its type in types; an empty list matches every event.
type WebhookFilter struct {
	// States are sandbox states (requested, creating, ready, cancelled, terminated, failed): events into them are delivered.
	States []string `json:"states" example:"terminated,failed"`
	// Reasons are event reasons (requested, owner_released, owner_expired, expired, create_failed, lost, pause_failed, resume_failed, pool_deleted, pool_shrunk, owner_transferred, outage_credited, snapshot_requested, snapshot_ready, snapshot_failed, snapshot_lost, snapshot_deleted): events with them are delivered; an event without a reason matches no list of reasons.
	Reasons []string `json:"reasons" example:"owner_expired,lost"`
	// Types are event types: sandbox.state_changed (an entry of the history) and sandbox.released (a terminal sandbox's provider resources confirmed gone; it matches states and reasons by its sandbox's terminal state and end reason).
	Types []string `json:"types" enums:"sandbox.state_changed,sandbox.released" x-enum-varnames:"WebhookEventStateChanged,WebhookEventReleased" example:"sandbox.released"`
} // @name WebhookFilter

// WebhookList is every webhook endpoint of the tenant, oldest first.
type WebhookList struct {
	Items []Webhook `json:"items"`
} // @name WebhookList

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	// URL is where deliveries go: http or https, a host that is not (and does not resolve to) a loopback, private, link-local, metadata, multicast or unspecified address unless the operator sets WEBHOOK_ALLOW_PRIVATE; no user information or fragment; at most 2048 bytes.
	URL string `json:"url" example:"https://hooks.example.com/tether"`
	// Description says what the endpoint is for: at most 200 bytes, no control characters.
	Description string `json:"description,omitempty" example:"ops alerts"`
	// Events filters the events delivered (default: every event).
	Events *WebhookFilterRequest `json:"events,omitempty"`
} // @name CreateWebhookRequest

// WebhookFilterRequest is the filter of a new endpoint; an absent or empty list matches every event.
type WebhookFilterRequest struct {
	// States are sandbox states: events into them are delivered (at most 16).
	States []string `json:"states,omitempty" example:"terminated,failed"`
	// Reasons are event reasons: events with them are delivered (at most 16).
	Reasons []string `json:"reasons,omitempty" example:"owner_expired,lost"`
	// Types are event types: events of them are delivered (at most 16). A release matches states and reasons by its sandbox's terminal state and end reason.
	Types []string `json:"types,omitempty" enums:"sandbox.state_changed,sandbox.released" x-enum-varnames:"WebhookEventStateChanged,WebhookEventReleased" example:"sandbox.released"`
} // @name WebhookFilterRequest

// CreatedWebhook is a new webhook endpoint: the only time its secret is shown.
type CreatedWebhook struct {
	Webhook Webhook `json:"webhook"`
	// Secret signs every delivery (the Tether-Signature header: HMAC-SHA256 of "<t>.<raw body>" with this secret); store it now.
	Secret string `json:"secret" example:"whsec_3q8x2Kp0Vw7mZr5Tn1Yb9Lc4Hd6Gf0Js2Ea8Uo3Wi5"`
} // @name CreatedWebhook

// WebhookDelivery is one batch of an endpoint's events, recorded before it is first sent and resent as it is, under the same id, until the receiver answers 2xx or retries run out.
type WebhookDelivery struct {
	// ID is the delivery's idempotency key: the Tether-Delivery header and the body's id, the same on every attempt.
	ID        string `json:"id" example:"whd_m2q7x3w4r6t2vzk5"`
	WebhookID string `json:"webhook_id" example:"wh_k5m2q7x3w4r6t2vz"`
	// Status: pending (being attempted), delivered (answered 2xx), failed (retries ran out), cancelled (replaced by a replay).
	Status string `json:"status" enums:"pending,delivered,failed,cancelled" x-enum-varnames:"WebhookDeliveryStatusPending,WebhookDeliveryStatusDelivered,WebhookDeliveryStatusFailed,WebhookDeliveryStatusCancelled" example:"delivered"`
	// EventIDs are the ids of the delivery's events, in the order sent.
	EventIDs []int64 `json:"event_ids" example:"41,42"`
	// Attempts counts the attempts so far.
	Attempts  int       `json:"attempts" example:"1"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// NextAttemptAt is when a pending delivery is tried next; null once it is not pending.
	NextAttemptAt *time.Time `json:"next_attempt_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:07Z"`
	// LastAttemptAt is when it was last sent; null before its first attempt.
	LastAttemptAt *time.Time `json:"last_attempt_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// DeliveredAt is when the receiver answered 2xx; null until then.
	DeliveredAt *time.Time `json:"delivered_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// ResponseStatus is the receiver's last HTTP status; null when it gave none (a timeout, a refused connection).
	ResponseStatus *int `json:"response_status" extensions:"x-nullable" example:"204"`
	// Error says why the last attempt failed; null if it did not.
	Error *string `json:"error" extensions:"x-nullable" example:"the receiver answered 503"`
} // @name WebhookDelivery

// WebhookDeliveryList is a page of an endpoint's deliveries, newest first.
type WebhookDeliveryList struct {
	Items []WebhookDelivery `json:"items"`
	// NextCursor fetches the next (older) page; null when this page was not full.
	NextCursor *string `json:"next_cursor" extensions:"x-nullable" example:"42"`
} // @name WebhookDeliveryList

// ReplayWebhookRequest says where a replay starts; with neither field it resumes where deliveries stopped.
type ReplayWebhookRequest struct {
	// FromEventID replays from this event of the tenant on (its position in the event stream).
	FromEventID int64 `json:"from_event_id,omitempty" format:"int64" minimum:"1" example:"42"`
	// FromDeliveryID replays from this delivery's first event on.
	FromDeliveryID string `json:"from_delivery_id,omitempty" example:"whd_m2q7x3w4r6t2vzk5"`
} // @name ReplayWebhookRequest

// WebhookStore is what the webhook handlers need of the store.
type WebhookStore interface {
	// CreateWebhook, DeleteWebhook and ReplayWebhook check the asking key
	// in the database (UNAUTHENTICATED if revoked, FORBIDDEN without
	// manage_keys); CreateWebhook also the tenant's cap (QUOTA_EXCEEDED).
	CreateWebhook(ctx context.Context, ne webhook.NewEndpoint) (webhook.Endpoint, string, error)
	Webhooks(ctx context.Context, tenant string) ([]webhook.Endpoint, error)
	Webhook(ctx context.Context, tenant, id string) (webhook.Endpoint, error)
	DeleteWebhook(ctx context.Context, tenant, id, by string) (webhook.Endpoint, error)
	ReplayWebhook(ctx context.Context, tenant, id, by string, from webhook.ReplayFrom) (webhook.Endpoint, error)
	WebhookDeliveries(ctx context.Context, webhookID string, before int64, limit int) ([]webhook.Delivery, error)
}

// Limits of a new endpoint.
const (
	maxWebhookDescription = 200
	maxFilterEntries      = 16
)

func toWebhook(w webhook.Endpoint) Webhook {
	f := WebhookFilter{States: []string{}, Reasons: []string{}, Types: []string{}}
	for _, s := range w.Filter.States {
		f.States = append(f.States, string(s))
	}
	for _, r := range w.Filter.Reasons {
		f.Reasons = append(f.Reasons, string(r))
	}
	for _, t := range w.Filter.Types {
		f.Types = append(f.Types, string(t))
	}
	return Webhook{ID: w.ID, URL: w.URL, Description: w.Description, Events: f, State: string(w.State),
		FailingSince: httpapi.UTC(w.FailingSince), Cursor: httpapi.FormatStreamPosition(w.Cursor), CreatedAt: w.CreatedAt.UTC(), CreatedBy: httpapi.Optional(w.CreatedBy)}
}

func toDelivery(d webhook.Delivery) WebhookDelivery {
	out := WebhookDelivery{ID: d.ID, WebhookID: d.EndpointID, Status: string(d.Status), EventIDs: d.EventIDs, Attempts: d.Attempts,
		CreatedAt: d.CreatedAt.UTC(), NextAttemptAt: httpapi.UTC(d.NextAttemptAt), LastAttemptAt: httpapi.UTC(d.LastAttemptAt),
		DeliveredAt: httpapi.UTC(d.DeliveredAt), Error: httpapi.Optional(d.Error)}
	if out.EventIDs == nil {
		out.EventIDs = []int64{}
	}
	if d.ResponseStatus != 0 {
		out.ResponseStatus = &d.ResponseStatus
	}
	return out
}

// mayManageWebhooks refuses keys without manage_keys: an endpoint gets
// every event of the tenant, wherever its URL says, so webhooks take the
// tenant's administrative scope. (The store checks again in the database
// before it writes.)
func mayManageWebhooks(c *gin.Context) error {
	if !httpapi.ManagesKeys(c) {
		return domain.Errorf(domain.CodeForbidden, "webhooks take an API key with manage_keys; this one lacks it")
	}
	return nil
}

// webhookFromPath reads the endpoint id of the path (an id Tether could not
// have made is not found without a query), then refuses query parameters
// other than allowed.
func webhookFromPath(c *gin.Context, allowed ...string) (string, error) {
	id := c.Param("id")
	if !webhook.ValidID(webhook.EndpointIDPrefix, id) {
		return "", domain.Errorf(domain.CodeNotFound, "webhook %q not found", id)
	}
	if err := httpapi.OnlyQuery(c, allowed...); err != nil {
		return "", err
	}
	return id, nil
}

// writeWebhook answers with the endpoint a store call on endpoint id
// returned, or with its error.
func writeWebhook(c *gin.Context, id string, w webhook.Endpoint, err error) error {
	if err != nil {
		return webhookNotFound(err, id)
	}
	return httpapi.WriteJSON(c, http.StatusOK, toWebhook(w))
}

// parseFilter validates a new endpoint's filter.
func parseFilter(req *WebhookFilterRequest) (webhook.Filter, error) {
	var f webhook.Filter
	if req == nil {
		return f, nil
	}
	if len(req.States) > maxFilterEntries || len(req.Reasons) > maxFilterEntries || len(req.Types) > maxFilterEntries {
		return f, domain.Errorf(domain.CodeInvalidRequest, "events.states, events.reasons and events.types take at most %d entries each", maxFilterEntries)
	}
	for _, t := range req.Types {
		et := domain.EventType(t)
		if !slices.Contains(domain.EventTypes, et) {
			return f, domain.Errorf(domain.CodeInvalidRequest, "events.types: %q is not an event type", t)
		}
		if !slices.Contains(f.Types, et) {
			f.Types = append(f.Types, et)
		}
	}
	for _, s := range req.States {
		st := domain.State(s)
		if !slices.Contains(domain.States, st) {
			return f, domain.Errorf(domain.CodeInvalidRequest, "events.states: %q is not a sandbox state", s)
		}
		if !slices.Contains(f.States, st) {
			f.States = append(f.States, st)
		}
	}
	reasons := webhook.EventReasons()
	for _, r := range req.Reasons {
		rs := domain.Reason(r)
		if !slices.Contains(reasons, rs) {
			return f, domain.Errorf(domain.CodeInvalidRequest, "events.reasons: %q is not an event reason", r)
		}
		if !slices.Contains(f.Reasons, rs) {
			f.Reasons = append(f.Reasons, rs)
		}
	}
	return f, nil
}

// HandleWebhookCreate registers a webhook endpoint for the caller's tenant.
//
//	@Summary		Create a webhook endpoint
//	@Description	Registers a URL that the tenant's events are POSTed to from now on, signed with a new secret that this response shows once (see docs/webhooks.md for the payload, the Tether-Signature header, retries and ordering). Takes an API key with manage_keys. The URL is refused (403 FORBIDDEN) when its host is, or resolves to, a loopback, private, link-local, metadata, multicast or unspecified address, unless the operator set WEBHOOK_ALLOW_PRIVATE; deliveries check the address they connect to again. A tenant holds at most WEBHOOK_MAX_ENDPOINTS endpoints.
//	@ID				createWebhook
//	@Tags			webhooks
//	@Accept			json
//	@Produce		json
//	@Param			request	body		CreateWebhookRequest	true	"the endpoint"
//	@Success		201		{object}	CreatedWebhook
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a malformed URL, a host that does not resolve, an unknown state or reason"
//	@Failure		401		{object}	httpapi.Problem				"UNAUTHENTICATED: no API key, or one Tether does not know (or revoked)"
//	@Failure		403		{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys, or the URL's address is one deliveries may not go to"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: over the API key's request rate, or the tenant holds WEBHOOK_MAX_ENDPOINTS endpoints; retry after Retry-After seconds"
//	@Header			201		{string}	Location			"the endpoint's URL"
//	@Security		BearerAuth
//	@Router			/v1/webhooks [post]
func HandleWebhookCreate(cfg httpapi.Config, st WebhookStore, guard webhook.Guard) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		var req CreateWebhookRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if len(req.Description) > maxWebhookDescription || strings.IndexFunc(req.Description, unicode.IsControl) >= 0 {
			return domain.Errorf(domain.CodeInvalidRequest, "description must be at most %d bytes, no control characters", maxWebhookDescription)
		}
		filter, err := parseFilter(req.Events)
		if err != nil {
			return err
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		if _, err := guard.CheckURL(c.Request.Context(), req.URL); err != nil {
			return err
		}
		w, secret, err := st.CreateWebhook(c.Request.Context(), webhook.NewEndpoint{
			Tenant: httpapi.TenantOf(c), URL: req.URL, Description: req.Description, Filter: filter,
			By: httpapi.CallerOf(c).KeyID, Max: cfg.WebhookMaxEndpoints,
		})
		if domain.ErrorCode(err) == domain.CodeQuotaExceeded {
			c.Header("Retry-After", "60")
		}
		if err != nil {
			return err
		}
		c.Header("Location", "/v1/webhooks/"+w.ID)
		c.Header("Cache-Control", "no-store")
		return httpapi.WriteJSON(c, http.StatusCreated, CreatedWebhook{Webhook: toWebhook(w), Secret: secret})
	}
}

// HandleWebhookList lists the tenant's webhook endpoints.
//
//	@Summary		List webhook endpoints
//	@Description	Every webhook endpoint of the tenant, oldest first, without their secrets. Not paged: a tenant has at most WEBHOOK_MAX_ENDPOINTS. Takes an API key with manage_keys.
//	@ID				listWebhooks
//	@Tags			webhooks
//	@Produce		json
//	@Success		200	{object}	WebhookList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		403	{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Security		BearerAuth
//	@Router			/v1/webhooks [get]
func HandleWebhookList(st WebhookStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		ws, err := st.Webhooks(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := WebhookList{Items: make([]Webhook, len(ws))}
		for i, w := range ws {
			out.Items[i] = toWebhook(w)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleWebhookGet returns one webhook endpoint.
//
//	@Summary		Get a webhook endpoint
//	@Description	The endpoint, without its secret: its state (failing once retries ran out) and the stream position delivered through. Takes an API key with manage_keys. Another tenant's endpoint is 404.
//	@ID				getWebhook
//	@Tags			webhooks
//	@Produce		json
//	@Param			id	path		string	true	"webhook id"	example(wh_k5m2q7x3w4r6t2vz)
//	@Success		200	{object}	Webhook
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		403	{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/webhooks/{id} [get]
func HandleWebhookGet(st WebhookStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := webhookFromPath(c)
		if err != nil {
			return err
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		w, err := st.Webhook(c.Request.Context(), httpapi.TenantOf(c), id)
		return writeWebhook(c, id, w, err)
	}
}

func webhookNotFound(err error, id string) error {
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return domain.Errorf(domain.CodeNotFound, "webhook %s not found", id)
	}
	return err
}

// HandleWebhookDelete deletes a webhook endpoint.
//
//	@Summary		Delete a webhook endpoint
//	@Description	Deletes the endpoint and its delivery history; nothing more is sent to it (an attempt in flight finishes, and is not recorded). Takes an API key with manage_keys. Another tenant's endpoint, or one deleted already, is 404.
//	@ID				deleteWebhook
//	@Tags			webhooks
//	@Produce		json
//	@Param			id	path		string	true	"webhook id"	example(wh_k5m2q7x3w4r6t2vz)
//	@Success		200	{object}	Webhook	"deleted"
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		401	{object}	httpapi.Problem				"UNAUTHENTICATED: no API key, or one Tether does not know (or revoked)"
//	@Failure		403	{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/webhooks/{id} [delete]
func HandleWebhookDelete(st WebhookStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := webhookFromPath(c)
		if err != nil {
			return err
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		w, err := st.DeleteWebhook(c.Request.Context(), httpapi.TenantOf(c), id, httpapi.CallerOf(c).KeyID)
		return writeWebhook(c, id, w, err)
	}
}

// HandleWebhookDeliveries returns an endpoint's delivery history.
//
//	@Summary		A webhook endpoint's deliveries
//	@Description	The endpoint's deliveries, newest first: each one's status, attempts, the receiver's last status, the last error and the next attempt. Page with cursor (next_cursor of the previous page). Takes an API key with manage_keys.
//	@ID				listWebhookDeliveries
//	@Tags			webhooks
//	@Produce		json
//	@Param			id		path		string	true	"webhook id"						example(wh_k5m2q7x3w4r6t2vz)
//	@Param			limit	query		int		false	"page size, 1-500 (default 50)"		minimum(1)	maximum(500)	example(50)
//	@Param			cursor	query		string	false	"next_cursor of the previous page"	example(42)
//	@Success		200		{object}	WebhookDeliveryList
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		403		{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/webhooks/{id}/deliveries [get]
func HandleWebhookDeliveries(st WebhookStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := webhookFromPath(c, "limit", "cursor")
		if err != nil {
			return err
		}
		limit, err := httpapi.ParseLimit(c)
		if err != nil {
			return err
		}
		var before int64
		if cur, ok := c.GetQuery("cursor"); ok {
			if before, err = strconv.ParseInt(cur, 10, 64); err != nil || before < 1 {
				return domain.Errorf(domain.CodeInvalidRequest, "cursor must be the next_cursor of a previous page")
			}
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		if _, err := st.Webhook(c.Request.Context(), httpapi.TenantOf(c), id); err != nil {
			return webhookNotFound(err, id)
		}
		ds, err := st.WebhookDeliveries(c.Request.Context(), id, before, limit)
		if err != nil {
			return err
		}
		out := WebhookDeliveryList{Items: make([]WebhookDelivery, len(ds))}
		for i, d := range ds {
			out.Items[i] = toDelivery(d)
		}
		if len(ds) == limit {
			s := strconv.FormatInt(ds[len(ds)-1].Seq, 10)
			out.NextCursor = &s
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleWebhookReplay re-enables an endpoint and replays events to it.
//
//	@Summary		Replay a webhook endpoint
//	@Description	Makes the endpoint active again (a failing one included) and moves its cursor: to just before an event (from_event_id) or a delivery's first event (from_delivery_id), or, with neither, where deliveries stopped (the failed delivery's events are sent again). A pending delivery is cancelled. The events from there are delivered again in order, in new deliveries with new ids: receivers that dedupe across replays do so by event id. Takes an API key with manage_keys.
//	@ID				replayWebhook
//	@Tags			webhooks
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string					true	"webhook id"	example(wh_k5m2q7x3w4r6t2vz)
//	@Param			request	body		ReplayWebhookRequest	true	"where to start"
//	@Success		200		{object}	Webhook
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: both fields, or an event or delivery the endpoint does not have"
//	@Failure		401		{object}	httpapi.Problem				"UNAUTHENTICATED: no API key, or one Tether does not know (or revoked)"
//	@Failure		403		{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Security		BearerAuth
//	@Router			/v1/webhooks/{id}/replay [post]
func HandleWebhookReplay(st WebhookStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := webhookFromPath(c)
		if err != nil {
			return err
		}
		var req ReplayWebhookRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		switch {
		case req.FromEventID < 0:
			return domain.Errorf(domain.CodeInvalidRequest, "from_event_id must be an event id (a positive integer)")
		case req.FromEventID > 0 && req.FromDeliveryID != "":
			return domain.Errorf(domain.CodeInvalidRequest, "pass from_event_id or from_delivery_id, not both")
		case req.FromDeliveryID != "" && !webhook.ValidID(webhook.DeliveryIDPrefix, req.FromDeliveryID):
			return domain.Errorf(domain.CodeInvalidRequest, "webhook %s has no delivery %q", id, req.FromDeliveryID)
		}
		if err := mayManageWebhooks(c); err != nil {
			return err
		}
		w, err := st.ReplayWebhook(c.Request.Context(), httpapi.TenantOf(c), id, httpapi.CallerOf(c).KeyID,
			webhook.ReplayFrom{EventID: req.FromEventID, DeliveryID: req.FromDeliveryID})
		return writeWebhook(c, id, w, err)
	}
}
