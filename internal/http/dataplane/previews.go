package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Preview URLs: a token, made with an API key, that reaches one port of
// one sandbox without one, until it expires, is revoked or the sandbox
// ends. Two ways in: /p/{token}/{path} on Tether's own host (path mode),
// and, with PREVIEW_HOST set, {port}-{sandbox}.PREVIEW_HOST (an origin of
// its own, for apps that need the root path), where the token arrives
// once as ?tether_preview_token= and is then a cookie of that host.

// The token's names in wildcard host mode. Over HTTPS the cookie is
// previewHostCookie, which browsers let only the host itself set (no
// Domain, Path=/, Secure): a script of another preview host cannot plant
// one for this host with Domain=PREVIEW_HOST, as it can a plain cookie.
const (
	previewQuery      = "tether_preview_token"
	previewCookie     = "tether_preview"
	previewHostCookie = "__Host-" + previewCookie
)

// isPreviewCookie reports whether a cookie's name is Tether's own preview
// cookie, in any of the spellings a browser might store apart.
func isPreviewCookie(name string) bool {
	name = strings.ToLower(name)
	for _, prefix := range []string{"", "__host-", "__secure-"} {
		if name == prefix+previewCookie {
			return true
		}
	}
	return false
}

// previewCookieToken is the token a preview host's request carries in
// Tether's cookie: the host-only one first.
func previewCookieToken(c *gin.Context) string {
	for _, name := range []string{previewHostCookie, previewCookie} {
		if v, err := c.Cookie(name); err == nil && v != "" {
			return v
		}
	}
	return ""
}

// previewCallerPrefix starts the key id a replica forwards a preview's
// request with: the preview's id (prv_...), which never names an API key.
const previewCallerPrefix = domain.PreviewIDPrefix

// PreviewRequest is the body of POST /v1/sandboxes/{id}/previews.
type PreviewRequest struct {
	// Port is the port in the sandbox the preview reaches.
	Port int `json:"port" minimum:"1" maximum:"65535" example:"8000"`
	// TTLSeconds is how long the preview works: absent means the server's default (PREVIEW_TTL), at most PREVIEW_MAX_TTL.
	TTLSeconds *int64 `json:"ttl_seconds,omitempty" format:"int64" minimum:"1" example:"3600"`
} // @name PreviewRequest

// Preview is a URL that reaches a port of a sandbox without an API key.
type Preview struct {
	ID        string `json:"id" example:"prv_k5m2q7x3w9r4t8vz"`
	SandboxID string `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	Port      int    `json:"port" example:"8000"`
	// URL is the preview's address, its token included; only in the answer to its creation (null in lists).
	URL *string `json:"url" extensions:"x-nullable" example:"https://tether.example/p/tpv_Zm9vYmFy/"`
	// Token is the preview's secret, as in url; shown only once, at creation (null in lists).
	Token     *string   `json:"token" extensions:"x-nullable" example:"tpv_Zm9vYmFy"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	ExpiresAt time.Time `json:"expires_at" format:"date-time" example:"2026-01-02T16:04:05Z"`
	// RevokedAt is when the preview was revoked; null while it is not.
	RevokedAt *time.Time `json:"revoked_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:30:00Z"`
	// KeyID is the API key that made it.
	KeyID *string `json:"key_id" extensions:"x-nullable" example:"key_k5m2q7x3w9r4t8vz"`
} // @name Preview

// PreviewList is a sandbox's previews, oldest first, revoked and expired ones included.
type PreviewList struct {
	Items []Preview `json:"items"`
} // @name PreviewList

// PreviewStore keeps sandboxes' previews.
type PreviewStore interface {
	httpapi.SandboxGetter
	CreatePreview(ctx context.Context, np domain.NewPreview) (domain.Preview, string, error)
	SandboxPreviews(ctx context.Context, tenant, sandboxID string) ([]domain.Preview, error)
	SandboxPreview(ctx context.Context, tenant, sandboxID, id string) (domain.Preview, error)
	RevokePreview(ctx context.Context, tenant, sandboxID, id string) (domain.Preview, error)
	PreviewByToken(ctx context.Context, token string) (domain.Preview, error)
}

func toPreview(p domain.Preview) Preview {
	return Preview{ID: p.ID, SandboxID: p.SandboxID, Port: p.Port, CreatedAt: p.CreatedAt.UTC(), ExpiresAt: p.ExpiresAt.UTC(),
		RevokedAt: httpapi.UTC(p.RevokedAt), KeyID: httpapi.Optional(p.CreatedBy.KeyID)}
}

