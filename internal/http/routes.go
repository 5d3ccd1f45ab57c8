package http

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"path"
	"slices"

	"github.com/gin-gonic/gin"

	_ "github.com/tetherhq/tether/docs" // registers swag's copy of the Swagger 2.0 document (gin-swagger reads it)
	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b"
	"github.com/tetherhq/tether/internal/http/console"
	"github.com/tetherhq/tether/internal/http/controlplane"
	"github.com/tetherhq/tether/internal/http/dataplane"
	"github.com/tetherhq/tether/internal/http/events"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/http/processes"
	"github.com/tetherhq/tether/internal/webhook"
)

//	@title						Tether API
//	@version					1.0
//	@description				Tether creates, tracks and destroys sandboxes for AI agents. Requests return at once; sandboxes move through requested → creating → ready (or cancelled, terminated, failed) asynchronously. Errors are application/problem+json (RFC 9457) with a stable code.
//	@contact.name				Tether maintainers
//	@contact.url				https://github.com/tetherhq/tether
//	@BasePath					/
//	@tag.name					sandboxes
//	@tag.description			Request, list, watch, renew, pause, resume and end sandboxes.
//	@tag.name					snapshots
//	@tag.description			Copies of a sandbox's /workspace that outlive it, which new sandboxes start from.
//	@tag.name					events
//	@tag.description			The history of each sandbox, and the tenant's feed of every transition.
//	@tag.name					owners
//	@tag.description			Owners are clients that hold a lease; when it lapses, their sandboxes end.
//	@tag.name					data plane
//	@tag.description			Run commands in ready sandboxes and move files and folders in and out.
//	@tag.name					processes
//	@tag.description			Background processes, terminals and file watches in ready sandboxes: started at once, kept by the sandbox, attached to by any number of clients.
//	@tag.name					pools
//	@tag.description			Warm pools: sandboxes created ahead of demand, claimed ready by a create that names the pool.
//	@tag.name					keys
//	@tag.description			The tenant's API keys: create, list, revoke.
//	@tag.name					secrets
//	@tag.description			The tenant's secrets, sealed at rest and never shown: the egress proxy adds them to allow-list sandboxes' requests, so that they never enter a sandbox.
//	@tag.name					webhooks
//	@tag.description			Endpoints the tenant's events are pushed to, signed, with their delivery history and replay.
//	@tag.name					providers
//	@tag.description			The providers enabled on this server and what they can do.
//	@tag.name					health
//	@tag.description			Liveness, readiness and metrics, for load balancers and monitoring; no authentication.
//	@tag.name					docs
//	@tag.description			This API's OpenAPI document; no authentication.
//
//	@securityDefinitions.apikey	BearerAuth
//	@in							header
//	@name						Authorization
//	@description				An API key (tether keys create --tenant NAME), sent as "Authorization: Bearer KEY".

