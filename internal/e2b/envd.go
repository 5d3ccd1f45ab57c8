package e2b

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/tetherhq/tether/internal/e2b/envdpb/process/processconnect"
	"github.com/tetherhq/tether/provider"
)

// The headers the SDK sends every daemon call with: the sandbox and the
// daemon's port (E2B_SANDBOX_URL is one URL for every sandbox), and the
// access token a create or connect answered (the caller's API key).
const (
	SandboxIDHeader   = "E2b-Sandbox-Id"
	SandboxPortHeader = "E2b-Sandbox-Port"
	AccessTokenHeader = "X-Access-Token"
)

// EnvdPort is the daemon's port in E2B's sandboxes: the only port this
// face serves through E2b-Sandbox-Port, and the port of a sandbox host
// that is the daemon's rather than the app's (hosts.go).
const (
	EnvdPort = 49983
	envdPort = "49983"
)

// envd serves the sandbox daemon's calls.
type envd struct {
	core      core
	providers map[string]domain.Provider
	node      string // this replica's node id; empty for a single replica
	watchers  *watchers
}

// envdRoutes is the daemon's route table, under EnvdPrefix: /health,
// /files and the Connect services.
func envdRoutes(c core, providers map[string]domain.Provider, node string) http.Handler {
	e := envd{core: c, providers: providers, node: node, watchers: newWatchers()}
	m := http.NewServeMux()
	m.HandleFunc("GET /health", e.health)
	m.HandleFunc("GET /files", e.download)
	m.HandleFunc("POST /files", e.upload)
	m.Handle(processconnect.NewProcessHandler(processService{e}))
	m.Handle(filesystemconnect.NewFilesystemHandler(filesystemService{e}))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return m
}

// target is the sandbox a daemon call is for, as /v1 shows it to the
// caller, the caller's key, and the call (whose headers and address the
// /v1 calls made for it carry).
type target struct {
	sb   v1Sandbox
	key  string
	from *http.Request
}

// callerKey is the key of a daemon call: its access token, else an API
// key sent as on the control plane.
func callerKey(h http.Header) string {
	if k := strings.TrimSpace(h.Get(AccessTokenHeader)); k != "" {
		return k
	}
	if k := strings.TrimSpace(h.Get("X-API-Key")); k != "" {
		return k
	}
	k, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(k)
}

// errNoSandbox is a daemon call's sandbox that is unknown to the caller
// or has ended.
var errNoSandbox = errors.New("e2b: the sandbox is not running")

// resolve finds the sandbox of a daemon call from its headers, through
// /v1 with the caller's key: an unknown key is an apiError 401, a sandbox
// not found or ended errNoSandbox.
func (e envd) resolve(ctx context.Context, from *http.Request) (target, error) {
	key := callerKey(from.Header)
	if key == "" {
		return target{}, errorf(http.StatusUnauthorized, "send the sandbox's access token as %s", AccessTokenHeader)
	}
	id := strings.TrimSpace(from.Header.Get(SandboxIDHeader))
	if id == "" {
		return target{}, errorf(http.StatusBadRequest, "send the sandbox's id as %s", SandboxIDHeader)
	}
	if p := from.Header.Get(SandboxPortHeader); p != "" && p != envdPort {
		return target{}, errorf(http.StatusBadRequest, "%s %q: only the daemon's port, %s, is served here", SandboxPortHeader, p, envdPort)
	}
	s, err := e.core.get(ctx, from, key, id, 0)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return target{}, errNoSandbox
	}
	if err != nil {
		return target{}, err
	}
	if !s.live() {
		return target{}, errNoSandbox
	}
	return target{sb: s, key: key, from: from}, nil
}

// health is the daemon's health: 204 while the sandbox runs, 502 once it
// has ended or for one unknown (what E2B's proxy answers then, and what
// the SDK reads as "the sandbox was killed").
func (e envd) health(w http.ResponseWriter, r *http.Request) {
	t, err := e.resolve(r.Context(), r)
	switch {
	case errors.Is(err, errNoSandbox):
		writeError(w, errorf(http.StatusBadGateway, "the sandbox is not running"))
	case err != nil:
		writeError(w, err)
	case t.sb.State != "ready":
		writeError(w, errorf(http.StatusBadGateway, "the sandbox is %s", t.sb.State))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// capability is the provider capability C of the target's sandbox, which
// must be held by this replica's node: /v1 would forward a call for one
// on another node, but a provider here does not hold it.
func capability[C any](e envd, t target, what string) (C, error) {
	var zero C
	if t.sb.State != "ready" {
		return zero, connect.NewError(connect.CodeUnavailable, errors.New("the sandbox is "+t.sb.State+", not running"))
	}
	if n := t.sb.Node; n != nil && *n != "" && e.node != "" && *n != e.node {
		return zero, connect.NewError(connect.CodeUnavailable, errors.New("the sandbox lives on node "+*n+"; E2B's daemon serves "+what+" of this node's sandboxes only"))
	}
	p, ok := e.providers[t.sb.Provider]
	if !ok {
		return zero, connect.NewError(connect.CodeUnavailable, errors.New("the sandbox's provider is not on this server: "+t.sb.Provider))
	}
	c, ok := p.(C)
	if !ok {
		return zero, connect.NewError(connect.CodeUnimplemented, errors.New("provider "+t.sb.Provider+" does not support "+what))
	}
	return c, nil
}

// rpcTarget resolves a Connect call's sandbox, its errors as Connect's.
func (e envd) rpcTarget(ctx context.Context, h http.Header, peer connect.Peer) (target, error) {
	from := &http.Request{Header: h, RemoteAddr: peer.Addr}
	t, err := e.resolve(ctx, from)
	if err != nil {
		return t, rpcError(err)
	}
	return t, nil
}

// rpcError is err as a Connect error: E2B's statuses and the provider's
// codes as the codes the SDK maps to its errors.
func rpcError(err error) error {
	var ce *connect.Error
	if err == nil || errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, errNoSandbox) {
		return connect.NewError(connect.CodeUnavailable, errors.New("the sandbox is not running"))
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return connect.NewError(statusCode(ae.Status), errors.New(ae.Message))
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return connect.NewError(providerCode(pe.Code), errors.New(pe.Message))
	}
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// statusCode is the Connect code of an HTTP status.
func statusCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusRequestEntityTooLarge:
		return connect.CodeInvalidArgument
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

// providerCode is the Connect code of a provider error's code.
func providerCode(c provider.Code) connect.Code {
	switch c {
	case provider.CodeInvalidRequest, provider.CodeInvalidPath, provider.CodeIsDirectory:
		return connect.CodeInvalidArgument
	case provider.CodeProcessNotFound, provider.CodeFileNotFound:
		return connect.CodeNotFound
	case provider.CodeNotSupported:
		return connect.CodeUnimplemented
	case provider.CodeQuotaExceeded:
		return connect.CodeResourceExhausted
	case provider.CodeProviderUnavailable:
		return connect.CodeUnavailable
	case provider.CodePermissionDenied, provider.CodeForbidden:
		return connect.CodePermissionDenied
	}
	return connect.CodeInternal
}
