package httpapi

import (
	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// reqState is what the middleware learns of a request for what runs after
// it: kept once per request, under an unexported key, and read through the
// typed accessors below, so that no context key is shared between files.
type reqState struct {
	// id is the request id (withRequestID).
	id string
	// paced is the request's body under withBodyPacing; nil without one.
	paced *pacedBody
	// tenant and caller are who the request authenticated as (withAuth).
	Tenant string
	Caller domain.Caller
	// manageKeys: the key has the manage_keys scope (withAuth; never set
	// for a forwarded call).
	manageKeys bool
	// forwarded: another node forwarded the call (withAuth checked it).
	forwarded bool
	// badBody is set once a forwarded call's body turned out not to be
	// the one its signature covers.
	badBody error
	// sandbox is the sandbox a data-plane call is for, as withNodeRouting
	// looked it up; nil if it did not.
	Sandbox *domain.Sandbox
	// exec is an exec's body as checkExecBody decoded and checked it.
	Exec *ExecCall
	// code is the code of the problem the request was answered with;
	// empty when it was not answered with one here.
	code domain.Code
	// answeredBy says who answered the request when Tether only passed
	// the answer on: the app in the sandbox (through a port or a preview),
	// or the node the call was forwarded to.
	AnsweredBy Answerer
}

// AnsweredAs records that the request was answered, in a shape other than
// a problem document (E2B's proxy's, on E2B's sandbox hosts), with what a
// problem of code says: its log line is at that code's level.
func AnsweredAs(c *gin.Context, code domain.Code) { State(c).code = code }

// Answerer is who answered a request Tether passed the answer of on.
type Answerer int

// Who answered a request.
const (
	answeredHere   Answerer = iota
	AnsweredByApp           // the app listening on a sandbox's port
	AnsweredByNode          // the sandbox's node, which logs the request itself
)

// stateKey is the gin context key of the request's *reqState.
type stateKey struct{}

// State is the request's state, made on first use.
func State(c *gin.Context) *reqState {
	if v, ok := c.Get(stateKey{}); ok {
		return v.(*reqState)
	}
	s := &reqState{}
	c.Set(stateKey{}, s)
	return s
}

// RequestID is the request's id, as logged and sent back in X-Request-ID.
func RequestID(c *gin.Context) string { return State(c).id }

// TenantOf is the tenant the request authenticated as.
func TenantOf(c *gin.Context) string { return State(c).Tenant }

// CallerOf is the API key the request was made with, for the audit trail.
func CallerOf(c *gin.Context) domain.Caller { return State(c).Caller }

// ManagesKeys is whether the request's key has the manage_keys scope.
func ManagesKeys(c *gin.Context) bool { return State(c).manageKeys }

// Forwarded reports whether the request came from another node.
func Forwarded(c *gin.Context) bool { return State(c).forwarded }

// RoutedSandbox is the sandbox withNodeRouting looked up for the request.
func RoutedSandbox(c *gin.Context) (domain.Sandbox, bool) {
	if sb := State(c).Sandbox; sb != nil {
		return *sb, true
	}
	return domain.Sandbox{}, false
}