// addRoutes is the whole API surface.
func addRoutes(r *gin.Engine, log *slog.Logger, cfg httpapi.Config, deps Deps) {
	h := httpapi.ErrorHandler(log)
	draining := cmp.Or[context.Context](deps.Draining, context.Background())
	providers := make(map[string]domain.Provider, len(deps.Providers))
	for _, p := range deps.Providers {
		providers[p.Name()] = p
	}

	q := httpapi.NewQuotas(deps.Store, cfg)
	ag := httpapi.NewAuthGuard(deps.Store, cfg)
	dp := dataplane.NewAuditedStore(deps.Store, deps.Metrics)
	cl := cluster.New(deps.Nodes)
	previews := dataplane.PreviewServer{Log: log, Store: dp, Providers: providers, Cluster: cl, Draining: draining, Guard: ag, Host: cfg.PreviewHost}
	e2bFace, e2bHosts := newE2B(r, cfg, deps, dp, previews)
	r.Use(httpapi.WithRecovery(log), httpapi.WithRequestID(), httpapi.WithBodyPacing(cfg.MinBodyRate, cfg.BodyGrace, cfg.MaxBodyTime),
		httpapi.WithLogging(log), httpapi.WithMetrics(deps.Metrics), dataplane.WithSandboxHosts(h, previews, e2bHosts))
	r.NoRoute(h(func(c *gin.Context) error {
		return domain.Errorf(domain.CodeNotFound, "no route %s %s", c.Request.Method, c.Request.URL.Path)
	}))
	r.NoMethod(func(c *gin.Context) {
		httpapi.WriteProblem(c, httpapi.NewProblem(c, http.StatusMethodNotAllowed, domain.CodeInvalidRequest,
			"method "+c.Request.Method+" is not allowed here", ""))
	})

	r.GET("/healthz", h(handleHealthz()))
	r.GET("/readyz", h(handleReadyz(deps.Ready)))
	if deps.Gatherer != nil { // nil: served elsewhere (METRICS_ADDR)
		r.GET("/metrics", handleMetrics(deps.Gatherer))
	}
	r.GET("/openapi.json", handleOpenAPIJSON())
	r.GET("/openapi.yaml", handleOpenAPIYAML())
	// Swagger UI shows the OpenAPI 3 document.
	r.GET("/swagger/*any", withNoFraming(), swaggerUI())
	// The web console's static files, at /ui/; it signs in with an API key
	// and calls /v1 like any client.
	console.Register(r)

	v1 := r.Group("/v1", httpapi.WithAuth(log, ag, httpapi.NewKeyCache(cfg.AuthCacheTTL), q, cl, deps.Authenticated))
	data := dataRoutes{group: v1, cluster: cl, routed: dataplane.WithNodeRouting(log, deps.Store, cl, draining)}
	body := httpapi.WithBodyLimit(cfg.MaxBodyBytes)
	pm := controlplane.NewPoolMetrics(deps.Metrics)
	v1.POST("/sandboxes", body, h(controlplane.HandleSandboxCreate(cfg, deps.Store, providers, q, pm)))
	v1.GET("/sandboxes", h(controlplane.HandleSandboxList(deps.Store)))
	v1.GET("/sandboxes/:id", h(controlplane.HandleSandboxGet(cfg, deps.Store, deps.Changes, draining)))
	v1.DELETE("/sandboxes/:id", h(controlplane.HandleSandboxDelete(deps.Store)))
	v1.POST("/sandboxes/:id/renew", body, h(controlplane.HandleSandboxRenew(cfg, deps.Store)))
	v1.POST("/sandboxes/:id/pause", h(controlplane.HandleSandboxPause(cfg, deps.Store, deps.Changes, draining, providers)))
	v1.POST("/sandboxes/:id/resume", h(controlplane.HandleSandboxResume(cfg, deps.Store, deps.Changes, draining, providers)))
	v1.POST("/sandboxes/:id/snapshots", h(controlplane.HandleSnapshotCreate(cfg, deps.Store, deps.Changes, providers, draining)))
	v1.GET("/snapshots", h(controlplane.HandleSnapshotList(deps.Store)))
	v1.GET("/snapshots/:id", h(controlplane.HandleSnapshotGet(cfg, deps.Store, deps.Changes, draining)))
	v1.DELETE("/snapshots/:id", h(controlplane.HandleSnapshotDelete(deps.Store)))
	v1.PUT("/sandboxes/:id/owner", body, h(controlplane.HandleSandboxOwner(cfg, deps.Store)))
	v1.GET("/sandboxes/:id/activity", h(dataplane.HandleSandboxActivity(dp)))
	addNetworkRoutes(v1, h, log, cfg, deps)
	// The data plane: the only routes that take calls other nodes forward.
	data.handle(http.MethodPost, "/sandboxes/:id/exec", h(dataplane.HandleSandboxExec(log, cfg, dp, providers, draining)), body, h(dataplane.CheckExecBody(cfg)))
	data.handle(http.MethodPut, "/sandboxes/:id/files", h(dataplane.HandleFilePut(log, cfg, dp, providers)), httpapi.WithBodyLimit(cfg.MaxFileBytes))
	data.handle(http.MethodGet, "/sandboxes/:id/files", h(dataplane.HandleFileGet(log, cfg, dp, providers)))
	data.handle(http.MethodPut, "/sandboxes/:id/archive", h(dataplane.HandleArchivePut(log, cfg, dp, providers)), httpapi.WithBodyLimit(cfg.MaxFileBytes))
	data.handle(http.MethodGet, "/sandboxes/:id/archive", h(dataplane.HandleArchiveGet(log, cfg, dp, providers)))
	addPortRoutes(r, data, h, log, cfg, deps, dp, providers, previews)
	addProcessRoutes(data, h, log, cfg, dp, providers, draining)
	addEventRoutes(v1, h, cfg, deps, draining)
	v1.PUT("/owners/:owner/lease", body, h(controlplane.HandleOwnerLease(cfg, deps.Store)))
	v1.GET("/owners", h(controlplane.HandleOwnerList(deps.Store)))
	v1.DELETE("/owners/:owner", h(controlplane.HandleOwnerRelease(deps.Store)))
	v1.GET("/providers", h(controlplane.HandleProviders(deps.Providers)))
	v1.GET("/nodes", h(controlplane.HandleNodeList(deps.Store)))
	v1.POST("/keys", body, h(controlplane.HandleKeyCreate(cfg, deps.Store)))
	v1.GET("/keys", h(controlplane.HandleKeyList(deps.Store)))
	v1.DELETE("/keys/:id", h(controlplane.HandleKeyRevoke(deps.Store)))
	guard := webhook.Guard{AllowPrivate: cfg.WebhookAllowPrivate}
	v1.POST("/webhooks", body, h(controlplane.HandleWebhookCreate(cfg, deps.Store, guard)))
	v1.GET("/webhooks", h(controlplane.HandleWebhookList(deps.Store)))
	v1.GET("/webhooks/:id", h(controlplane.HandleWebhookGet(deps.Store)))
	v1.DELETE("/webhooks/:id", h(controlplane.HandleWebhookDelete(deps.Store)))
	v1.GET("/webhooks/:id/deliveries", h(controlplane.HandleWebhookDeliveries(deps.Store)))
	v1.POST("/webhooks/:id/replay", body, h(controlplane.HandleWebhookReplay(deps.Store)))
	addPoolRoutes(v1, h, cfg, deps, providers)
	if e2bFace != nil {
		r.Any(e2b.Prefix+"/*path", gin.WrapH(e2bFace))
	}
}

