package httpapi

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// EndedMeanwhile explains a data-plane call's failure that the provider
// gave no code for (which would answer 500): when the sandbox is no longer
// ready, it ended (or began pausing) while the call ran, and the destroy
// took what the call was using, so the failure is the sandbox's state, a
// 409 SANDBOX_STATE_CONFLICT, not a fault of Tether's. Any other error is
// returned as it is.
func EndedMeanwhile(c *gin.Context, st SandboxGetter, sb domain.Sandbox, op string, err error) error {
	if err == nil || domain.ErrorCode(err) != domain.CodeInternal || domain.ConflictState(err) != "" {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 5*time.Second)
	defer cancel()
	now, gerr := st.GetSandbox(ctx, TenantOf(c), sb.ID)
	if gerr != nil || now.State == domain.StateReady {
		return err
	}
	return domain.StateConflict(sb.ID, now.State, op+" (the sandbox ended while it ran)")
}
