// Package domain is Tether's domain: the sandbox, its lifecycle states and
// the table of legal transitions between them, the events that record each
// transition, the provider contract, and the errors every layer speaks.
//
// It imports nothing else from Tether, so every adapter (HTTP, store,
// providers) and the lifecycle machinery can depend on it without depending
// on each other.
package domain

import (
	"encoding/json"
	"time"
)

// State is where a sandbox is in its lifecycle.
type State string

// The lifecycle states. Requested, Creating, Ready, Pausing, Paused and
// Resuming are live; the rest are terminal. Pausing and Resuming are the
// in-flight states of a pause and a resume, which the executor drives like
// Creating (claim, lease, fenced writes).
const (
	StateRequested  State = "requested"
	StateCreating   State = "creating"
	StateReady      State = "ready"
	StatePausing    State = "pausing"
	StatePaused     State = "paused"
	StateResuming   State = "resuming"
	StateCancelled  State = "cancelled"
	StateTerminated State = "terminated"
	StateFailed     State = "failed"
)

// States lists every state in lifecycle order.
var States = []State{StateRequested, StateCreating, StateReady, StatePausing, StatePaused, StateResuming,
	StateCancelled, StateTerminated, StateFailed}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StateRequested, StateCreating, StateReady, StatePausing, StatePaused, StateResuming,
		StateCancelled, StateTerminated, StateFailed:
		return true
	}
	return false
}

// Terminal reports whether s is a final state: a terminal sandbox never
// changes state again.
func (s State) Terminal() bool {
	return s == StateCancelled || s == StateTerminated || s == StateFailed
}

// Settled reports whether s is no longer on its way somewhere: not being
// created (requested, creating), paused (pausing) or resumed (resuming). A
// client waiting for a sandbox stops waiting once its state is settled.
func (s State) Settled() bool {
	return s != StateRequested && s != StateCreating && !s.Transitioning()
}

// Transitioning reports whether s is a pause or a resume in flight: the
// executor drives the sandbox out of it, and past its pause deadline the
// janitor fails it.
func (s State) Transitioning() bool {
	return s == StatePausing || s == StateResuming
}

// transitions is the lifecycle's transition table, keyed by source state.
//
// A pause or resume the provider refuses goes back where it came from
// (pausing → ready, resuming → paused): a provider's Pause or Resume that
// returns an error leaves the sandbox as it was. One whose outcome is
// unknown past its deadline (the call hung, its executors kept dying)
// fails the sandbox (reason pause_failed or resume_failed): its resource is
// in an unknown state, and only destroying it is safe. The live states that
// hold a resource (ready, pausing, paused, resuming) end terminated, like
// ready; those that may not (requested, creating) end cancelled.
var transitions = map[State][]State{
	StateRequested: {StateCreating, StateCancelled},
	StateCreating:  {StateReady, StateCancelled, StateFailed},
	StateReady:     {StatePausing, StateTerminated},
	StatePausing:   {StatePaused, StateReady, StateTerminated, StateFailed},
	StatePaused:    {StateResuming, StateTerminated},
	StateResuming:  {StateReady, StatePaused, StateTerminated, StateFailed},
}

// CanTransition reports whether the lifecycle allows moving from one state to
// another. Terminal states have no way out.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// EndState returns the terminal state that ending a sandbox in state s leads
// to: a sandbox that never became ready is cancelled, a ready one (or a
// pausing, paused or resuming one) is terminated. ok is false when s is
// already terminal.
func EndState(s State) (end State, ok bool) {
	switch s {
	case StateRequested, StateCreating:
		return StateCancelled, true
	case StateReady, StatePausing, StatePaused, StateResuming:
		return StateTerminated, true
	}
	return "", false
}

// Reason says why a sandbox reached a terminal state. Reasons are stable API
// values.
type Reason string

// The reasons a sandbox ends.
const (
	// ReasonRequested: a client asked (DELETE).
	ReasonRequested Reason = "requested"
	// ReasonOwnerReleased: the owner said it is done.
	ReasonOwnerReleased Reason = "owner_released"
	// ReasonOwnerExpired: the owner's lease lapsed.
	ReasonOwnerExpired Reason = "owner_expired"
	// ReasonExpired: the sandbox's own deadline (TTL) passed.
	ReasonExpired Reason = "expired"
	// ReasonCreateFailed: the provider could not create it, or not in time.
	ReasonCreateFailed Reason = "create_failed"
	// ReasonLost: the provider no longer holds it.
	ReasonLost Reason = "lost"
	// ReasonPauseFailed: a pause did not complete by its deadline.
	ReasonPauseFailed Reason = "pause_failed"
	// ReasonResumeFailed: a resume did not complete by its deadline.
	ReasonResumeFailed Reason = "resume_failed"
	// ReasonOwnerTransferred is the reason of the event that records a
	// change of owner; it is never a sandbox's own reason.
	ReasonOwnerTransferred Reason = "owner_transferred"
	// ReasonOutageCredited is the reason of the event that records that an
	// outage was credited to the sandbox's deadline or its owner's lease;
	// it is never a sandbox's own reason.
	ReasonOutageCredited Reason = "outage_credited"
	// ReasonPoolDeleted: the warm pool the sandbox was an unclaimed member
	// of was deleted.
	ReasonPoolDeleted Reason = "pool_deleted"
	// ReasonPoolShrunk: its warm pool's max_size was lowered below the
	// pool's size, and this unclaimed member was surplus.
	ReasonPoolShrunk Reason = "pool_shrunk"
)