// newE2B is E2B's protocol, a second face over /v1 served under /e2b
// (docs/e2b.md), and its sandbox hosts (E2B_DOMAIN), served through the
// same proxy as previews (previews' collaborators), whose port 49983 is
// the face's daemon; nil and no hosts with E2B_DISABLED.
func newE2B(r *gin.Engine, cfg httpapi.Config, deps Deps, dp dataplane.AuditedStore, previews dataplane.PreviewServer) (http.Handler, dataplane.E2BHosts) {
	hosts := dataplane.E2BHosts{Log: previews.Log, Store: dp, Records: deps.Store, Providers: previews.Providers,
		Cluster: previews.Cluster, Draining: previews.Draining, Guard: previews.Guard}
	if cfg.E2BDisabled {
		return nil, hosts
	}
	face := e2b.New(e2b.Options{API: r, Providers: previews.Providers, Node: selfNode(previews.Cluster),
		Domain: cfg.E2BDomain, Hosts: deps.Store})
	hosts.Domain, hosts.Envd = cfg.E2BDomain, face
	return face, hosts
}

// selfNode is this replica's node id in a cluster; empty for a single
// replica (no cluster).
func selfNode(cl *cluster.Cluster) string {
	if cl == nil {
		return ""
	}
	return cl.Self
}

// addPoolRoutes adds the warm pools' routes.
func addPoolRoutes(v1 *gin.RouterGroup, h func(httpapi.HandlerFunc) gin.HandlerFunc, cfg httpapi.Config, deps Deps, providers map[string]domain.Provider) {
	body := httpapi.WithBodyLimit(cfg.MaxBodyBytes)
	v1.POST("/pools", body, h(controlplane.HandlePoolCreate(cfg, deps.Store, providers)))
	v1.GET("/pools", h(controlplane.HandlePoolList(deps.Store)))
	v1.GET("/pools/:name", h(controlplane.HandlePoolGet(deps.Store)))
	v1.PATCH("/pools/:name", body, h(controlplane.HandlePoolUpdate(deps.Store)))
	v1.DELETE("/pools/:name", h(controlplane.HandlePoolDelete(deps.Store)))
}

// addNetworkRoutes adds the routes of allow-list sandboxes' rules and of
// the secrets their credentials name.
func addNetworkRoutes(v1 *gin.RouterGroup, h func(httpapi.HandlerFunc) gin.HandlerFunc, log *slog.Logger, cfg httpapi.Config, deps Deps) {
	body := httpapi.WithBodyLimit(cfg.MaxBodyBytes)
	v1.GET("/sandboxes/:id/network", h(controlplane.HandleSandboxNetworkGet(deps.Store)))
	v1.PATCH("/sandboxes/:id/network", body, h(controlplane.HandleSandboxNetworkUpdate(deps.Store, deps.Egress)))
	v1.PUT("/network-policies/:name", body, h(controlplane.HandleNetworkPolicyPut(deps.Store, deps.Egress)))
	v1.GET("/network-policies", h(controlplane.HandleNetworkPolicyList(deps.Store)))
	v1.GET("/network-policies/:name", h(controlplane.HandleNetworkPolicyGet(deps.Store)))
	v1.DELETE("/network-policies/:name", h(controlplane.HandleNetworkPolicyDelete(deps.Store)))
	v1.POST("/secrets", body, h(controlplane.HandleSecretPut(log, deps.Store, deps.Secrets)))
	v1.GET("/secrets", h(controlplane.HandleSecretList(deps.Store, deps.Secrets)))
	v1.DELETE("/secrets/:name", h(controlplane.HandleSecretDelete(log, deps.Store, deps.Secrets)))
}

