package http

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// Forwarding: a sandbox of a host-bound provider (local) lives on one node,
// and only that node's replicas can reach it. A replica that receives a
// data-plane call for a sandbox on another node forwards it there, streaming
// the body both ways, signed with the cluster's secret and carrying the
// caller's tenant and key, so the node acts for the caller and records it
// in the audit trail. A forwarded request is never forwarded again.

// The headers of a forwarded request. The signature covers the method, the
// request URI, the forwarding node's id, the caller and the time.
const (
	hdrForwardedBy      = "Tether-Forwarded-By"
	hdrForwardedAt      = "Tether-Forwarded-At"
	hdrForwardedTenant  = "Tether-Forwarded-Tenant"
	hdrForwardedKeyID   = "Tether-Forwarded-Key-Id"
	hdrForwardedKeyName = "Tether-Forwarded-Key-Name"
	hdrForwardedSig     = "Tether-Forwarded-Signature"
)

// forwardSkew is how far a forwarded request's time may be from the
// receiving node's clock: older signatures are refused, which bounds
// replays.
const forwardSkew = time.Minute

// forwardedKey and sandboxKey are gin context keys: the request came from
// another node; the sandbox the routing looked up.
const (
	forwardedKey = "tether.forwarded"
	sandboxKey   = "tether.sandbox"
)

// nodeFinder finds a node's heartbeat record.
type nodeFinder interface {
	Node(ctx context.Context, id string) (sandbox.Node, error)
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
	Finder nodeFinder
}

// router forwards data-plane calls to the node a sandbox lives on.
type router struct {
	Nodes
	log       *slog.Logger
	transport http.RoundTripper
	now       func() time.Time
}

func newRouter(log *slog.Logger, n Nodes) *router {
	if n.Self == "" || len(n.Secret) == 0 || n.Finder == nil {
		return nil
	}
	return &router{
		Nodes: n,
		log:   log,
		now:   time.Now,
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

// sign is the signature of a forwarded request's fields.
func (rt *router) sign(fields ...string) string {
	mac := hmac.New(sha256.New, rt.Secret)
	for _, f := range fields {
		mac.Write([]byte(f))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// signedFields are the fields a forwarded request's signature covers.
func signedFields(r *http.Request) []string {
	h := r.Header
	return []string{r.Method, r.URL.RequestURI(), h.Get(hdrForwardedBy), h.Get(hdrForwardedAt),
		h.Get(hdrForwardedTenant), h.Get(hdrForwardedKeyID), h.Get(hdrForwardedKeyName)}
}

// verify checks a forwarded request's signature and age and returns the
// caller it carries.
func (rt *router) verify(r *http.Request) (tenant string, by sandbox.Caller, ok bool) {
	if rt == nil {
		return "", by, false
	}
	sig, err := hex.DecodeString(r.Header.Get(hdrForwardedSig))
	if err != nil {
		return "", by, false
	}
	want, _ := hex.DecodeString(rt.sign(signedFields(r)...))
	if !hmac.Equal(sig, want) {
		return "", by, false
	}
	at, err := strconv.ParseInt(r.Header.Get(hdrForwardedAt), 10, 64)
	if err != nil {
		return "", by, false
	}
	if age := rt.now().Sub(time.UnixMilli(at)); age > forwardSkew || age < -forwardSkew {
		return "", by, false
	}
	tenant = r.Header.Get(hdrForwardedTenant)
	return tenant, sandbox.Caller{KeyID: r.Header.Get(hdrForwardedKeyID), KeyName: r.Header.Get(hdrForwardedKeyName)}, tenant != ""
}

// forwarded reports whether the request came from another node.
func forwarded(c *gin.Context) bool { return c.GetBool(forwardedKey) }

// withNodeRouting sends a data-plane call for a ready sandbox on another
// node to that node, and otherwise lets the handler serve it, with the
// sandbox it looked up (see dataPlane).
func withNodeRouting(log *slog.Logger, st sandboxGetter, rt *router) gin.HandlerFunc {
	return func(c *gin.Context) {
		if rt == nil {
			c.Next()
			return
		}
		id, err := sandboxID(c)
		if err != nil {
			c.Next() // the handler answers it
			return
		}
		sb, err := st.GetSandbox(c.Request.Context(), tenantOf(c), id)
		if err != nil {
			c.Next()
			return
		}
		c.Set(sandboxKey, sb)
		if sb.Node == "" || sb.Node == rt.Self || sb.State != sandbox.StateReady {
			c.Next()
			return
		}
		c.Abort()
		if forwarded(c) {
			// The forwarding node thought the sandbox lives here: one of
			// the two read a moment-old registry. The client retries.
			writeUnreachable(c, log, sandbox.Errorf(sandbox.CodeProviderUnavailable,
				"sandbox %s lives on node %s, not on the node this call was forwarded to; retry", sb.ID, sb.Node))
			return
		}
		rt.forward(c, sb)
	}
}

// writeUnreachable answers a call that cannot reach its sandbox's node now.
func writeUnreachable(c *gin.Context, log *slog.Logger, err error) {
	c.Header("Retry-After", "1")
	writeError(c, log, err)
}

// forward proxies the request to the node of sb.
func (rt *router) forward(c *gin.Context, sb sandbox.Sandbox) {
	node, err := rt.Finder.Node(c.Request.Context(), sb.Node)
	switch {
	case errors.Is(err, sandbox.ErrNotFound) || (err == nil && !node.Alive):
		writeUnreachable(c, rt.log, sandbox.Errorf(sandbox.CodeProviderUnavailable,
			"sandbox %s lives on node %s, which is not alive (no recent heartbeat); if it does not come back the sandbox ends lost", sb.ID, sb.Node))
		return
	case err != nil:
		writeError(c, rt.log, err)
		return
	}
	target, err := url.Parse(node.URL)
	if err != nil {
		writeError(c, rt.log, err)
		return
	}
	by := callerOf(c)
	tenant := tenantOf(c)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			h := pr.Out.Header
			h.Del("Authorization") // the API key stays with the node it was sent to
			h.Set("X-Request-ID", requestID(c))
			h.Set(hdrForwardedBy, rt.Self)
			h.Set(hdrForwardedAt, strconv.FormatInt(rt.now().UnixMilli(), 10))
			h.Set(hdrForwardedTenant, tenant)
			h.Set(hdrForwardedKeyID, by.KeyID)
			h.Set(hdrForwardedKeyName, by.KeyName)
			h.Set(hdrForwardedSig, rt.sign(signedFields(pr.Out)...))
		},
		Transport:     rt.transport,
		FlushInterval: -1, // exec output and downloads stream as they come
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("X-Request-ID") // the same id; this replica set it already
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var maxBytes *http.MaxBytesError
			switch {
			case errors.As(err, &maxBytes):
				writeError(c, rt.log, err)
			case r.Context().Err() != nil:
				// The client went away; there is no one to answer.
			default:
				rt.log.Warn("forward to node failed", "node", sb.Node, "sandbox", sb.ID, "err", err,
					"request_id", requestID(c))
				writeUnreachable(c, rt.log, sandbox.Errorf(sandbox.CodeProviderUnavailable,
					"sandbox %s lives on node %s, which did not answer; retry", sb.ID, sb.Node))
			}
		},
	}
	proxy.ServeHTTP(c.Writer, c.Request)
}
