package http

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
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
// request URI, the forwarding and the receiving node's ids, the time, a
// nonce, the caller and how the body is covered: a call with a body sends
// it chunked with a trailer, Tether-Forwarded-Digest, an HMAC of the
// signature and the body's SHA-256, checked when the body ends, before the
// call has any effect (an exec's command runs only after its whole body
// arrived; an upload is committed only then). A body that does not match
// fails the call with 401, and its upload is discarded. Nonces are kept in
// Postgres (Nodes.Nonces), so a call is taken once by all the replicas of a
// node, not once by each.
const (
	hdrForwardedBy      = "Tether-Forwarded-By"
	hdrForwardedTo      = "Tether-Forwarded-To"
	hdrForwardedNonce   = "Tether-Forwarded-Nonce"
	hdrForwardedAt      = "Tether-Forwarded-At"
	hdrForwardedTenant  = "Tether-Forwarded-Tenant"
	hdrForwardedKeyID   = "Tether-Forwarded-Key-Id"
	hdrForwardedKeyName = "Tether-Forwarded-Key-Name"
	hdrForwardedBody    = "Tether-Forwarded-Body"
	hdrForwardedDigest  = "Tether-Forwarded-Digest"
	hdrForwardedSig     = "Tether-Forwarded-Signature"
)

// How a forwarded call's body is covered (hdrForwardedBody).
const (
	forwardBodyNone    = "none"    // no body: any byte of one fails the call
	forwardBodyTrailer = "trailer" // the digest trailer covers it
)

// forwardSkew is how far a forwarded request's time may be from the
// receiving node's clock: older signatures are refused, which bounds
// replays.
const forwardSkew = time.Minute

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
	// Nonces remembers the nonces of forwarded calls taken, for all the
	// replicas of every node (Postgres). Nil keeps them in this process
	// only, which is right only with one replica per node.
	Nonces nonceKeeper
}

// nonceKeeper records forwarded calls' nonces where every replica sees them.
type nonceKeeper interface {
	// RememberNonce records nonce until expires; false if it was recorded
	// before (the call is a replay).
	RememberNonce(ctx context.Context, nonce string, expires time.Time) (bool, error)
}

// router forwards data-plane calls to the node a sandbox lives on, and
// checks the calls other nodes forward to it.
type router struct {
	Nodes
	log *slog.Logger
	// draining is done once this replica begins to shut down: forwarded
	// event streams then end with a retryable error, as local ones do.
	draining  context.Context
	transport *http.Transport
	now       func() time.Time

	// routes are the routes ("METHOD /path/:param") that accept forwarded
	// calls: the data plane's, and nothing else.
	routes map[string]bool
	// seen holds the nonces of forwarded calls accepted within the skew
	// window and when each may be forgotten: a call is accepted once.
	mu   sync.Mutex
	seen map[string]time.Time
}

// maxNonces bounds the nonces remembered; past it forwarded calls are
// refused until old ones expire, rather than remembered without bound.
const maxNonces = 1 << 20

func newRouter(log *slog.Logger, n Nodes, draining context.Context) *router {
	if n.Self == "" || len(n.Secret) == 0 || n.Finder == nil {
		return nil
	}
	return &router{
		Nodes:    n,
		log:      log,
		draining: draining,
		now:      time.Now,
		routes:   map[string]bool{},
		seen:     map[string]time.Time{},
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
	return []string{r.Method, r.URL.RequestURI(), h.Get(hdrForwardedBy), h.Get(hdrForwardedTo),
		h.Get(hdrForwardedAt), h.Get(hdrForwardedNonce),
		h.Get(hdrForwardedTenant), h.Get(hdrForwardedKeyID), h.Get(hdrForwardedKeyName), h.Get(hdrForwardedBody)}
}

// bodyDigest is the digest trailer of a forwarded call signed sig whose
// body has the SHA-256 sum.
func (rt *router) bodyDigest(sig string, sum []byte) string {
	return rt.sign("body", sig, hex.EncodeToString(sum))
}

// digestingBody is a forwarded call's outgoing body: at its end it sets
// the digest trailer.
type digestingBody struct {
	rc      io.ReadCloser
	h       hash.Hash
	trailer http.Header
	done    func(sum []byte) string
}

func (b *digestingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.trailer.Set(hdrForwardedDigest, b.done(b.h.Sum(nil)))
	}
	return n, err
}

func (b *digestingBody) Close() error { return b.rc.Close() }

// verifiedBody is a forwarded call's incoming body: its end is an error
// unless the digest trailer matches what arrived (or, for a call signed
// without a body, unless nothing did).
type verifiedBody struct {
	rc    io.ReadCloser
	req   *http.Request
	mode  string
	h     hash.Hash
	want  func(sum []byte) string
	paced *pacedBody // told of a mismatch, for bodyError; may be nil
	n     int64
	bad   error
}

