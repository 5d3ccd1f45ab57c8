package http

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status" enums:"ok,unavailable" x-enum-varnames:"HealthStatusOk,HealthStatusUnavailable" example:"ok"`
	// Detail says what is wrong when status is unavailable.
	Detail string `json:"detail,omitempty" example:"postgres is unreachable or its schema is not current"`
} // @name Health

// handleHealthz reports that the process is alive.
//
//	@Summary		Liveness
//	@Description	200 while the process serves HTTP; it checks nothing else.
//	@ID				healthz
//	@Tags			health
//	@Produce		json
//	@Success		200	{object}	Health
//	@Router			/healthz [get]
func handleHealthz() httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		return httpapi.WriteJSON(c, http.StatusOK, Health{Status: "ok"})
	}
}

// handleReadyz reports whether the service can serve: Postgres reachable
// and the schema current. Providers never affect readiness.
//
//	@Summary		Readiness
//	@Description	200 when Postgres is reachable and the schema current; 503 otherwise. Providers never affect readiness.
//	@ID				readyz
//	@Tags			health
//	@Produce		json
//	@Success		200	{object}	Health
//	@Failure		503	{object}	Health			"not ready: status unavailable, detail says why"
//	@Router			/readyz [get]
func handleReadyz(ready func(context.Context) error) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			return httpapi.WriteJSON(c, http.StatusServiceUnavailable, Health{Status: "unavailable", Detail: "postgres is unreachable or its schema is not current"})
		}
		return httpapi.WriteJSON(c, http.StatusOK, Health{Status: "ok"})
	}
}