// HandlePreviewCreate makes a preview URL of a port of a sandbox.
//
//	@Summary		Make a preview URL
//	@Description	Returns a URL that reaches the port of the ready sandbox without an API key, as /v1/sandboxes/{id}/ports/{port}/ does with one, until it expires (ttl_seconds), is revoked (DELETE) or the sandbox ends; it never starts or resumes the sandbox. The token in it is shown only in this answer. Its traffic is recorded in the sandbox's activity (kind preview). A sandbox that is not ready is 409 SANDBOX_STATE_CONFLICT; a provider without ports, 501 NOT_SUPPORTED.
//	@ID				createPreview
//	@Tags			data plane
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string			true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		PreviewRequest	true	"the port and lifetime"
//	@Success		201		{object}	Preview				"the preview, with its URL and token; Location names it"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED"
//	@Failure		503		{object}	httpapi.Problem				"PROVIDER_UNAVAILABLE or UNAVAILABLE"
//	@Header			201		{string}	Location			"the preview's URL path, /v1/sandboxes/{id}/previews/{preview_id}"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/previews [post]
func HandlePreviewCreate(cfg httpapi.Config, st PreviewStore, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		var req PreviewRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.Port < 1 || req.Port > 65535 {
			return domain.Errorf(domain.CodeInvalidRequest, "port must be 1-65535 (got %d)", req.Port)
		}
		ttl := cfg.PreviewTTL
		if req.TTLSeconds != nil {
			if *req.TTLSeconds < 1 || *req.TTLSeconds > int64(cfg.PreviewMaxTTL/time.Second) {
				return domain.Errorf(domain.CodeInvalidRequest, "ttl_seconds must be 1-%d (PREVIEW_MAX_TTL)", int64(cfg.PreviewMaxTTL/time.Second))
			}
			ttl = time.Duration(*req.TTLSeconds) * time.Second
		}
		sb, _, err := ReadySandbox[domain.PortDialer](c, st, providers, "ports")
		if err != nil {
			return err
		}
		p, token, err := st.CreatePreview(c.Request.Context(), domain.NewPreview{
			SandboxID: sb.ID, Tenant: httpapi.TenantOf(c), Port: req.Port, TTL: ttl, CreatedBy: httpapi.CallerOf(c),
		})
		if err != nil {
			return httpapi.NotFoundAs(err, sb.ID)
		}
		out := toPreview(p)
		u := previewURL(c, cfg, p, token)
		out.URL, out.Token = &u, &token
		c.Header("Location", previewLocation(p))
		return httpapi.WriteJSON(c, http.StatusCreated, out)
	}
}

// previewLocation is the API's path of preview p, which GETs it.
func previewLocation(p domain.Preview) string {
	return "/v1/sandboxes/" + p.SandboxID + "/previews/" + p.ID
}

// previewURL is the address of preview p with its token.
func previewURL(c *gin.Context, cfg httpapi.Config, p domain.Preview, token string) string {
	base := cfg.PreviewBaseURL
	if base == "" {
		scheme := "http"
		if c.Request.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + c.Request.Host
	}
	if cfg.PreviewHost != "" {
		scheme := "https"
		if u, err := url.Parse(base); err == nil && u.Scheme != "" {
			scheme = u.Scheme
		}
		return scheme + "://" + previewHostLabel(p.Port, p.SandboxID) + "." + cfg.PreviewHost + "/?" + previewQuery + "=" + token
	}
	return strings.TrimSuffix(base, "/") + "/p/" + token + "/"
}

// previewHostLabel is the DNS label of a port of a sandbox in wildcard
// host mode: "8000-sbx-5q3k...".
func previewHostLabel(port int, id string) string {
	return strconv.Itoa(port) + "-" + strings.Replace(id, "_", "-", 1)
}

