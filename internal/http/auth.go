package http

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// tenantKey is the gin context key of the authenticated tenant.
const tenantKey = "tether.tenant"

func tenantOf(c *gin.Context) string { return c.GetString(tenantKey) }

type authenticator interface {
	// Authenticate returns the tenant of an API key, or sandbox.ErrNotFound.
	Authenticate(ctx context.Context, key string) (string, error)
}

// withAuth requires "Authorization: Bearer <api key>" and records the key's
// tenant for the handlers.
func withAuth(log *slog.Logger, auth authenticator) gin.HandlerFunc {
	return func(c *gin.Context) {
		scheme, key, ok := strings.Cut(c.GetHeader("Authorization"), " ")
		key = strings.TrimSpace(key)
		if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
			c.Header("WWW-Authenticate", `Bearer realm="tether"`)
			writeProblem(c, http.StatusUnauthorized, sandbox.CodeUnauthenticated,
				"send an API key as Authorization: Bearer <key>", "")
			return
		}
		tenant, err := auth.Authenticate(c.Request.Context(), key)
		if errors.Is(err, sandbox.ErrNotFound) {
			c.Header("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
			writeProblem(c, http.StatusUnauthorized, sandbox.CodeUnauthenticated, "the API key is not valid", "")
			return
		}
		if err != nil {
			writeError(c, log, err)
			return
		}
		c.Set(tenantKey, tenant)
		c.Next()
	}
}
