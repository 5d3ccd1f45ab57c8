package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
)

// forwardedAuth checks a call another node forwarded (cluster.Verify) and
// records the caller it carries; false if it refused the call (and
// answered it).
func forwardedAuth(c *gin.Context, log *slog.Logger, cl *cluster.Cluster) bool {
	s := State(c)
	as, err := cl.Verify(c.Request, c.FullPath(), func(err error) { s.badBody = err })
	if err != nil {
		log.WarnContext(c.Request.Context(), "forwarded call refused", "err", err,
			"from", cluster.ForwardedBy(c.Request), "request_id", RequestID(c))
		cluster.Refuse(c.Writer.Header(), cluster.RefusalOf(err))
		c.Header("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
		WriteProblem(c, NewProblem(c, http.StatusUnauthorized, domain.CodeUnauthenticated,
			"the forwarded call is refused: "+err.Error(), ""))
		return false
	}
	s.Tenant, s.Caller, s.forwarded = as.Tenant, as.Key, true
	return true
}