// addEventRoutes adds the events feed's routes: a sandbox's history, the
// tenant's feed as pages and as a stream, and reconciliation's findings.
func addEventRoutes(v1 *gin.RouterGroup, h func(httpapi.HandlerFunc) gin.HandlerFunc, cfg httpapi.Config, deps Deps, draining context.Context) {
	v1.GET("/sandboxes/:id/events", h(events.HandleSandboxEvents(deps.Store)))
	v1.GET("/events", h(events.HandleEvents(deps.Store)))
	v1.GET("/reconcile-events", h(events.HandleReconcileEvents(deps.Store)))
	v1.GET("/events/stream", h(events.HandleEventStream(deps.Store, deps.Changes, events.NewStreamSlots(cfg.MaxStreamsPerTenant), draining)))
}

// addPortRoutes adds the ports' routes (a sandbox's ports through the
// API, and preview URLs) and the previews' management.
func addPortRoutes(r *gin.Engine, data dataRoutes, h func(httpapi.HandlerFunc) gin.HandlerFunc, log *slog.Logger, cfg httpapi.Config, deps Deps,
	dp dataplane.AuditedStore, providers map[string]domain.Provider, previews dataplane.PreviewServer,
) {
	for _, m := range dataplane.PortMethods {
		data.handle(m, "/sandboxes/:id/ports/:port/*path", dataplane.PortOps[m](h(dataplane.HandleSandboxPort(log, dp, providers))), h(dataplane.CheckPort()))
		// Preview URLs: no API key; the token is checked instead.
		r.Handle(m, "/p/:token/*path", dataplane.PreviewOps[m](h(previews.HandlePreview())))
	}
	body := httpapi.WithBodyLimit(cfg.MaxBodyBytes)
	data.group.POST("/sandboxes/:id/previews", body, h(dataplane.HandlePreviewCreate(cfg, deps.Store, providers)))
	data.group.GET("/sandboxes/:id/previews", h(dataplane.HandlePreviewList(deps.Store)))
	data.group.GET("/sandboxes/:id/previews/:preview_id", h(dataplane.HandlePreviewGet(deps.Store)))
	data.group.DELETE("/sandboxes/:id/previews/:preview_id", h(dataplane.HandlePreviewRevoke(deps.Store)))
}

// addProcessRoutes adds the processes', terminals' and watches' routes:
// data-plane routes, which a host-bound sandbox's calls are forwarded on
// to its node, WebSockets included.
func addProcessRoutes(data dataRoutes, h func(httpapi.HandlerFunc) gin.HandlerFunc, log *slog.Logger, cfg httpapi.Config,
	dp dataplane.AuditedStore, providers map[string]domain.Provider, draining context.Context,
) {
	body := httpapi.WithBodyLimit(cfg.MaxBodyBytes)
	const one = "/sandboxes/:id/processes/:pid"
	data.handle(http.MethodPost, "/sandboxes/:id/processes", h(processes.HandleProcessStart(log, dp, providers)), body, h(processes.CheckProcessStart()))
	data.handle(http.MethodGet, "/sandboxes/:id/processes", h(processes.HandleProcessList(dp, providers)))
	data.handle(http.MethodGet, one, h(processes.HandleProcessGet(cfg, dp, providers)))
	data.handle(http.MethodGet, one+"/output", h(processes.HandleProcessOutput(log, dp, providers, draining)))
	data.handle(http.MethodPost, one+"/stdin", h(processes.HandleProcessStdin(log, dp, providers)), body)
	data.handle(http.MethodPost, one+"/signal", h(processes.HandleProcessSignal(log, dp, providers)), body)
	data.handle(http.MethodPost, one+"/resize", h(processes.HandleProcessResize(dp, providers)), body)
	data.handle(http.MethodGet, one+"/terminal", h(processes.HandleProcessTerminal(log, dp, providers, draining)), h(processes.CheckTerminal()))
	data.handle(http.MethodGet, "/sandboxes/:id/watch", h(processes.HandleSandboxWatch(log, dp, providers, draining)))
}

// dataRoutes registers the data plane's routes on group. They are the only
// routes that accept calls other nodes forward: each is accepted by the
// cluster as it is registered, so that the allow-list is built from the
// route table and cannot drift from it.
type dataRoutes struct {
	group   *gin.RouterGroup
	cluster *cluster.Cluster
	routed  gin.HandlerFunc // withNodeRouting
}

// handle registers the route method path: the checks (body limits, the
// body's validation) run first, then the call goes to its sandbox's node
// or, for a sandbox here, to handler.
func (d dataRoutes) handle(method, relPath string, handler gin.HandlerFunc, checks ...gin.HandlerFunc) {
	d.group.Handle(method, relPath, append(slices.Clone(checks), d.routed, handler)...)
	d.cluster.Accept(method, path.Join(d.group.BasePath(), relPath))
}

// withNoFraming keeps a page out of other sites' frames (clickjacking): the
// Swagger UI, whose inline scripts rule out the console's full policy.
func withNoFraming() gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		c.Next()
	}
}
