package dataplane

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Ports: HTTP and WebSocket traffic proxied to 127.0.0.1:{port} inside a
// ready sandbox, over a connection its provider makes there
// (domain.PortDialer), never through the host's network. Two ways in:
// /v1/sandboxes/{id}/ports/{port}/{path} with an API key, and preview URLs
// (previews.go) without one. Each request (or WebSocket connection) is one
// activity record once it ends.

// portDialTimeout bounds the connection to a sandbox's port.
const portDialTimeout = 10 * time.Second

// PortMethods are the methods the port routes proxy.
var PortMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// portParam is the request's port: 1-65535, else INVALID_REQUEST.
func portParam(c *gin.Context) (int, error) {
	s := c.Param("port")
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != s {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "port must be a number 1-65535 (got %q)", s)
	}
	return port, nil
}

// CheckPort refuses a bad port before the call is routed (see
// dataRoutes), and lets an upgraded connection outlive the server's read
// timeout (httpapi.UpgradeWriter).
func CheckPort() httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if _, err := portParam(c); err != nil {
			return err
		}
		if err := checkAppPath(pathAfter(c.Request.URL.EscapedPath(), 5)); err != nil {
			return err
		}
		c.Writer = httpapi.UpgradeWriter{ResponseWriter: c.Writer}
		return nil
	}
}

// checkAppPath refuses an app's path (escaped, beginning with "/") that
// holds an empty segment ("//") or a dot segment ("." or "..", escaped or
// not): parsers read them differently ("//host:port/x" reads as an
// authority, and reached the app as "/x"), and a path that means one thing
// to the activity record and another to the app is a way around both. A
// trailing "/" is not an empty segment.
func checkAppPath(p string) error {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, seg := range segs {
		dots := strings.ReplaceAll(strings.ToLower(seg), "%2e", ".")
		if (seg == "" && i < len(segs)-1) || dots == "." || dots == ".." {
			return domain.Errorf(domain.CodeInvalidRequest,
				"the app's path must not hold an empty segment (//) or a dot segment (. or ..); send it normalised")
		}
	}
	return nil
}

// HandleSandboxPort proxies a request to a port in the sandbox (the
// annotated operations are in ports_ops.go, one per method).
func HandleSandboxPort(log *slog.Logger, st Store, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		port, err := portParam(c)
		if err != nil {
			return err
		}
		sb, dialer, err := ReadySandbox[domain.PortDialer](c, st, providers, "ports")
		if err != nil {
			return err
		}
		a := domain.Activity{Kind: domain.ActivityPort}
		to := portTarget{prefix: "/v1/sandboxes/" + sb.ID + "/ports/" + strconv.Itoa(port), skip: 5}
		keyID := httpapi.CallerOf(c).KeyID
		if httpapi.Forwarded(c) {
			// A preview URL's request, forwarded by the replica that
			// checked its token, or an E2B host's, by the replica that
			// let it through; which says how the app is served.
			id, preview := strings.CutPrefix(keyID, previewCallerPrefix)
			switch {
			case preview:
				a.Kind, a.PreviewID = domain.ActivityPreview, previewCallerPrefix+id
			case keyID == e2bHostCaller:
				a.Kind = domain.ActivityE2BHost
			}
			if a.Kind != domain.ActivityPort {
				to.prefix = c.GetHeader(hdrPreviewPrefix)
				to.ownOrigin = c.GetHeader(hdrPreviewOrigin) == "own"
			}
		}
		err = proxyPort(c, log, st, dialer, sb, port, to, a)
		if a.Kind == domain.ActivityE2BHost && err != nil {
			// Answered as the replica that took it would answer it.
			writeE2BHostError(c, log, sb.ID, port, err)
			return nil
		}
		return err
	}
}

// The headers a replica forwards a preview's request with: the prefix the
// app is served under, and whether it has an origin of its own (wildcard
// hosts). The node honours them only on a call signed for a preview; the
// app never sees them (stripCredentials).
const (
	hdrPreviewPrefix = "Tether-Forwarded-Preview-Prefix"
	hdrPreviewOrigin = "Tether-Forwarded-Preview-Origin"
)

// portTarget says where, in the request's path, the sandbox's path begins:
// after skip segments, which the app sees as X-Forwarded-Prefix.
type portTarget struct {
	prefix string
	skip   int
	// ownOrigin is set when the app is served from an origin of its own
	// (wildcard preview hosts), which its pages may then use.
	ownOrigin bool
}

// proxyPort proxies the request to port in sb and records it as a.
func proxyPort(c *gin.Context, log *slog.Logger, st ActivityRecorder, dialer domain.PortDialer, sb domain.Sandbox,
	port int, to portTarget, a domain.Activity,
) error {
	started := time.Now()
	path := pathAfter(c.Request.URL.EscapedPath(), to.skip)
	if err := checkAppPath(path); err != nil {
		return err // checked before, by the route; this is the last line
	}
	a.Target, a.Port = c.Request.Method+" "+path, port
	status, n, err := dialAndProxy(c, dialer, sb.ID, port, path, to)
	a.Status, a.Bytes = status, &n
	RecordActivity(c, log, st, sb, a, started, err)
	return err
}

