// Package cluster is Tether's node-to-node protocol: how one replica hands a
// data-plane call to the node a sandbox lives on, and how that node knows
// the call came from the cluster. A sandbox of a host-bound provider (local)
// lives on one node, and only that node's replicas can reach it; a replica
// that receives a call for a sandbox on another node forwards it there
// (Forward), streaming the body both ways, signed with the cluster's secret
// and carrying the caller's tenant and key, so that the node acts for the
// caller and records it in the audit trail.
//
// It owns the signature (sign.go: the only file that signs a forwarded call
// or checks a signature), the checks a forwarded call must pass (Verify: an
// accepted route, meant for this node, recent, its nonce never seen by any
// replica of the node), the nonces (kept in Postgres through NonceKeeper:
// table forward_nonces) and the proxy. It speaks net/http only; the API
// (internal/http) decides which routes accept forwarded calls (Accept) and
// turns this package's errors into problem responses.
package cluster

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// NodeFinder finds a node's heartbeat record.
type NodeFinder interface {
	Node(ctx context.Context, id string) (domain.Node, error)
}

// NonceKeeper records forwarded calls' nonces where every replica sees
// them.
type NonceKeeper interface {
	// RememberNonce records nonce until expires; false if it was recorded
	// before (the call is a replay).
	RememberNonce(ctx context.Context, nonce string, expires time.Time) (bool, error)
}

// Nodes is what forwarding needs: this node's id, the cluster's secret and
// where the other nodes are. The zero value forwards nothing: every sandbox
// is served here.
type Nodes struct {
	// Self is this replica's node id.
	Self string
	// Secret signs and checks forwarded requests (at least 32 bytes).
	Secret []byte
	// Finder looks other nodes up.
	Finder NodeFinder
	// Nonces remembers the nonces of forwarded calls taken, for all the
	// replicas of every node (Postgres). Nil keeps them in this process
	// only, which is right only with one replica per node.
	Nonces NonceKeeper
	// Now is the clock that signs and checks the calls' times; nil is
	// time.Now.
	Now func() time.Time
}

// Caller is who a forwarded call acts for: the tenant and the API key the
// first replica authenticated.
type Caller struct {
	Tenant string
	Key    domain.Caller
}

// Cluster is one replica's end of the protocol: it forwards calls to other
// nodes and checks the calls they forward to it. A nil *Cluster (see New)
// forwards nothing and accepts no forwarded call.
type Cluster struct {
	Nodes
	transport *http.Transport

	// routes are the routes ("METHOD /path/:param") that accept forwarded
	// calls (Accept).
	routes map[string]bool
	// seen holds, without Nonces, the nonces of forwarded calls accepted
	// within the skew window and when each may be forgotten.
	mu   sync.Mutex
	seen map[string]time.Time
}

// New returns this replica's end of the protocol, or nil (forward nothing)
// when n lacks the node's id, the secret or the finder.
func New(n Nodes) *Cluster {
	if n.Self == "" || len(n.Secret) == 0 || n.Finder == nil {
		return nil
	}
	if n.Now == nil {
		n.Now = time.Now
	}
	return &Cluster{
		Nodes:  n,
		routes: map[string]bool{},
		seen:   map[string]time.Time{},
		transport: &http.Transport{
			Proxy:                 nil, // replicas talk directly, never through HTTP_PROXY
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
	}
}

// Accept lets the route (method, and path as the router names it:
// "/v1/sandboxes/:id/exec") take calls forwarded by other nodes. Only
// accepted routes do.
func (c *Cluster) Accept(method, path string) {
	if c != nil {
		c.routes[method+" "+path] = true
	}
}
