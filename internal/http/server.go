// Package http is Tether's REST API: routing, authentication, request
// decoding and validation, and the rendering of sandboxes, events and errors
// as JSON. It talks to the registry and the providers through small
// interfaces declared next to the handlers that use them.
package http

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b"
	"github.com/tetherhq/tether/internal/framing"
	"github.com/tetherhq/tether/internal/http/controlplane"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/events"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// Deps are the collaborators the API needs.
type Deps struct {
	Store     Store
	Changes   httpapi.ChangeSubscriber
	Providers []domain.Provider
	// Ready reports whether the service can serve: Postgres reachable and
	// the schema current. It never depends on a provider.
	Ready func(ctx context.Context) error
	// Metrics receives the HTTP metrics; Gatherer serves /metrics (nil:
	// no /metrics, as when METRICS_ADDR serves them elsewhere).
	Metrics  prometheus.Registerer
	Gatherer prometheus.Gatherer
	// Draining is done once the server begins to shut down: long-polls
	// then answer at once with the sandbox as it is, and exec streams end
	// with a retryable error, so that shutdown never waits on a client.
	// Nil means never.
	Draining context.Context
	// Nodes lets data-plane calls for sandboxes on other nodes be
	// forwarded there (see package cluster); the zero value serves every
	// sandbox here.
	Nodes cluster.Nodes
	// Authenticated, if set, is told the context of each request that
	// authenticated, so that its connection counts as a client's (the
	// connection guard closes connections that never did first).
	Authenticated func(ctx context.Context)
	// Framing, if set, tells each request's framing (package framing),
	// asked once per request, in order, before anything else: an
	// Ambiguous request is refused, and after an Unsure one the
	// connection is closed.
	Framing func(ctx context.Context) framing.Verdict
	// Egress checks edits of allow-list sandboxes' rules as the egress
	// proxy reads them; nil when none runs (the edits are NOT_SUPPORTED).
	Egress controlplane.EgressRules
	// Secrets seals tenants' secrets; nil without SECRETS_KEY (the
	// secrets routes answer NOT_SUPPORTED).
	Secrets controlplane.Sealer
}

// Store is what the API needs from the registry, as the union of the small
// interfaces its handlers take.
type Store interface {
	httpapi.CredentialStore
	controlplane.SandboxCreator
	httpapi.SandboxGetter
	controlplane.SandboxLister
	controlplane.SandboxEnder
	controlplane.SandboxPauser
	events.EventLister
	controlplane.OwnerStore
	controlplane.OwnerTransferrer
	controlplane.SandboxRenewer
	httpapi.UsageReader
	events.EventStreamer
	controlplane.KeyStore
	dataplane.ActivityLister
	dataplane.ActivityRecorder
	events.ReconcileLister
	controlplane.OwnerLister
	controlplane.NodeLister
	controlplane.WebhookStore
	controlplane.PoolStore
	dataplane.PreviewStore
	controlplane.SnapshotStore
	controlplane.NetworkStore
	controlplane.SecretStore
	e2b.HostStore
}

// NewServer returns the API as an http.Handler.
func NewServer(log *slog.Logger, cfg httpapi.Config, deps Deps) http.Handler {
	cfg = cfg.WithDefaults()
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	addRoutes(r, log, cfg, deps)
	if deps.Framing == nil {
		return r
	}
	return withFraming(r, deps.Framing)
}

// withFraming refuses, with 400 INVALID_REQUEST, a request whose framing a
// proxy in front may have read otherwise (both Transfer-Encoding and
// Content-Length: what the server took for the next request, the proxy
// took for its body), and closes the connection after it; it closes the
// connection after a request whose framing is not known for sure. It runs
// before the router, so that no route is spared.
func withFraming(next http.Handler, verdict func(ctx context.Context) framing.Verdict) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch verdict(r.Context()) {
		case framing.Ambiguous:
			var b [8]byte
			_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
			id := hex.EncodeToString(b[:])
			h := w.Header()
			h.Set("Connection", "close")
			h.Set("X-Request-ID", id)
			h.Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_ = jsoncodec.Encode(w, httpapi.Problem{
				Type: "https://github.com/tetherhq/tether/blob/main/docs/errors.md#invalid_request", Title: http.StatusText(http.StatusBadRequest),
				Status: http.StatusBadRequest, Code: string(domain.CodeInvalidRequest), RequestID: id,
				Detail: "a request must not carry both Transfer-Encoding and Content-Length (RFC 9112, section 6.1); the connection is closed",
			})
			return
		case framing.Unsure:
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
