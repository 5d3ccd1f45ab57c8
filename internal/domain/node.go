package domain

import "time"

// Node is a host Tether replicas run on, as its heartbeat records it.
// Sandboxes of host-bound providers belong to a node.
type Node struct {
	ID string
	// URL is where other replicas reach the node's API.
	URL string
	// Providers are the providers enabled on the node.
	Providers   []string
	StartedAt   time.Time
	HeartbeatAt time.Time
	// Alive is false once the heartbeat is older than the grace period.
	Alive bool
	// LiveSandboxes counts live sandboxes placed on the node (of one
	// tenant, where a listing says so).
	LiveSandboxes int
}