// errForwardBody is a forwarded call whose body is not the one signed.
func errForwardBody() error {
	return sandbox.Errorf(sandbox.CodeUnauthenticated, "the forwarded call is refused: its body is not the one its signature covers")
}

func (b *verifiedBody) Read(p []byte) (int, error) {
	if b.bad != nil {
		return 0, b.bad
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) || (b.mode == forwardBodyNone && b.n > 0) {
		ok := b.n == 0
		if b.mode == forwardBodyTrailer {
			got, _ := hex.DecodeString(b.req.Trailer.Get(hdrForwardedDigest))
			want, _ := hex.DecodeString(b.want(b.h.Sum(nil)))
			ok = len(got) > 0 && hmac.Equal(got, want)
		}
		if !ok {
			b.bad = errForwardBody()
			if b.paced != nil {
				b.paced.digestErr = b.bad
			}
			return 0, b.bad
		}
	}
	return n, err
}

func (b *verifiedBody) Close() error { return b.rc.Close() }

// acceptForwarded lets the routes (as gin names them: "POST
// /v1/sandboxes/:id/exec") take calls forwarded by other nodes.
func (rt *router) acceptForwarded(routes ...string) {
	if rt == nil {
		return
	}
	for _, r := range routes {
		rt.routes[r] = true
	}
}

// Why verify refuses a forwarded call.
var (
	errForwardRoute = errors.New("this route does not take forwarded calls")
	errForwardSig   = errors.New("the signature is not valid")
	errForwardStale = errors.New("the call is older than the skew allows, or from the future")
	errForwardTo    = errors.New("the call was meant for another node")
	errForwardSeen  = errors.New("the call was accepted before")
	errForwardBusy  = errors.New("too many forwarded calls to remember")
)

// verify checks a forwarded call: a data-plane route, a valid signature,
// meant for this node, recent, and never seen before. It returns the
// caller the call carries.
func (rt *router) verify(c *gin.Context) (tenant string, by sandbox.Caller, err error) {
	r := c.Request
	if rt == nil || !rt.routes[r.Method+" "+c.FullPath()] {
		return "", by, errForwardRoute
	}
	sig, err := hex.DecodeString(r.Header.Get(hdrForwardedSig))
	if err != nil {
		return "", by, errForwardSig
	}
	want, _ := hex.DecodeString(rt.sign(signedFields(r)...))
	if !hmac.Equal(sig, want) {
		return "", by, errForwardSig
	}
	if r.Header.Get(hdrForwardedTo) != rt.Self {
		return "", by, errForwardTo
	}
	at, err := strconv.ParseInt(r.Header.Get(hdrForwardedAt), 10, 64)
	if err != nil {
		return "", by, errForwardSig
	}
	now := rt.now()
	if age := now.Sub(time.UnixMilli(at)); age > forwardSkew || age < -forwardSkew {
		return "", by, errForwardStale
	}
	tenant = r.Header.Get(hdrForwardedTenant)
	mode := r.Header.Get(hdrForwardedBody)
	if tenant == "" || (mode != forwardBodyNone && mode != forwardBodyTrailer) {
		return "", by, errForwardSig
	}
	if err := rt.remember(r.Context(), r.Header.Get(hdrForwardedNonce), now); err != nil {
		return "", by, err
	}
	sigHex := r.Header.Get(hdrForwardedSig)
	paced := state(c).paced
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	r.Body = &verifiedBody{rc: body, req: r, mode: mode, h: sha256.New(), paced: paced,
		want: func(sum []byte) string { return rt.bodyDigest(sigHex, sum) }}
	return tenant, sandbox.Caller{KeyID: r.Header.Get(hdrForwardedKeyID), KeyName: r.Header.Get(hdrForwardedKeyName)}, nil
}

