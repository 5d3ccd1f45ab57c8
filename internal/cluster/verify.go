package cluster

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tetherhq/tether/internal/domain"
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

// Refusal is why a node refused a forwarded call. The node names it in
// its 401 (Refuse), so that the forwarding replica can say what was
// refused rather than guess.
type Refusal string

// The refusals.
const (
	// RefusedBody: the body that arrived is not the one signed.
	RefusedBody Refusal = "body"
	// RefusedTime: the call was signed further from the node's clock than
	// the skew allows.
	RefusedTime Refusal = "time"
	// RefusedReplay: the node took a call with its nonce before.
	RefusedReplay Refusal = "replay"
	// RefusedCall: anything else (the signature, the route, the node the
	// call names, too many calls to remember).
	RefusedCall Refusal = "call"
)

// hdrRefused carries the Refusal in a node's 401 to a forwarded call.
const hdrRefused = "Tether-Forwarded-Refused"

// RefusalOf is the refusal Verify's error err stands for.
func RefusalOf(err error) Refusal {
	switch {
	case errors.Is(err, errStale):
		return RefusedTime
	case errors.Is(err, errSeen):
		return RefusedReplay
	}
	return RefusedCall
}

// Refuse names why a forwarded call is refused in h, the headers of the
// node's 401 to it.
func Refuse(h http.Header, why Refusal) { h.Set(hdrRefused, string(why)) }

// RefusedError is a node's refusal of a forwarded call, and why (empty
// when the node did not say). It is ErrNodeRefused.
type RefusedError struct{ Why Refusal }

func (e *RefusedError) Error() string {
	switch e.Why {
	case RefusedBody:
		return ErrNodeRefused.Error() + ": the body that reached it is not the one signed"
	case RefusedTime:
		return ErrNodeRefused.Error() + ": its time is further from the node's clock than a minute"
	case RefusedReplay:
		return ErrNodeRefused.Error() + ": it took a call with the same nonce before"
	case RefusedCall:
		return ErrNodeRefused.Error() + ": its signature, route or node did not check"
	}
	return ErrNodeRefused.Error()
}

// Is reports whether target is ErrNodeRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrNodeRefused }

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
	return Caller{Tenant: tenant, Key: domain.Caller{KeyID: r.Header.Get(hdrKeyID), KeyName: r.Header.Get(hdrKeyName)}}, nil
}