// Reasons lists every reason a sandbox itself can end with.
var Reasons = []Reason{ReasonRequested, ReasonOwnerReleased, ReasonOwnerExpired, ReasonExpired, ReasonCreateFailed, ReasonLost,
	ReasonPauseFailed, ReasonResumeFailed,
	ReasonPoolDeleted, ReasonPoolShrunk}

// Actor names who caused a transition, for the event history.
type Actor string

// The actors of transitions.
const (
	ActorClient   Actor = "client"
	ActorExecutor Actor = "executor"
	ActorJanitor  Actor = "janitor"
)

// Sandbox is one sandbox as Tether records it.
type Sandbox struct {
	ID       string
	Tenant   string
	State    State
	Provider string
	Owner    string
	Labels   map[string]string
	Env      map[string]string
	Setup    string
	Params   json.RawMessage

	// Reason and Error explain a terminal state.
	Reason Reason
	Error  string

	// Released is true once the provider confirmed that nothing it holds for
	// this sandbox is left.
	Released bool
	// ReleaseError is the last failed destroy's error while Released is
	// false; ReleaseAttempts counts the destroy claims so far.
	ReleaseError    string
	ReleaseAttempts int

	// ProviderID and WorkDir describe the provider's resource once ready.
	ProviderID string
	WorkDir    string
	// Node is the node (host) a host-bound provider's sandbox was placed
	// on, from its create's claim; empty for other providers and before.
	Node string

	CreatedAt  time.Time
	UpdatedAt  time.Time
	ReadyAt    *time.Time
	EndedAt    *time.Time
	ReleasedAt *time.Time
	// ExpiresAt is the sandbox's deadline: past it, it is ended with reason
	// expired. It is never beyond CreatedAt plus the server's max lifetime.
	ExpiresAt time.Time
	// CreateDeadline is when creation gives up and the sandbox fails.
	CreateDeadline time.Time
	// PauseDeadline is when the pause or resume in flight (or the last
	// one) gives up and the sandbox fails; nil before the first.
	PauseDeadline *time.Time

	// Epoch is bumped by every claim; writes by a worker are fenced on it.
	Epoch int64
	// Attempts counts provider create calls started for this sandbox.
	Attempts int

	// OnEnd is "snapshot" for a sandbox whose workspace is snapshotted
	// before its release when it ends by ExitSnapshotReasons; "" else.
	OnEnd string
	// FromSnapshot is the snapshot the sandbox started from; "" for a
	// fresh one.
	FromSnapshot string
}

// Live reports whether the sandbox is not yet terminal.
func (s *Sandbox) Live() bool { return !s.State.Terminal() }

// Event is one row of a sandbox's append-only history: one per transition.
type Event struct {
	ID        int64
	SandboxID string
	Tenant    string
	At        time.Time
	// From is empty for the event that records the sandbox's creation.
	From    State
	To      State
	Reason  Reason
	Actor   Actor
	Message string
	// Caller is the API key behind a client's transition; zero for the
	// executor's and the janitor's.
	Caller Caller
	// Type is what the event records: a state change (the history's
	// events; also the zero value) or a release (webhooks only).
	Type EventType
}

// EventType is the kind of an event webhooks deliver.
type EventType string

// The types of event. A state change is an entry of the sandbox's history
// (from, to, reason); a release records that a terminal sandbox's provider
// resources were confirmed gone (released became true): its From and To
// are the terminal state it stays in, its Reason the end's.
const (
	EventStateChanged EventType = "sandbox.state_changed"
	EventReleased     EventType = "sandbox.released"
)

// EventTypes are every type of event, in the order documented.
var EventTypes = []EventType{EventStateChanged, EventReleased}

// Kind is the event's type, a state change when unset.
func (e Event) Kind() EventType {
	if e.Type == "" {
		return EventStateChanged
	}
	return e.Type
}

// StreamPosition is a place in a tenant's event stream: after the event id
// ID of transaction Tx. The stream orders events by (Tx, ID), which, unlike
// ids alone, only ever grows at its end as transactions commit.
type StreamPosition struct {
	Tx uint64
	ID int64
}

// After reports whether p comes after q.
func (p StreamPosition) After(q StreamPosition) bool {
	return p.Tx > q.Tx || (p.Tx == q.Tx && p.ID > q.ID)
}

// StreamedEvent is an event with its place in the stream.
type StreamedEvent struct {
	Event
	Position StreamPosition
}

// ReconcileEvent is one thing the janitor's reconciliation found at a
// provider and did about it: an orphan destroyed (or a failed attempt), or
// a sandbox the provider lost.
type ReconcileEvent struct {
	ID        int64
	At        time.Time
	Provider  string
	SandboxID string
	// Tenant is empty for a resource of a sandbox Tether has no record of.
	Tenant  string
	Action  string
	Message string
}

// Owner is an owner of a tenant, with its lease and its live sandboxes.
type Owner struct {
	Name      string
	ExpiresAt time.Time
	CreatedAt time.Time
	// Live counts its sandboxes that have not ended.
	Live int
}