// remember records a forwarded call's nonce, refusing one seen before. A
// nonce is kept for twice the skew: past that its call is stale anyway.
// With Nonces set it is kept in Postgres, where every replica of the node
// sees it; else in this process.
func (rt *router) remember(ctx context.Context, nonce string, now time.Time) error {
	if len(nonce) < 16 || len(nonce) > 128 {
		return errForwardSig
	}
	if rt.Nonces != nil {
		fresh, err := rt.Nonces.RememberNonce(ctx, nonce, now.Add(2*forwardSkew))
		switch {
		case err != nil:
			return fmt.Errorf("remember the nonce: %w", err)
		case !fresh:
			return errForwardSeen
		}
		return nil
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, dup := rt.seen[nonce]; dup {
		return errForwardSeen
	}
	if len(rt.seen) >= maxNonces || len(rt.seen)%1024 == 1023 {
		for n, until := range rt.seen {
			if now.After(until) {
				delete(rt.seen, n)
			}
		}
	}
	if len(rt.seen) >= maxNonces {
		return errForwardBusy
	}
	rt.seen[nonce] = now.Add(2 * forwardSkew)
	return nil
}

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
		state(c).sandbox = &sb
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
			h.Set(hdrForwardedTo, sb.Node)
			h.Set(hdrForwardedNonce, rand.Text())
			h.Set(hdrForwardedAt, strconv.FormatInt(rt.now().UnixMilli(), 10))
			h.Set(hdrForwardedTenant, tenant)
			h.Set(hdrForwardedKeyID, by.KeyID)
			h.Set(hdrForwardedKeyName, by.KeyName)
			if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
				h.Set(hdrForwardedBody, forwardBodyNone)
				h.Set(hdrForwardedSig, rt.sign(signedFields(pr.Out)...))
				return
			}
			h.Set(hdrForwardedBody, forwardBodyTrailer)
			sig := rt.sign(signedFields(pr.Out)...)
			h.Set(hdrForwardedSig, sig)
			// Chunked, so that the digest can follow the body as a trailer.
			pr.Out.ContentLength = -1
			h.Del("Content-Length")
			pr.Out.Trailer = http.Header{hdrForwardedDigest: nil}
			pr.Out.Body = &digestingBody{rc: pr.Out.Body, h: sha256.New(), trailer: pr.Out.Trailer,
				done: func(sum []byte) string { return rt.bodyDigest(sig, sum) }}
		},
		Transport:      rt.transport,
		FlushInterval:  -1, // exec output and downloads stream as they come
		ModifyResponse: checkNodeAnswer,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var maxBytes *http.MaxBytesError
			switch {
			case errors.As(err, &maxBytes):
				writeError(c, rt.log, err)
			case r.Context().Err() != nil:
				// The client went away; there is no one to answer.
			case errors.Is(err, errNodeRefused):
				rt.log.Error("a node refused a forwarded call", "node", sb.Node, "sandbox", sb.ID, "err", err,
					"request_id", requestID(c))
				writeUnreachable(c, rt.log, sandbox.Errorf(sandbox.CodeProviderUnavailable,
					"sandbox %s lives on node %s, which refused this replica's call; the operator must check the hosts' clocks", sb.ID, sb.Node))
			default:
				rt.log.Warn("forward to node failed", "node", sb.Node, "sandbox", sb.ID, "err", err,
					"request_id", requestID(c))
				writeUnreachable(c, rt.log, sandbox.Errorf(sandbox.CodeProviderUnavailable,
					"sandbox %s lives on node %s, which did not answer; retry", sb.ID, sb.Node))
			}
		},
	}
	if !wantsEventStream(c) || rt.draining == nil {
		proxy.ServeHTTP(c.Writer, c.Request)
		return
	}
	// A streaming exec ends at this replica's shutdown like a local one:
	// the node's stream is cut (which ends the command there) as if it had
	// ended, and a retryable error event follows.
	var drained atomic.Bool
	proxy.ModifyResponse = func(resp *http.Response) error {
		if err := checkNodeAnswer(resp); err != nil {
			return err
		}
		body := resp.Body
		stop := context.AfterFunc(rt.draining, func() {
			drained.Store(true)
			_ = body.Close()
		})
		resp.Body = &drainedBody{ReadCloser: body, drained: &drained, stop: stop}
		return nil
	}
	proxy.ServeHTTP(c.Writer, c.Request)
	if drained.Load() {
		err := sandbox.Errorf(sandbox.CodeUnavailable, "the server is shutting down; the command was ended; retry on another replica")
		if !c.Writer.Written() {
			writeUnreachable(c, rt.log, err)
			return
		}
		if data, merr := json.Marshal(problemFor(c, rt.log, err)); merr == nil {
			_, _ = fmt.Fprintf(c.Writer, "\n\nevent: error\ndata: %s\n\n", data)
			c.Writer.Flush()
		}
	}
}

// errNodeRefused is a node's 401 to a forwarded call: the caller's key was
// good here, so the nodes disagree (their clocks, by more than the skew).
var errNodeRefused = errors.New("the node refused the forwarded call (are the hosts' clocks within a minute?)")

// checkNodeAnswer passes a node's answer on, but for its request id (the
// same; this replica set it already) and a refusal of the call itself,
// which is this cluster's fault and not the caller's.
func checkNodeAnswer(resp *http.Response) error {
	if resp.StatusCode == http.StatusUnauthorized {
		_ = resp.Body.Close()
		return errNodeRefused
	}
	resp.Header.Del("X-Request-ID")
	return nil
}

// drainedBody is a node's streamed answer that reads as ended once this
// replica began to shut down and cut it.
type drainedBody struct {
	io.ReadCloser
	drained *atomic.Bool
	stop    func() bool
}

func (b *drainedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.drained.Load() {
		return n, io.EOF
	}
	return n, err
}

func (b *drainedBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}