// HandlePreviewList lists a sandbox's previews.
//
//	@Summary		List a sandbox's preview URLs
//	@Description	Every preview of the sandbox, oldest first, revoked and expired ones included; tokens are never shown again.
//	@ID				listPreviews
//	@Tags			data plane
//	@Produce		json
//	@Param			id	path		string	true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Success		200	{object}	PreviewList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/previews [get]
func HandlePreviewList(st PreviewStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		sb, err := tenantSandbox(c, st)
		if err != nil {
			return err
		}
		items, err := st.SandboxPreviews(c.Request.Context(), httpapi.TenantOf(c), sb.ID)
		if err != nil {
			return err
		}
		out := PreviewList{Items: make([]Preview, len(items))}
		for i, p := range items {
			out.Items[i] = toPreview(p)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandlePreviewGet returns one preview of a sandbox.
//
//	@Summary		Get a preview URL
//	@Description	The preview, revoked or expired ones included (revoked_at, expires_at say whether it still works); its token is never shown again (url and token are null). Another sandbox's preview, or another tenant's, is 404 NOT_FOUND.
//	@ID				getPreview
//	@Tags			data plane
//	@Produce		json
//	@Param			id			path		string	true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			preview_id	path		string	true	"preview id"	example(prv_k5m2q7x3w9r4t8vz)
//	@Success		200			{object}	Preview
//	@Failure		400			{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404			{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/previews/{preview_id} [get]
func HandlePreviewGet(st PreviewStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		sb, id, err := requestPreview(c, st)
		if err != nil {
			return err
		}
		p, err := st.SandboxPreview(c.Request.Context(), httpapi.TenantOf(c), sb.ID, id)
		if err != nil {
			return previewNotFoundAs(err, sb.ID, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toPreview(p))
	}
}

// requestPreview is the request's sandbox, the tenant's, and the id of the
// preview it names, which looks like one.
func requestPreview(c *gin.Context, st httpapi.SandboxGetter) (domain.Sandbox, string, error) {
	if err := httpapi.OnlyQuery(c); err != nil {
		return domain.Sandbox{}, "", err
	}
	sb, err := tenantSandbox(c, st)
	if err != nil {
		return sb, "", err
	}
	id := c.Param("preview_id")
	if !strings.HasPrefix(id, previewCallerPrefix) || len(id) > 64 {
		return sb, "", domain.Errorf(domain.CodeNotFound, "preview %q not found", id)
	}
	return sb, id, nil
}

// previewNotFoundAs is err, or the NOT_FOUND of preview id of sandbox
// sandboxID when err says it is not found.
func previewNotFoundAs(err error, sandboxID, id string) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.CodeNotFound, "preview %s of sandbox %s not found", id, sandboxID)
	}
	return err
}

// HandlePreviewRevoke revokes a preview.
//
//	@Summary		Revoke a preview URL
//	@Description	The preview's URL stops working at once (410 PREVIEW_GONE); revoking a revoked preview changes nothing.
//	@ID				revokePreview
//	@Tags			data plane
//	@Produce		json
//	@Param			id			path		string	true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			preview_id	path		string	true	"preview id"	example(prv_k5m2q7x3w9r4t8vz)
//	@Success		200			{object}	Preview
//	@Failure		400			{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		404			{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/previews/{preview_id} [delete]
func HandlePreviewRevoke(st PreviewStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		sb, id, err := requestPreview(c, st)
		if err != nil {
			return err
		}
		p, err := st.RevokePreview(c.Request.Context(), httpapi.TenantOf(c), sb.ID, id)
		if err != nil {
			return previewNotFoundAs(err, sb.ID, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toPreview(p))
	}
}

// tenantSandbox is the request's sandbox, the tenant's.
func tenantSandbox(c *gin.Context, st httpapi.SandboxGetter) (domain.Sandbox, error) {
	id, err := httpapi.SandboxID(c)
	if err != nil {
		return domain.Sandbox{}, err
	}
	sb, err := st.GetSandbox(c.Request.Context(), httpapi.TenantOf(c), id)
	if err != nil {
		return sb, httpapi.NotFoundAs(err, id)
	}
	return sb, nil
}

// PreviewServer serves preview URLs' traffic.
type PreviewServer struct {
	Log   *slog.Logger
	Store interface {
		PreviewStore
		ActivityRecorder
	}
	Providers map[string]domain.Provider
	Cluster   *cluster.Cluster
	Draining  context.Context
	Guard     *httpapi.AuthGuard
	Host      string // cfg.PreviewHost
}

