package domain

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"
)

// Pool is a warm pool: a tenant's standing order for MinReady sandboxes of
// one provider and params, created ahead of demand so that a create naming
// the pool gets one that is ready at once.
//
// A pool's members are ordinary sandboxes whose owner is the pool
// (PoolOwner): an owner lease Tether itself holds and renews while the pool
// exists, so that members never outlive their pool by more than a lease.
// Each carries the label PoolLabel=Name. A claim moves a member to the
// claimer's owner; it is then no longer the pool's.
type Pool struct {
	Tenant   string
	Name     string
	Provider string
	// Params are the provider-specific options every member is created
	// with (a local image is params.image).
	Params json.RawMessage
	// MinReady is how many members the refiller keeps in the pool (ready,
	// or on their way); MaxSize caps the pool's members: a refill never
	// makes more, and lowering it ends the surplus.
	MinReady int
	MaxSize  int
	// Size counts the pool's live (unclaimed) members and Ready those of
	// them that are ready to claim; they are read with the pool.
	Size  int
	Ready int

	// Refill is the state of the pool's refills: their backoff and the
	// last error they saw.
	Refill PoolRefill

	CreatedAt time.Time
	UpdatedAt time.Time
}

// PoolRefill is the state of a pool's refills. A refill round whose
// members all failed (none became ready) is a failure: the next member is
// requested no sooner than NextAt, after a bounded exponential backoff,
// and one at a time until a member is ready again, which resets Failures
// and NextAt.
type PoolRefill struct {
	// Failures counts the consecutive failed rounds; 0: not backing off.
	Failures int
	// NextAt is the earliest a refill requests a member again; zero: at
	// the next look.
	NextAt time.Time
	// Error is the last error a refill saw (a failed member's, or the
	// tenant's live-sandbox quota), at ErrorAt; "" if none yet.
	Error   string
	ErrorAt time.Time
	// Pending counts the members refills requested whose outcome no
	// refill has seen yet.
	Pending int
}

// PoolLabel is the label every pool member carries, its value the pool's
// name; a claimed member keeps it.
const PoolLabel = "tether.pool"

// poolOwnerPrefix starts the owner names of pools; clients may not name
// such an owner.
const poolOwnerPrefix = "pool:"

// PoolOwner is the owner of the pool's unclaimed members.
func PoolOwner(pool string) string { return poolOwnerPrefix + pool }

// ReservedOwner reports whether owner is a name only pools hold.
func ReservedOwner(owner string) bool { return strings.HasPrefix(owner, poolOwnerPrefix) }

// poolNamePattern is the shape of a pool name: a DNS label.
var poolNamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidPoolName reports whether name has the shape of a pool name: 1-63
// lowercase letters, digits and '-', starting and ending with a letter or
// digit.
func ValidPoolName(name string) bool { return poolNamePattern.MatchString(name) }

// PoolUpdate is a change to a pool's sizes; nil fields stay.
type PoolUpdate struct {
	MinReady *int
	MaxSize  *int
}

// ClaimParams is a create that names a pool: the caller's owner, labels and
// lifetime, applied to the member it claims.
type ClaimParams struct {
	Tenant string
	Pool   string
	Caller Caller
	Owner  string
	Labels map[string]string
	// TTL is the lifetime the caller asked for, or the default; Explicit
	// says the caller asked: a member then is claimed only if it may live
	// that long (members count their lifetime from their creation).
	TTL      time.Duration
	Explicit bool
	// OwnerTTL is the lease an owner gets if it has no live one.
	OwnerTTL time.Duration
	// MaxLifetime caps every sandbox's lifetime from its creation.
	MaxLifetime time.Duration
	// IdempotencyKey and RequestHash make a retried claim return the
	// sandbox the first one got.
	IdempotencyKey string
	RequestHash    []byte
}

// PoolClaim is what a claim from a pool got (the store's ClaimFromPool).
type PoolClaim struct {
	// Sandbox is the member claimed, or the sandbox an earlier claim or
	// create with the same idempotency key got (Replayed).
	Sandbox  Sandbox
	Claimed  bool
	Replayed bool
	// Pool is the pool, read when no member was ready (Claimed and
	// Replayed false), for the create that stands in for the claim.
	Pool Pool
}
