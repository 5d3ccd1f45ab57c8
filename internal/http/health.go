package http

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Health is the body of /healthz and /readyz.
type Health struct {
	Status string `json:"status" enums:"ok,unavailable" example:"ok"`
	// Detail says what is wrong when status is unavailable.
	Detail string `json:"detail,omitempty"`
} // @name Health

// handleHealthz reports that the process is alive.
//
//	@Summary	Liveness
//	@Tags		health
//	@Produce	json
//	@Success	200	{object}	Health
//	@Router		/healthz [get]
func handleHealthz() handlerFunc {
	return func(c *gin.Context) error {
		return writeJSON(c, http.StatusOK, Health{Status: "ok"})
	}
}

// handleReadyz reports whether the service can serve: Postgres reachable
// and the schema current. Providers never affect readiness.
//
//	@Summary	Readiness
//	@Tags		health
//	@Produce	json
//	@Success	200	{object}	Health
//	@Failure	503	{object}	Health
//	@Router		/readyz [get]
func handleReadyz(ready func(context.Context) error) handlerFunc {
	return func(c *gin.Context) error {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			return writeJSON(c, http.StatusServiceUnavailable, Health{Status: "unavailable", Detail: "postgres is unreachable or its schema is not current"})
		}
		return writeJSON(c, http.StatusOK, Health{Status: "ok"})
	}
}