// livePreview is the preview whose token is token, and its sandbox, if
// both still let a request through: an unknown token is NOT_FOUND;
// expired, revoked, or of a sandbox that ended, PREVIEW_GONE; of a sandbox
// that is not ready (paused), SANDBOX_STATE_CONFLICT. Nothing is started.
// The guard judges the token first, as it judges API keys: a token of
// Tether's is looked up whatever else its address sent.
func (ps PreviewServer) livePreview(c *gin.Context, token string) (domain.Preview, domain.Sandbox, error) {
	t, err := ps.Guard.Admit(c, ps.Guard.Previews, token)
	if errors.Is(err, httpapi.ErrUnknownCredential) {
		return domain.Preview{}, domain.Sandbox{}, domain.Errorf(domain.CodeNotFound, "no such preview")
	}
	if err != nil {
		return domain.Preview{}, domain.Sandbox{}, err
	}
	p, err := ps.Store.PreviewByToken(c.Request.Context(), token)
	ps.Guard.Settle(t, err)
	if errors.Is(err, domain.ErrNotFound) {
		return p, domain.Sandbox{}, domain.Errorf(domain.CodeNotFound, "no such preview")
	}
	if err != nil {
		return p, domain.Sandbox{}, err
	}
	switch {
	case p.RevokedAt != nil:
		return p, domain.Sandbox{}, domain.Errorf(domain.CodePreviewGone, "the preview was revoked")
	case !p.Live(time.Now()):
		return p, domain.Sandbox{}, domain.Errorf(domain.CodePreviewGone, "the preview expired at %s", p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	sb, err := ps.Store.GetSandbox(c.Request.Context(), p.Tenant, p.SandboxID)
	if errors.Is(err, domain.ErrNotFound) {
		return p, sb, domain.Errorf(domain.CodePreviewGone, "the preview's sandbox is gone")
	}
	if err != nil {
		return p, sb, err
	}
	if sb.State.Terminal() {
		return p, sb, domain.Errorf(domain.CodePreviewGone, "the preview's sandbox has ended (%s)", sb.State)
	}
	if sb.State != domain.StateReady {
		return p, sb, domain.StateConflict(sb.ID, sb.State, "preview (the sandbox must be ready; a preview never resumes it)")
	}
	return p, sb, nil
}

// serve passes a live preview's request on: to the sandbox's node if it
// lives on another (as the node's port route, acting for the preview), or
// to the port here.
func (ps PreviewServer) serve(c *gin.Context, p domain.Preview, sb domain.Sandbox, to portTarget) error {
	if onAnotherNode(ps.Cluster, sb) {
		return forwardPort(c, ps.Log, ps.Cluster, ps.Draining, sb, p.Port, domain.Caller{KeyID: p.ID}, to)
	}
	dialer, err := portDialer(ps.Providers, sb)
	if err != nil {
		return err
	}
	return proxyPort(c, ps.Log, ps.Store, dialer, sb, p.Port, to, domain.Activity{Kind: domain.ActivityPreview, PreviewID: p.ID})
}

// onAnotherNode reports whether the sandbox sb lives on another node of
// the cluster cl than this one.
func onAnotherNode(cl *cluster.Cluster, sb domain.Sandbox) bool {
	return cl != nil && sb.Node != "" && sb.Node != cl.Self
}

// forwardPort passes a key-less request of port of sb (a preview's, an
// E2B host's) on to the sandbox's node, as the node's port route acting
// for caller, which names what let it through; to says how the app is
// served there (hdrPreviewPrefix, hdrPreviewOrigin).
func forwardPort(c *gin.Context, log *slog.Logger, cl *cluster.Cluster, draining context.Context, sb domain.Sandbox,
	port int, caller domain.Caller, to portTarget,
) error {
	s := httpapi.State(c)
	s.Tenant, s.Caller = sb.Tenant, caller
	rest := pathAfter(c.Request.URL.EscapedPath(), to.skip)
	u, err := url.Parse("/v1/sandboxes/" + sb.ID + "/ports/" + strconv.Itoa(port) + rest)
	if err != nil {
		return domain.Errorf(domain.CodeInvalidRequest, "the path is not valid")
	}
	c.Request.URL.Path, c.Request.URL.RawPath = u.Path, u.RawPath
	stripCredentials(c.Request)
	c.Request.Header.Set(hdrPreviewPrefix, to.prefix)
	if to.ownOrigin {
		c.Request.Header.Set(hdrPreviewOrigin, "own")
	}
	forward(c, log, cl, draining, sb)
	return nil
}

// portDialer is the capability of sb's provider that dials its ports.
func portDialer(providers map[string]domain.Provider, sb domain.Sandbox) (domain.PortDialer, error) {
	prov, ok := providers[sb.Provider]
	if !ok {
		return nil, domain.Errorf(domain.CodeProviderUnavailable, "provider %q is not enabled on this server", sb.Provider)
	}
	dialer, ok := prov.(domain.PortDialer)
	if !ok {
		return nil, domain.Errorf(domain.CodeNotSupported, "provider %q does not support ports", sb.Provider)
	}
	return dialer, nil
}

// HandlePreview serves a preview URL in path mode, /p/{token}/{path}
// (the annotated operations are in ports_ops.go).
func (ps PreviewServer) HandlePreview() httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		token := c.Param("token")
		if err := checkAppPath(pathAfter(c.Request.URL.EscapedPath(), 2)); err != nil {
			return err
		}
		p, sb, err := ps.livePreview(c, token)
		if err != nil {
			return err
		}
		c.Writer = httpapi.UpgradeWriter{ResponseWriter: c.Writer}
		return ps.serve(c, p, sb, portTarget{prefix: "/p/" + token, skip: 2})
	}
}

