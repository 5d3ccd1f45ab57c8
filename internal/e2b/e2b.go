// Package e2b serves E2B's protocol from Tether: the control plane the e2b
// SDKs call (E2B_API_URL=$TETHER/e2b) and the sandbox daemon's, envd's
// (E2B_SANDBOX_URL=$TETHER/e2b/envd). It is a second face over the same
// core: every control-plane call becomes a call of Tether's own API (/v1),
// made in process through the same handler with the caller's API key, so a
// sandbox made here is an ordinary Tether sandbox (its registry row, audit,
// events, webhooks, owner lease, janitor) and a /v1 sandbox can be reached
// from the SDK. The daemon's calls go through /v1 too, so that they are
// checked and recorded in the sandbox's activity as /v1's are: its file
// transfers, its filesystem calls (as execs), and a process's start,
// input, signal and resize. Only what /v1 does not record either (a
// process's output, the process list, a folder's watch) is read of the
// provider's capabilities, after /v1 has said the caller's key may see
// the sandbox.
// docs/e2b.md says what is served and what is not.
package e2b

import (
	"net/http"
	"strings"

	"github.com/tetherhq/tether/internal/domain"
)

// EnvdVersion is the version of E2B's sandbox daemon whose protocol this
// package implements, answered in every create and connect: the SDK turns
// features on by it (0.5.2 closing stdin, 0.5.7 octet-stream uploads) and
// refuses those of later versions (file metadata, 0.6.2; watch entries,
// 0.6.3) with its own error.
const EnvdVersion = "0.5.7"

// Prefix is where the control plane is served; EnvdPrefix, the daemon.
const (
	Prefix     = "/e2b"
	EnvdPrefix = "/e2b/envd"
)

// Options are what the face needs of the server it is part of.
type Options struct {
	// API is Tether's own API handler; /v1 calls are made through it.
	API http.Handler
	// Providers are the enabled providers, by name: the daemon's calls go
	// to their capabilities.
	Providers map[string]domain.Provider
	// Node is this replica's node id in a cluster; empty for a single
	// replica. The providers hold only the sandboxes of this node.
	Node string
	// Domain is the domain of the sandboxes' hosts (E2B_DOMAIN), which
	// creates and connects answer; empty: none (null).
	Domain string
	// Hosts records the sandboxes made here, for their hosts, and derives
	// their traffic access tokens; nil records nothing and answers none.
	Hosts HostStore
}

// New returns the handler of everything under Prefix (EnvdPrefix included).
func New(o Options) http.Handler {
	c := core{api: o.API}
	cp := controlRoutes(control{core: c, domain: o.Domain, hosts: o.Hosts})
	envd := envdRoutes(c, o.Providers, o.Node)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == EnvdPrefix || strings.HasPrefix(p, EnvdPrefix+"/"):
			http.StripPrefix(EnvdPrefix, envd).ServeHTTP(w, r)
		default:
			http.StripPrefix(Prefix, cp).ServeHTTP(w, r)
		}
	})
}
