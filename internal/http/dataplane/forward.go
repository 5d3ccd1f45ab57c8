package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Forwarding: the API's side of the node-to-node protocol (package
// cluster, which signs, checks and proxies the calls). A data-plane call
// for a ready sandbox on another node goes there (withNodeRouting); a call
// another node forwarded is checked in withAuth (forwardedAuth). The routes
// that accept forwarded calls are the ones registered with dataRoutes
// (routes.go). A forwarded request is never forwarded again.

// WithNodeRouting sends a data-plane call for a ready sandbox on another
// node to that node, and otherwise lets the handler serve it, with the
// sandbox it looked up (see ReadySandbox). draining, once done, ends a
// forwarded event stream with a retryable error, as a local one ends.
func WithNodeRouting(log *slog.Logger, st httpapi.SandboxGetter, cl *cluster.Cluster, draining context.Context) gin.HandlerFunc {
	return func(c *gin.Context) {
		if cl == nil {
			c.Next()
			return
		}
		id, err := httpapi.SandboxID(c)
		if err != nil {
			c.Next() // the handler answers it
			return
		}
		sb, err := st.GetSandbox(c.Request.Context(), httpapi.TenantOf(c), id)
		if err != nil {
			c.Next()
			return
		}
		httpapi.State(c).Sandbox = &sb
		if sb.Node == "" || sb.Node == cl.Self || sb.State != domain.StateReady {
			c.Next()
			return
		}
		c.Abort()
		if httpapi.Forwarded(c) {
			// The forwarding node thought the sandbox lives here: one of
			// the two read a moment-old registry. The client retries.
			writeUnreachable(c, log, domain.Errorf(domain.CodeProviderUnavailable,
				"sandbox %s lives on node %s, not on the node this call was forwarded to; retry", sb.ID, sb.Node))
			return
		}
		forward(c, log, cl, draining, sb)
	}
}

// writeUnreachable answers a call that cannot reach its sandbox's node now.
func writeUnreachable(c *gin.Context, log *slog.Logger, err error) {
	c.Header("Retry-After", "1")
	httpapi.WriteError(c, log, err)
}

// forward proxies the request to the node of sb, and answers it when the
// node could not.
func forward(c *gin.Context, log *slog.Logger, cl *cluster.Cluster, draining context.Context, sb domain.Sandbox) {
	call := cluster.Call{Node: sb.Node, As: cluster.Caller{Tenant: httpapi.TenantOf(c), Key: httpapi.CallerOf(c)}, RequestID: httpapi.RequestID(c)}
	if wantsEventStream(c) && draining != nil {
		// A streaming exec ends at this replica's shutdown like a local
		// one: the node's stream is cut (which ends the command there) as
		// if it had ended, and a retryable error event follows.
		call.Cut = draining
	}
	switch err := cl.Forward(c.Writer, c.Request, call); {
	case err == nil:
		httpapi.State(c).AnsweredBy = httpapi.AnsweredByNode
	case errors.Is(err, cluster.ErrCut):
		writeDrained(c, log)
	case errors.Is(err, cluster.ErrNodeDown):
		writeUnreachable(c, log, domain.Errorf(domain.CodeProviderUnavailable,
			"sandbox %s lives on node %s, which is not alive (no recent heartbeat); if it does not come back the sandbox ends lost", sb.ID, sb.Node))
	case errors.Is(err, cluster.ErrHop):
		writeHopFailed(c, log, sb, err)
	default:
		httpapi.WriteError(c, log, err) // the registry's failure, or the node's URL
	}
}

// writeHopFailed answers a call whose hop to sb's node failed.
func writeHopFailed(c *gin.Context, log *slog.Logger, sb domain.Sandbox, err error) {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		httpapi.WriteError(c, log, err)
	case c.Request.Context().Err() != nil:
		// The client went away; there is no one to answer.
	case errors.Is(err, cluster.ErrNodeRefused):
		log.Error("a node refused a forwarded call", "node", sb.Node, "sandbox", sb.ID, "err", err,
			"request_id", httpapi.RequestID(c))
		writeUnreachable(c, log, domain.Errorf(domain.CodeProviderUnavailable,
			"sandbox %s lives on node %s, which refused this replica's call: %s", sb.ID, sb.Node, refusedBecause(err)))
	default:
		log.Warn("forward to node failed", "node", sb.Node, "sandbox", sb.ID, "err", err,
			"request_id", httpapi.RequestID(c))
		writeUnreachable(c, log, domain.Errorf(domain.CodeProviderUnavailable,
			"sandbox %s lives on node %s, which did not answer; retry", sb.ID, sb.Node))
	}
}

// refusedBecause says what a node refused of a forwarded call (err wraps
// a *cluster.RefusedError) and what may be done: only a call signed too
// far from the node's clock is a matter of clocks.
func refusedBecause(err error) string {
	var refused *cluster.RefusedError
	errors.As(err, &refused)
	why := cluster.Refusal("")
	if refused != nil {
		why = refused.Why
	}
	switch why {
	case cluster.RefusedBody:
		return "the body that reached it is not the one this replica sent (it changed on the way between the nodes); retry"
	case cluster.RefusedTime:
		return "the call's time is further than a minute from the node's clock; the operator must check the hosts' clocks"
	case cluster.RefusedReplay:
		return "it had taken the same call before; retry"
	}
	return "the call's signature did not check there; the operator must check the nodes' cluster secret and versions"
}

// writeDrained ends a forwarded stream that this replica's shutdown cut.
func writeDrained(c *gin.Context, log *slog.Logger) {
	err := domain.Errorf(domain.CodeUnavailable, "the server is shutting down; the command was ended; retry on another replica")
	if !c.Writer.Written() {
		writeUnreachable(c, log, err)
		return
	}
	if data, merr := json.Marshal(httpapi.ProblemFor(c, log, err)); merr == nil {
		_, _ = fmt.Fprintf(c.Writer, "\n\nevent: error\ndata: %s\n\n", data)
		c.Writer.Flush()
	}
}
