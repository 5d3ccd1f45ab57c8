package domain

import (
	"time"

	"github.com/tetherhq/tether/provider"
)

// SnapshotState is where a snapshot is: creating, then ready or failed; a
// ready one whose data its provider no longer has is lost; deleted is the
// end of every snapshot (by a client, or by the janitor past its
// retention).
type SnapshotState string

// The snapshot states.
const (
	SnapshotCreating SnapshotState = "creating"
	SnapshotReady    SnapshotState = "ready"
	SnapshotFailed   SnapshotState = "failed"
	SnapshotLost     SnapshotState = "lost"
	SnapshotDeleted  SnapshotState = "deleted"
)

// SnapshotStates lists every snapshot state.
var SnapshotStates = []SnapshotState{SnapshotCreating, SnapshotReady, SnapshotFailed, SnapshotLost, SnapshotDeleted}

// snapshotTransitions is the snapshot's transition table (the migration's
// trigger holds the same).
var snapshotTransitions = map[SnapshotState][]SnapshotState{
	SnapshotCreating: {SnapshotReady, SnapshotFailed, SnapshotDeleted},
	SnapshotReady:    {SnapshotLost, SnapshotDeleted},
	SnapshotFailed:   {SnapshotDeleted},
	SnapshotLost:     {SnapshotDeleted},
}

// CanSnapshotTransition reports whether a snapshot may move from one state
// to another.
func CanSnapshotTransition(from, to SnapshotState) bool {
	for _, s := range snapshotTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// SnapshotKind says who asked for a snapshot: a client (manual), or the
// sandbox's on_end when it ended (exit).
type SnapshotKind string

// The snapshot kinds.
const (
	SnapshotManual SnapshotKind = "manual"
	SnapshotExit   SnapshotKind = "exit"
)

// OnEndSnapshot is the on_end of a sandbox whose workspace is snapshotted
// when it ends by its owner's lease lapsing, its TTL, or a client's delete.
const OnEndSnapshot = "snapshot"

// ExitSnapshotReasons are the ends that take an exit snapshot of a
// sandbox created with on_end "snapshot".
var ExitSnapshotReasons = []Reason{ReasonOwnerExpired, ReasonExpired, ReasonRequested}

// The reasons of the events that record a snapshot's changes in its
// source sandbox's history (from and to the sandbox's state then, like
// outage_credited); never a sandbox's own reason.
const (
	ReasonSnapshotRequested Reason = "snapshot_requested"
	ReasonSnapshotReady     Reason = "snapshot_ready"
	ReasonSnapshotFailed    Reason = "snapshot_failed"
	ReasonSnapshotLost      Reason = "snapshot_lost"
	ReasonSnapshotDeleted   Reason = "snapshot_deleted"
)

// SnapshotReasons lists the snapshot events' reasons.
var SnapshotReasons = []Reason{ReasonSnapshotRequested, ReasonSnapshotReady, ReasonSnapshotFailed,
	ReasonSnapshotLost, ReasonSnapshotDeleted}

// Snapshot is one snapshot as Tether records it.
type Snapshot struct {
	ID       string
	Tenant   string
	SourceID string
	Provider string
	Node     string
	Kind     SnapshotKind
	// Memory is set for a snapshot of the whole machine (its memory and
	// device state with its disks), which copies resume from.
	Memory bool
	State  SnapshotState
	Size   int64
	Error  string
	// Epoch is the source sandbox's epoch of the claim that last took the
	// snapshot: its writes are fenced on it.
	Epoch     int64
	Attempts  int
	CreatedAt time.Time
	UpdatedAt time.Time
	Deadline  time.Time
	ReadyAt   *time.Time
	ExpiresAt *time.Time
	DeletedAt *time.Time
}

// NewSnapshotID returns a fresh snapshot id: "snp_" and 26 characters.
func NewSnapshotID() string { return provider.NewSnapshotID() }

// ValidSnapshotID reports whether id has the shape of a snapshot id.
func ValidSnapshotID(id string) bool { return provider.ValidSnapshotID(id) }

// SnapshotRequest is a validated request for a snapshot.
type SnapshotRequest struct {
	Tenant   string
	SourceID string
	Caller   Caller
	// Memory asks for a snapshot of the whole machine.
	Memory bool
	// Timeout bounds the taking; Retention, if positive, sets expires_at.
	Timeout, Retention time.Duration
	// MaxCount and MaxBytes are the tenant's quota (the server's, unless
	// the tenant row overrides them); zero: no limit.
	MaxCount int
	MaxBytes int64
}

// SnapshotFilter selects a tenant's snapshots.
type SnapshotFilter struct {
	Tenant   string
	SourceID string
	After    *Cursor
	Limit    int
}
