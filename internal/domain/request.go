package domain

import (
	"encoding/json"
	"time"

	"github.com/tetherhq/tether/provider"
)

// NewID returns a fresh sandbox id (provider.NewSandboxID): "sbx_" and 26
// base32 characters encoding the creation time in milliseconds then 80
// random bits, so that ids made later sort later.
func NewID() string { return provider.NewSandboxID() }

// ValidID reports whether id has the shape of a sandbox id, in its one
// spelling (provider.ValidSandboxID). Malformed ids are answered as not
// found without a query, and refused as a create's client-chosen id.
func ValidID(id string) bool { return provider.ValidSandboxID(id) }

// CreateParams is a validated request for a new sandbox, as the store
// records it.
type CreateParams struct {
	// ID is the client-chosen sandbox id; empty: the store makes one.
	ID     string
	Tenant string
	// Caller is the API key the request was made with, for the event.
	Caller   Caller
	Provider string
	Owner    string
	Labels   map[string]string
	Env      map[string]string
	Setup    string
	Params   json.RawMessage
	// TTL is how long the sandbox may live; the caller has already applied
	// the server's default and maximum.
	TTL time.Duration
	// OwnerTTL is the lease an owner gets if it has no live one.
	OwnerTTL time.Duration
	// CreateTimeout bounds creation: past it the sandbox fails.
	CreateTimeout time.Duration
	// IdempotencyKey, if set, makes the create return the sandbox an earlier
	// create with the same key made, provided RequestHash matches.
	IdempotencyKey string
	RequestHash    []byte
	// OnEnd is "snapshot" to take an exit snapshot (see Sandbox.OnEnd).
	OnEnd string
	// FromSnapshot is a ready snapshot of the tenant, of the same
	// provider, to start from; Node is the node holding it (host-bound
	// providers), where the sandbox must then be created.
	FromSnapshot, Node string
}

// Cursor is a position in a newest-first sandbox listing: the last row seen.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// ListFilter selects sandboxes. Zero fields do not filter.
type ListFilter struct {
	Tenant string
	States []State
	// Reasons, when set, selects ended sandboxes by why they ended.
	Reasons       []Reason
	Owner         string
	Provider      string
	Labels        map[string]string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Released, when set, selects by whether resources are confirmed gone.
	Released *bool
	After    *Cursor
	Limit    int
}

// Change announces that a sandbox changed state or was released. A zero ID
// means changes may have been missed (the announcer reconnected): every
// listener should look again. A change whose State is SnapshotChanged is a
// snapshot's, ID the snapshot's id: it left creating (see
// Store.announceSnapshots).
type Change struct {
	ID       string
	State    State
	Released bool
}

// SnapshotChanged is the State of a Change that announces a snapshot's
// change rather than a sandbox's. It is no sandbox state (Valid is false),
// so nothing that waits for sandbox states mistakes it for one.
const SnapshotChanged State = "snapshot"

// TenantUsage is what quotas are judged by: a tenant's live sandboxes and
// its own quotas, where it has any (nil: the server's default).
type TenantUsage struct {
	Live int
	// MaxLive and CreatesPerMinute override the server's quotas for this
	// tenant when set.
	MaxLive, CreatesPerMinute *int
}