// WithSandboxHosts serves the requests whose Host is a sandbox's own and
// lets every other request through: a preview's in wildcard host mode
// ({port}-{sandbox}.PREVIEW_HOST), whose token comes once as
// ?tether_preview_token=, answered with a cookie of that host and a
// redirect to the same URL without it, and is then carried by the
// cookie; and an E2B sandbox host ({port}-{sandbox}.E2B_DOMAIN, see
// E2BHosts). A host under both domains is the more specific one's; when
// the two are the same domain, a request carrying a preview token (query
// or cookie) is a preview's, and any other an E2B host's.
func WithSandboxHosts(h func(httpapi.HandlerFunc) gin.HandlerFunc, ps PreviewServer, eh E2BHosts) gin.HandlerFunc {
	previews := h(ps.servePreviewHost)
	return func(c *gin.Context) {
		if ps.Host == "" && eh.Domain == "" {
			c.Next()
			return
		}
		pl, preview := hostLabel(c.Request.Host, ps.Host)
		el, e2bHost := hostLabel(c.Request.Host, eh.Domain)
		if preview && e2bHost {
			switch {
			case len(ps.Host) != len(eh.Domain):
				preview = len(ps.Host) > len(eh.Domain)
			default:
				preview = c.Query(previewQuery) != "" || previewCookieToken(c) != ""
			}
			e2bHost = !preview
		}
		switch {
		case preview:
			c.Set(previewLabelKey{}, pl)
			previews(c)
		case e2bHost:
			eh.serve(c, el)
		default:
			c.Next()
			return
		}
		c.Abort()
	}
}

// hostLabel is what comes before ".dom" in host, lower-cased, the port
// left out: "8000-sbx_..." of "8000-sbx_....dom:443". false when host is
// not under dom, or dom is empty.
func hostLabel(host, dom string) (string, bool) {
	if dom == "" {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.CutSuffix(strings.ToLower(host), "."+dom)
}

type previewLabelKey struct{}

func (ps PreviewServer) servePreviewHost(c *gin.Context) error {
	label := c.GetString(previewLabelKey{})
	portStr, rest, _ := strings.Cut(label, "-")
	port, err := strconv.Atoi(portStr)
	id := strings.Replace(rest, "-", "_", 1)
	if err != nil || !domain.ValidID(id) || strconv.Itoa(port) != portStr {
		return domain.Errorf(domain.CodeNotFound, "no such preview host")
	}
	if err := checkAppPath(c.Request.URL.EscapedPath()); err != nil {
		return err
	}
	token := c.Query(previewQuery)
	fromQuery := token != ""
	if !fromQuery {
		token = previewCookieToken(c)
	}
	if token == "" {
		return domain.Errorf(domain.CodeNotFound, "open the preview's URL, with its token, first")
	}
	p, sb, err := ps.livePreview(c, token)
	if err != nil {
		return err
	}
	if p.SandboxID != id || p.Port != port {
		return domain.Errorf(domain.CodeNotFound, "the preview token is for another sandbox or port")
	}
	if fromQuery {
		setPreviewCookie(c, token, p.ExpiresAt)
		c.Redirect(http.StatusSeeOther, sameHostLocation(c.Request.URL))
		return nil
	}
	c.Writer = httpapi.UpgradeWriter{ResponseWriter: c.Writer}
	return ps.serve(c, p, sb, portTarget{prefix: "", skip: 0, ownOrigin: true})
}

// setPreviewCookie gives the browser the token as a cookie of the preview
// host: host-only (no Domain), HttpOnly, SameSite=Lax, and over HTTPS
// named with the __Host- prefix, which no other host can set.
func setPreviewCookie(c *gin.Context, token string, expires time.Time) {
	secure := c.Request.TLS != nil || c.GetHeader("X-Forwarded-Proto") == "https"
	name := previewCookie
	if secure {
		name = previewHostCookie
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: name, Value: token, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteLaxMode, Expires: expires})
}

// sameHostLocation is where a preview host sends the browser once the
// token is a cookie: the same path and query without the token, as a path
// of this host. However the path begins ("//evil.example/x" would read as
// another host), the location begins with one "/" and then no "/" or "\".
func sameHostLocation(u *url.URL) string {
	q := u.Query()
	q.Del(previewQuery)
	loc := "/" + strings.TrimLeft(u.EscapedPath(), "/\\")
	if len(q) > 0 {
		loc += "?" + q.Encode()
	}
	return loc
}