// dialAndProxy connects to the port and proxies the request over that
// connection; it returns the status the app answered (0 if none) and the
// bytes moved both ways.
func dialAndProxy(c *gin.Context, dialer domain.PortDialer, id string, port int, path string, to portTarget) (int, int64, error) {
	ctx := c.Request.Context()
	dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	conn, err := dialer.DialPort(dctx, id, port)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = conn.Close() }()
	var (
		used    atomic.Bool
		status  int
		moved   atomic.Int64
		failure error
	)
	transport := &http.Transport{
		Proxy: nil, // never through HTTP_PROXY: the connection is the sandbox's
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used.Swap(true) {
				return nil, errors.New("the sandbox's connection was used already")
			}
			return conn, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
	defer transport.CloseIdleConnections()
	u, err := url.Parse(path)
	if err != nil {
		return 0, 0, domain.Errorf(domain.CodeInvalidRequest, "the path is not valid")
	}
	if c.Request.Body != nil && c.Request.Body != http.NoBody {
		c.Request.Body = &countingBody{ReadCloser: c.Request.Body, n: &moved}
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			out.URL.Path, out.URL.RawPath = u.Path, u.RawPath
			out.Host = out.URL.Host
			pr.SetXForwarded()
			out.Header.Set("X-Forwarded-Prefix", to.prefix)
			stripCredentials(out)
		},
		Transport:     transport,
		FlushInterval: -1, // streamed as it comes
		ModifyResponse: func(resp *http.Response) error {
			status = resp.StatusCode
			httpapi.State(c).AnsweredBy = httpapi.AnsweredByApp
			scopeAnswer(resp.Header, to)
			if !to.ownOrigin {
				// Served from Tether's origin: the app's pages get an
				// origin of their own (opaque), never Tether's.
				resp.Header.Add("Content-Security-Policy", sandboxedCSP)
			}
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Body = &countingConn{countingBody: countingBody{ReadCloser: rwc, n: &moved}, w: rwc}
			} else {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &moved}
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failure = err },
	}
	proxy.ServeHTTP(c.Writer, c.Request)
	if failure == nil {
		return status, moved.Load(), nil
	}
	switch {
	case ctx.Err() != nil:
		return status, moved.Load(), ctx.Err()
	case c.Writer.Written():
		return status, moved.Load(), nil // the answer had begun; it ends cut short
	}
	return status, moved.Load(), domain.Errorf(domain.CodePortUnreachable,
		"port %d in sandbox %s closed the connection without an HTTP answer", port, id)
}

// sandboxedCSP puts a page proxied from a sandbox onto an opaque origin of
// its own: its scripts run, but never as Tether's origin (which serves the
// console and the API), so they cannot read what Tether's pages keep.
const sandboxedCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// originHeaders are answer headers that act on a whole origin (its
// cookies and storage, its transport): an app served from Tether's origin
// may not send them, since that origin is Tether's and every other
// preview's.
var originHeaders = []string{"Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc"}

// scopeAnswer keeps an app's answer headers to the app: its cookies lose
// any Domain (a cookie of one preview host would reach every other, and
// Tether's own hosts) and never carry Tether's own name; served from
// Tether's origin (path mode, and the port route), their Path is moved
// under the app's prefix, so that the browser sends them to this app
// alone, and the origin-wide headers are dropped.
func scopeAnswer(h http.Header, to portTarget) {
	if !to.ownOrigin {
		for _, name := range originHeaders {
			h.Del(name)
		}
	}
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range lines {
		if scoped, ok := scopeCookie(line, to); ok {
			h.Add("Set-Cookie", scoped)
		}
	}
}

// scopeCookie rewrites a Set-Cookie line (see scopeAnswer), keeping its
// name, value and other attributes as they were; false drops it.
func scopeCookie(line string, to portTarget) (string, bool) {
	parts := strings.Split(line, ";")
	name, _, ok := strings.Cut(parts[0], "=")
	if !ok || isPreviewCookie(strings.TrimSpace(name)) {
		return "", false
	}
	path := "/"
	kept := parts[:1]
	for _, attr := range parts[1:] {
		key, value, _ := strings.Cut(attr, "=")
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "domain":
			continue
		case "path":
			if v := strings.TrimSpace(value); strings.HasPrefix(v, "/") {
				path = v // the last one counts, as for browsers
			}
			if to.ownOrigin {
				kept = append(kept, attr)
			}
			continue
		}
		kept = append(kept, attr)
	}
	if !to.ownOrigin {
		kept = append(kept, " Path="+to.prefix+path)
	}
	return strings.Join(kept, ";"), true
}

// stripCredentials keeps Tether's credentials from the sandbox's app: the
// API key, a preview's cookie and token, the node-to-node headers. (An
// E2B host's request loses E2B's credential headers too: E2BHosts.)
func stripCredentials(r *http.Request) {
	h := r.Header
	h.Del("Authorization")
	for name := range h {
		if strings.HasPrefix(strings.ToLower(name), "tether-forwarded-") {
			h.Del(name)
		}
	}
	if cookies := r.Cookies(); len(cookies) > 0 {
		h.Del("Cookie")
		for _, ck := range cookies {
			if !isPreviewCookie(ck.Name) {
				r.AddCookie(ck)
			}
		}
	}
	if q := r.URL.Query(); q.Has(previewQuery) {
		q.Del(previewQuery)
		r.URL.RawQuery = q.Encode()
	}
}

// pathAfter is the escaped path p without its first skip segments,
// beginning with "/".
func pathAfter(p string, skip int) string {
	rest := p
	for range skip {
		i := strings.IndexByte(rest[1:], '/')
		if i < 0 {
			return "/"
		}
		rest = rest[i+1:]
	}
	if rest == "" {
		return "/"
	}
	return rest
}

// countingBody counts the bytes read through it into n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countingConn counts the bytes an upgraded connection moves both ways:
// its reads through countingBody, its writes here.
type countingConn struct {
	countingBody
	w io.Writer
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
