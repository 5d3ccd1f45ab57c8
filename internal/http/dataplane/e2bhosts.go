package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/credential"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// E2B's sandbox hosts, {port}-{sandbox id}.E2B_DOMAIN: the hosts E2B's
// SDK builds with getHost(port), served for the sandboxes made through
// E2B's API only, through the proxy of the ports and previews. Package
// e2b says whether a request may pass (public traffic, or the sandbox's
// traffic access token) and what E2B's proxy answers when it may not;
// here the sandbox is looked up by its id, under its own tenant, must be
// ready, and its port is reached as a preview's is, on this replica or
// forwarded to the sandbox's node. Every request that reaches the
// provider is recorded in the sandbox's activity (kind e2b_host), and
// Tether's credentials never reach the app.

// E2BRecords is what E2B's hosts read of the sandboxes made through E2B's
// API, and the installation's credentials, which traffic access tokens
// are derived from.
type E2BRecords interface {
	E2BSandbox(ctx context.Context, id string) (domain.E2BSandbox, error)
	Credentials(ctx context.Context) (*credential.Tagger, error)
}

// E2BHosts serves E2B's sandbox hosts.
type E2BHosts struct {
	Log   *slog.Logger
	Store interface {
		httpapi.SandboxGetter
		ActivityRecorder
	}
	Records   E2BRecords
	Providers map[string]domain.Provider
	Cluster   *cluster.Cluster
	Draining  context.Context
	Guard     *httpapi.AuthGuard
	Domain    string // cfg.E2BDomain; empty: no such hosts
	// Envd is E2B's face (package e2b's handler), whose daemon serves
	// port e2b.EnvdPort of every sandbox host, as E2B's does; nil: none.
	Envd http.Handler
}

// e2bHostCaller is the key id a replica forwards an E2B host's request
// with. It names no API key (their ids begin with "key_"), and the node
// honours it only on a signed forwarded call.
const e2bHostCaller = "e2b_host"

// serve answers a request of the E2B sandbox host whose first label is
// label.
func (eh E2BHosts) serve(c *gin.Context, label string) {
	id, port, err := e2b.ParseHostLabel(label)
	if err == nil {
		err = eh.reach(c, id, port)
	}
	if err != nil {
		writeE2BHostError(c, eh.Log, id, port, err)
	}
}

// reach passes the request on to port of the sandbox id, if the request
// may reach it.
func (eh E2BHosts) reach(c *gin.Context, id string, port int) error {
	if err := checkAppPath(c.Request.URL.EscapedPath()); err != nil {
		return err
	}
	if port == e2b.EnvdPort && eh.Envd != nil {
		eh.serveEnvd(c, id)
		return nil
	}
	rec, sb, err := eh.running(c, id)
	if err != nil {
		return err
	}
	var tagger *credential.Tagger
	if !rec.PublicTraffic {
		if tagger, err = eh.Records.Credentials(c.Request.Context()); err != nil {
			return err
		}
	}
	if err := e2b.HostAccess(tagger, rec, c.Request.Header); err != nil {
		if e2b.InvalidToken(err) {
			if over := eh.Guard.Refuse(c); over != nil {
				return over
			}
		}
		return err
	}
	for _, name := range e2b.HostCredentialHeaders {
		c.Request.Header.Del(name)
	}
	c.Writer = httpapi.UpgradeWriter{ResponseWriter: c.Writer}
	to := portTarget{ownOrigin: true}
	if onAnotherNode(eh.Cluster, sb) {
		return forwardPort(c, eh.Log, eh.Cluster, eh.Draining, sb, port, domain.Caller{KeyID: e2bHostCaller}, to)
	}
	dialer, err := portDialer(eh.Providers, sb)
	if err != nil {
		return err
	}
	return proxyPort(c, eh.Log, eh.Store, dialer, sb, port, to, domain.Activity{Kind: domain.ActivityE2BHost})
}

// serveEnvd serves a request of the daemon's port of the sandbox id as
// E2B's face serves the daemon under e2b.EnvdPrefix (E2B_SANDBOX_URL),
// for the sandbox the host names: the SDK reaches the daemon so when no
// E2B_SANDBOX_URL is set. The face checks the caller's key itself
// (X-Access-Token, through /v1), as E2B's daemon checks its access token
// and E2B's proxy skips the traffic access token for it; its /v1 calls
// are made without this host, so that they are the API's.
func (eh E2BHosts) serveEnvd(c *gin.Context, id string) {
	r := c.Request
	r.Header.Set(e2b.SandboxIDHeader, id)
	r.Header.Set(e2b.SandboxPortHeader, strconv.Itoa(e2b.EnvdPort))
	r.URL.Path = e2b.EnvdPrefix + r.URL.Path
	if r.URL.RawPath != "" {
		r.URL.RawPath = e2b.EnvdPrefix + r.URL.RawPath
	}
	r.Host = ""
	c.Abort()
	eh.Envd.ServeHTTP(c.Writer, r)
}

// running is what is recorded of the sandbox id made through E2B's API,
// and the sandbox, ready. The id is judged as a credential is (it is all
// a key-less request names): an id that is not one of those sandboxes
// counts against the client's address, past its budget without a lookup.
// Anything but a ready sandbox is E2B's "not found".
func (eh E2BHosts) running(c *gin.Context, id string) (domain.E2BSandbox, domain.Sandbox, error) {
	ctx := c.Request.Context()
	t, err := eh.Guard.Admit(c, eh.Guard.E2BHosts, id)
	if errors.Is(err, httpapi.ErrUnknownCredential) {
		return domain.E2BSandbox{}, domain.Sandbox{}, e2b.HostNotFound(id)
	}
	if err != nil {
		return domain.E2BSandbox{}, domain.Sandbox{}, err
	}
	rec, err := eh.Records.E2BSandbox(ctx, id)
	eh.Guard.Settle(t, err)
	if errors.Is(err, domain.ErrNotFound) {
		return rec, domain.Sandbox{}, e2b.HostNotFound(id)
	}
	if err != nil {
		return rec, domain.Sandbox{}, err
	}
	sb, err := eh.Store.GetSandbox(ctx, rec.Tenant, id)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && sb.State != domain.StateReady) {
		return rec, sb, e2b.HostNotFound(id)
	}
	return rec, sb, err
}

// writeE2BHostError answers err, the failure of a request of port of the
// sandbox id on its E2B host: in E2B's shapes what E2B's proxy would
// answer (e2b.HostError; a port nothing answers on), as Tether's problem
// documents what is Tether's own (429 past the address's budget of
// failures, 503 without Postgres, 501 without ports, 400 for a path that
// is not normal).
func writeE2BHostError(c *gin.Context, log *slog.Logger, id string, port int, err error) {
	var he *e2b.HostError
	var de *domain.Error
	switch {
	case errors.As(err, &he):
	case errors.As(err, &de) && de.Code == domain.CodePortUnreachable && c.Request.Context().Err() == nil:
		he = e2b.PortClosed(id, port)
	default:
		httpapi.WriteError(c, log, err)
		return
	}
	code := domain.CodeNotFound
	switch {
	case he.Status == http.StatusBadRequest:
		code = domain.CodeInvalidRequest
	case he.Status == http.StatusForbidden:
		code = domain.CodeForbidden
	case he.Port != 0:
		code = domain.CodePortUnreachable
	}
	httpapi.AnsweredAs(c, code)
	c.Abort()
	he.Write(c.Writer)
}
