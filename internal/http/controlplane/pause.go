package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// SandboxPauser is what pause and resume needs of the store.
type SandboxPauser interface {
	httpapi.SandboxGetter
	RequestPause(ctx context.Context, tenant, id string, timeout time.Duration, by domain.Caller) (domain.Sandbox, bool, error)
	RequestResume(ctx context.Context, tenant, id string, timeout time.Duration, by domain.Caller) (domain.Sandbox, bool, error)
}

// HandleSandboxPause asks for a ready sandbox to be paused.
//
//	@Summary		Pause a sandbox
//	@Description	Moves a ready sandbox to pausing; an executor then pauses it at the provider (its processes stop, keeping their memory and files) and it becomes paused. Idempotent: 202 when this call started the pause, 200 when the sandbox was already pausing or paused. A refused pause goes back to ready with the refusal in error; one not done within the server's pause timeout fails the sandbox (reason pause_failed). With wait (a Go duration such as 30s, at most the server's max wait), blocks until the sandbox is no longer pausing, or the wait ends. A paused sandbox keeps its owner and its TTL, which keeps running; exec and files on it are 409 SANDBOX_STATE_CONFLICT.
//	@ID				pauseSandbox
//	@Tags			sandboxes
//	@Produce		json
//	@Param			id		path		string				true	"sandbox id"																	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			wait	query		string				false	"how long to wait for the pause to settle: a Go duration or whole seconds"	example(30s)
//	@Success		202		{object}	Sandbox				"this request started the pause"
//	@Success		200		{object}	Sandbox				"the sandbox was already pausing or paused"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT: the sandbox is not ready (nor pausing or paused); state says what it is"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: the sandbox's provider cannot pause sandboxes"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/pause [post]
func HandleSandboxPause(cfg httpapi.Config, st SandboxPauser, changes httpapi.ChangeSubscriber, draining context.Context, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return handleTransition(cfg, st, changes, draining, providers, "pause")
}

// HandleSandboxResume asks for a paused sandbox to be resumed.
//
//	@Summary		Resume a sandbox
//	@Description	Moves a paused sandbox to resuming; an executor then resumes it at the provider, and it is ready again with its processes, memory and files as they were. Idempotent: 202 when this call started the resume, 200 when the sandbox was already resuming or ready. A refused resume goes back to paused with the refusal in error; one not done within the server's pause timeout fails the sandbox (reason resume_failed). With wait, blocks until the sandbox is no longer resuming, or the wait ends.
//	@ID				resumeSandbox
//	@Tags			sandboxes
//	@Produce		json
//	@Param			id		path		string				true	"sandbox id"																	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			wait	query		string				false	"how long to wait for the resume to settle: a Go duration or whole seconds"	example(30s)
//	@Success		202		{object}	Sandbox				"this request started the resume"
//	@Success		200		{object}	Sandbox				"the sandbox was already resuming or ready"
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"SANDBOX_STATE_CONFLICT: the sandbox is not paused (nor resuming or ready); state says what it is"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: the sandbox's provider cannot pause sandboxes"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/resume [post]
func HandleSandboxResume(cfg httpapi.Config, st SandboxPauser, changes httpapi.ChangeSubscriber, draining context.Context, providers map[string]domain.Provider) httpapi.HandlerFunc {
	return handleTransition(cfg, st, changes, draining, providers, "resume")
}

// handleTransition is the pause handler, or (op "resume") the resume one.
func handleTransition(cfg httpapi.Config, st SandboxPauser, changes httpapi.ChangeSubscriber, draining context.Context, providers map[string]domain.Provider, op string) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		request := st.RequestPause
		if op == "resume" {
			request = st.RequestResume
		}
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c, "wait"); err != nil {
			return err
		}
		var wait time.Duration
		if w := c.Query("wait"); w != "" {
			if wait, err = httpapi.ParseWait(w, cfg.MaxWait); err != nil {
				return err
			}
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		cur, err := st.GetSandbox(ctx, tenant, id)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		if p := providers[cur.Provider]; p == nil || !domain.CanPause(p) {
			return domain.Errorf(domain.CodeNotSupported, "provider %s cannot %s sandboxes", cur.Provider, op)
		}
		updates, stop := (<-chan domain.Change)(nil), func() {}
		if wait > 0 {
			// Subscribe before the change so that none slips between.
			updates, stop = changes.SubscribeSandbox(id)
		}
		defer stop()
		sb, changed, err := request(ctx, tenant, id, cfg.PauseTimeout, httpapi.CallerOf(c))
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		sb, answer, err := awaitSandbox(ctx, st, waiting{
			updates: updates, draining: draining, wait: wait,
			done:      func(sb domain.Sandbox) bool { return !sb.State.Transitioning() },
			mayBeDone: func(ch domain.Change) bool { return ch.ID == "" || !ch.State.Transitioning() },
		}, sb)
		if err != nil || !answer {
			return err
		}
		status := http.StatusOK
		if changed {
			status = http.StatusAccepted
		}
		return httpapi.WriteJSON(c, status, toSandbox(sb))
	}
}
