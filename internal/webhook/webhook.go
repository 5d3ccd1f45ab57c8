// Package webhook is what Tether's webhooks are, apart from where they are
// kept and who sends them: endpoints and their event filters, deliveries,
// the JSON a receiver gets, its signature, and the guard that keeps
// deliveries off addresses inside the operator's network (SSRF).
//
// It imports nothing of Tether's but the domain package: the store keeps
// endpoints and deliveries, internal/lifecycle sends them, and the API
// validates what clients ask for with it.
package webhook

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// State is an endpoint's state: active endpoints get deliveries; a failing
// one gets none until it is replayed.
type State string

// The states of an endpoint.
const (
	StateActive  State = "active"
	StateFailing State = "failing"
)

// Status is a delivery's status.
type Status string

// The statuses of a delivery. A pending delivery is being attempted (at
// most one per endpoint); delivered is final (the receiver answered 2xx);
// failed is final (retries ran out: the endpoint is failing); cancelled is
// final (a replay or an endpoint's re-enabling replaced it).
const (
	StatusPending   Status = "pending"
	StatusDelivered Status = "delivered"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Filter chooses the events an endpoint gets. An empty list matches
// everything; an event matches when it matches both lists.
type Filter struct {
	// States are the to-states of the events to deliver.
	States []domain.State
	// Reasons are the reasons of the events to deliver (an event without a
	// reason matches no list of reasons).
	Reasons []domain.Reason
	// Types are the types of the events to deliver (state changes,
	// releases). A release matches States and Reasons by the terminal
	// state and the end's reason of its sandbox.
	Types []domain.EventType
}

// Match reports whether the event passes the filter.
func (f Filter) Match(e domain.Event) bool {
	return (len(f.States) == 0 || slices.Contains(f.States, e.To)) &&
		(len(f.Reasons) == 0 || slices.Contains(f.Reasons, e.Reason)) &&
		(len(f.Types) == 0 || slices.Contains(f.Types, e.Kind()))
}

// EventReasons are every reason an event can carry: the reasons a sandbox
// ends with, and the reasons of the events that record other changes.
func EventReasons() []domain.Reason {
	return append(append(slices.Clone(domain.Reasons), domain.ReasonOwnerTransferred, domain.ReasonOutageCredited),
		domain.SnapshotReasons...)
}

// Endpoint is a tenant's webhook endpoint as Tether records it.
type Endpoint struct {
	ID          string
	Tenant      string
	URL         string
	Description string
	Filter      Filter
	State       State
	// Cursor is the stream position delivered through: every matching
	// event up to it was answered 2xx (or skipped by a replay).
	Cursor    domain.StreamPosition
	CreatedAt time.Time
	// CreatedBy is the id of the API key that made it.
	CreatedBy string
	// FailingSince is when the endpoint became failing; nil while active.
	FailingSince *time.Time
}

// NewEndpoint is an endpoint to create.
type NewEndpoint struct {
	Tenant      string
	URL         string
	Description string
	Filter      Filter
	// By is the id of the API key asking; it must have manage_keys.
	By string
	// Max caps the tenant's endpoints (0: no cap).
	Max int
}

// Delivery is one batch of an endpoint's events, recorded before it is
// first sent and resent as it is, under the same id, until the receiver
// answers 2xx or retries run out.
type Delivery struct {
	// ID is the delivery's idempotency key (the Tether-Delivery header).
	ID         string
	EndpointID string
	Tenant     string
	Status     Status
	// EventIDs are the events of the batch, in stream order.
	EventIDs []int64
	// After and Last bound the stream positions the batch covers: after
	// After, through Last (events between them that the filter refused
	// included). A 2xx moves the endpoint's cursor to Last.
	After, Last domain.StreamPosition
	// Seq orders an endpoint's deliveries (the history's cursor).
	Seq       int64
	Attempts  int
	CreatedAt time.Time
	// NextAttemptAt is when a pending delivery is tried next.
	NextAttemptAt  *time.Time
	LastAttemptAt  *time.Time
	DeliveredAt    *time.Time
	ResponseStatus int
	Error          string
}

// ReplayFrom says where a replay starts: after the event before EventID, or
// at the first event of delivery DeliveryID; neither resumes at the
// endpoint's cursor.
type ReplayFrom struct {
	EventID    int64
	DeliveryID string
}

// Event is one event as a receiver gets it.
type Event struct {
	ID int64 `json:"id"`
	// Type is sandbox.state_changed or sandbox.released.
	Type      string    `json:"type"`
	SandboxID string    `json:"sandbox_id"`
	Tenant    string    `json:"tenant"`
	From      *string   `json:"from"`
	To        string    `json:"to"`
	Reason    *string   `json:"reason"`
	Actor     string    `json:"actor"`
	At        time.Time `json:"at"`
	Message   string    `json:"message"`
}

// Payload is the body of a delivery.
type Payload struct {
	// ID is the delivery's id: the same on every attempt.
	ID        string  `json:"id"`
	WebhookID string  `json:"webhook_id"`
	Events    []Event `json:"events"`
}

// Body is the JSON body of the delivery d of events: the same bytes on
// every attempt.
func Body(d Delivery, events []domain.Event) ([]byte, error) {
	p := Payload{ID: d.ID, WebhookID: d.EndpointID, Events: make([]Event, len(events))}
	for i, e := range events {
		p.Events[i] = Event{
			ID: e.ID, Type: string(e.Kind()), SandboxID: e.SandboxID, Tenant: e.Tenant, From: optional(string(e.From)), To: string(e.To),
			Reason: optional(string(e.Reason)), Actor: string(e.Actor), At: e.At.UTC(), Message: e.Message,
		}
	}
	return json.Marshal(p)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// SecretPrefix starts every endpoint secret, so that a leaked one is easy
// to recognise.
const SecretPrefix = "whsec_"

// NewSecret makes an endpoint's signing secret: 32 random bytes.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// The prefixes of endpoint and delivery ids.
const (
	EndpointIDPrefix = "wh_"
	DeliveryIDPrefix = "whd_"
)

// NewEndpointID and NewDeliveryID make random ids.
func NewEndpointID() string { return newID(EndpointIDPrefix) }

// NewDeliveryID makes a random delivery id.
func NewDeliveryID() string { return newID(DeliveryIDPrefix) }

// ValidID reports whether id could be an id made with prefix, so that
// anything else is not found without a query.
func ValidID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 16 {
		return false
	}
	for _, r := range rest {
		if (r < 'a' || r > 'z') && (r < '2' || r > '7') {
			return false
		}
	}
	return true
}

// UserAgent is the User-Agent of deliveries: tether-webhooks/<the
// binary's module version, or dev>.
func UserAgent() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return "tether-webhooks/" + v
}
