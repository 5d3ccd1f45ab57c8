package cluster

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/internal/sandbox"
)

// skew is how far a forwarded request's time may be from the receiving
// node's clock: older signatures are refused, which bounds replays.
const skew = time.Minute

// Why Verify refuses a forwarded call.
var (
	errRoute = errors.New("this route does not take forwarded calls")
	errSig   = errors.New("the signature is not valid")
	errStale = errors.New("the call is older than the skew allows, or from the future")
	errTo    = errors.New("the call was meant for another node")
	errSeen  = errors.New("the call was accepted before")
	errBusy  = errors.New("too many forwarded calls to remember")
)

// IsForwarded reports whether r claims to be a call another node forwarded
// (it carries a signature, which Verify must check).
func IsForwarded(r *http.Request) bool { return r.Header.Get(hdrSig) != "" }

// ForwardedBy is the node a forwarded call says it comes from, for logs.
func ForwardedBy(r *http.Request) string { return r.Header.Get(hdrBy) }

// Verify checks a call forwarded by another node to the route path (as the
// router names it: "/v1/sandboxes/:id/exec"): an accepted route, a valid
// signature, meant for this node, recent, and never seen before by any
// replica of this node. It returns the caller the call carries, and
// replaces r.Body with one whose reads fail with a 401 error
// (CodeUnauthenticated) once it turns out not to be the body signed; bad,
// if not nil, is told of that failure. Nothing of the call may take effect
// before its body was read to its end.
func (c *Cluster) Verify(r *http.Request, path string, bad func(error)) (Caller, error) {
	if c == nil || !c.routes[r.Method+" "+path] {
		return Caller{}, errRoute
	}
	if err := c.checkSignature(r); err != nil {
		return Caller{}, err
	}
	if r.Header.Get(hdrTo) != c.Self {
		return Caller{}, errTo
	}
	at, err := strconv.ParseInt(r.Header.Get(hdrAt), 10, 64)
	if err != nil {
		return Caller{}, errSig
	}
	now := c.Now()
	if age := now.Sub(time.UnixMilli(at)); age > skew || age < -skew {
		return Caller{}, errStale
	}
	tenant := r.Header.Get(hdrTenant)
	mode := r.Header.Get(hdrBody)
	if tenant == "" || (mode != bodyNone && mode != bodyTrailer) {
		return Caller{}, errSig
	}
	if err := c.remember(r.Context(), r.Header.Get(hdrNonce), now); err != nil {
		return Caller{}, err
	}
	c.verifyBody(r, mode, bad)
	return Caller{Tenant: tenant, Key: sandbox.Caller{KeyID: r.Header.Get(hdrKeyID), KeyName: r.Header.Get(hdrKeyName)}}, nil
}
