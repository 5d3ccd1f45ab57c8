package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// Problem is an RFC 9457 problem document, the body of every error.
type Problem struct {
	// Type is a URI naming the kind of problem.
	Type string `json:"type" example:"https://github.com/tetherhq/tether/blob/main/docs/errors.md#not_found"`
	// Title is a short, stable summary of the kind of problem.
	Title string `json:"title" example:"Not Found"`
	// Status repeats the HTTP status code.
	Status int `json:"status" example:"404"`
	// Detail explains this occurrence.
	Detail string `json:"detail" example:"sandbox sbx_... not found"`
	// Code is the stable, machine-readable error code.
	Code string `json:"code" example:"NOT_FOUND" enums:"INVALID_REQUEST,UNAUTHENTICATED,FORBIDDEN,NOT_FOUND,SANDBOX_STATE_CONFLICT,IDEMPOTENCY_KEY_REUSED,SANDBOX_ID_TAKEN,POOL_EXISTS,POOL_EMPTY,SNAPSHOT_NOT_READY,SNAPSHOT_PROVIDER_MISMATCH,UNKNOWN_PROVIDER,PROVIDER_UNAVAILABLE,NOT_SUPPORTED,PAYLOAD_TOO_LARGE,QUOTA_EXCEEDED,REQUEST_TIMEOUT,FILE_NOT_FOUND,IS_DIRECTORY,PERMISSION_DENIED,INVALID_PATH,PROCESS_NOT_FOUND,PROCESS_STATE_CONFLICT,PORT_UNREACHABLE,PREVIEW_GONE,INTERNAL,UNAVAILABLE" x-enum-varnames:"ProblemCodeInvalidRequest,ProblemCodeUnauthenticated,ProblemCodeForbidden,ProblemCodeNotFound,ProblemCodeSandboxStateConflict,ProblemCodeIdempotencyKeyReused,ProblemCodeSandboxIdTaken,ProblemCodePoolExists,ProblemCodePoolEmpty,ProblemCodeSnapshotNotReady,ProblemCodeSnapshotProviderMismatch,ProblemCodeUnknownProvider,ProblemCodeProviderUnavailable,ProblemCodeNotSupported,ProblemCodePayloadTooLarge,ProblemCodeQuotaExceeded,ProblemCodeRequestTimeout,ProblemCodeFileNotFound,ProblemCodeIsDirectory,ProblemCodePermissionDenied,ProblemCodeInvalidPath,ProblemCodeProcessNotFound,ProblemCodeProcessStateConflict,ProblemCodePortUnreachable,ProblemCodePreviewGone,ProblemCodeInternal,ProblemCodeUnavailable"`
	// State is the sandbox's current state, for SANDBOX_STATE_CONFLICT; absent otherwise.
	State string `json:"state,omitempty" extensions:"x-enum-schema=SandboxState" enums:"requested,creating,ready,pausing,paused,resuming,cancelled,terminated,failed" x-enum-varnames:"SandboxStateRequested,SandboxStateCreating,SandboxStateReady,SandboxStatePausing,SandboxStatePaused,SandboxStateResuming,SandboxStateCancelled,SandboxStateTerminated,SandboxStateFailed" example:"terminated"`
	// RequestID identifies the request in Tether's logs (the X-Request-ID response header).
	RequestID string `json:"request_id,omitempty" example:"5f1c2d9e4b7a8c03"`
} // @name Problem

// StatusOf maps each error code to its HTTP status: the one table every
// error response comes from.
var StatusOf = map[domain.Code]int{
	domain.CodeInvalidRequest:           http.StatusBadRequest,
	domain.CodeUnauthenticated:          http.StatusUnauthorized,
	domain.CodeForbidden:                http.StatusForbidden,
	domain.CodeNotFound:                 http.StatusNotFound,
	domain.CodeStateConflict:            http.StatusConflict,
	domain.CodeIdempotencyKeyReused:     http.StatusConflict,
	domain.CodeSandboxIDTaken:           http.StatusConflict,
	domain.CodePoolExists:               http.StatusConflict,
	domain.CodePoolEmpty:                http.StatusConflict,
	domain.CodeUnknownProvider:          http.StatusBadRequest,
	domain.CodeSnapshotNotReady:         http.StatusConflict,
	domain.CodeSnapshotProviderMismatch: http.StatusUnprocessableEntity,
	domain.CodeProviderUnavailable:      http.StatusServiceUnavailable,
	domain.CodeNotSupported:             http.StatusNotImplemented,
	domain.CodePayloadTooLarge:          http.StatusRequestEntityTooLarge,
	domain.CodeQuotaExceeded:            http.StatusTooManyRequests,
	domain.CodeRequestTimeout:           http.StatusRequestTimeout,
	domain.CodeFileNotFound:             http.StatusNotFound,
	domain.CodeIsDirectory:              http.StatusBadRequest,
	domain.CodePermissionDenied:         http.StatusForbidden,
	domain.CodeInvalidPath:              http.StatusBadRequest,
	domain.CodePortUnreachable:          http.StatusBadGateway,
	domain.CodeProcessNotFound:          http.StatusNotFound,
	domain.CodeProcessStateConflict:     http.StatusConflict,
	domain.CodePreviewGone:              http.StatusGone,
	domain.CodeInternal:                 http.StatusInternalServerError,
	domain.CodeUnavailable:              http.StatusServiceUnavailable,
}

// logLevelOf is the level a request answered with a problem of code and
// status is logged at. An error is Tether's own failure only: INTERNAL,
// or a 5xx of no code known here. What Tether depends on failing is a
// warning, worth an operator's watch but no bug: Postgres (UNAVAILABLE),
// a provider or a sandbox's node (PROVIDER_UNAVAILABLE). Whatever is about
// the request, its sandbox or its provider is INFO, 5xx or not: every
// 4xx, NOT_SUPPORTED (501: the provider lacks the capability) and
// PORT_UNREACHABLE (502: nothing listens on the port in the sandbox, or
// the app closed the connection; the sandbox's app is the client's, and
// Tether did its part), and NOT_FOUND however it is answered (E2B's
// sandbox hosts answer a sandbox they do not serve 502, as E2B's proxy
// does).
func logLevelOf(code domain.Code, status int) slog.Level {
	switch {
	case code == domain.CodeUnavailable || code == domain.CodeProviderUnavailable:
		return slog.LevelWarn
	case code == domain.CodeNotSupported || code == domain.CodePortUnreachable || code == domain.CodeNotFound:
		return slog.LevelInfo
	case status >= 500:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// HandlerFunc is a handler that reports failure by returning an error;
// errorHandler renders it.
type HandlerFunc func(c *gin.Context) error

// ErrorHandler adapts handlers that return errors: the one place errors
// become responses. A 4xx shows the error's safe message; anything else is
// logged with its cause and shown as a generic message.
func ErrorHandler(log *slog.Logger) func(HandlerFunc) gin.HandlerFunc {
	return func(h HandlerFunc) gin.HandlerFunc {
		return func(c *gin.Context) {
			if err := h(c); err != nil {
				WriteError(c, log, err)
			}
		}
	}
}

// StatusClientClosedRequest is the status logged for a request whose
// client went away before its answer (nginx's 499); it is never sent.
const StatusClientClosedRequest = 499

// WriteError answers err as its problem document; an error of a request
// whose client went away is only logged, at INFO.
func WriteError(c *gin.Context, log *slog.Logger, err error) {
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		// The client went away mid-request: nothing failed on Tether's
		// side, and nobody reads an answer.
		log.InfoContext(c.Request.Context(), "request ended: the client went away", "err", err,
			"request_id", RequestID(c), "method", c.Request.Method, "path", c.FullPath())
		c.AbortWithStatus(StatusClientClosedRequest)
		return
	}
	p := ProblemFor(c, log, err)
	if p.Code == string(domain.CodeUnavailable) {
		c.Header("Retry-After", "1")
	}
	WriteProblem(c, p)
}

// ProblemFor is the problem document that err becomes, logging the cause
// of a 5xx (whose detail is then generic).
func ProblemFor(c *gin.Context, log *slog.Logger, err error) Problem {
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		err = domain.Errorf(domain.CodePayloadTooLarge, "request body exceeds %d bytes", maxBytes.Limit)
	}
	var e *domain.Error
	if !errors.As(err, &e) {
		e = &domain.Error{Code: domain.CodeInternal}
	}
	status, ok := StatusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	detail := e.Message
	switch {
	case e.Code == domain.CodeUnavailable:
		log.WarnContext(c.Request.Context(), "request failed: registry unavailable", "err", err,
			"request_id", RequestID(c), "method", c.Request.Method, "path", c.FullPath())
	case logLevelOf(e.Code, status) == slog.LevelError:
		log.ErrorContext(c.Request.Context(), "request failed", "err", err,
			"request_id", RequestID(c), "method", c.Request.Method, "path", c.FullPath())
		detail = "an internal error occurred; quote the request id when reporting it"
	}
	if e == domain.ErrNotFound {
		detail = "the resource does not exist"
	}
	return NewProblem(c, status, e.Code, detail, domain.ConflictState(err))
}

// NewProblem is the problem document for status and code, for the request c.
func NewProblem(c *gin.Context, status int, code domain.Code, detail string, state domain.State) Problem {
	return Problem{
		Type:      "https://github.com/tetherhq/tether/blob/main/docs/errors.md#" + strings.ToLower(string(code)),
		Title:     http.StatusText(status),
		Status:    status,
		Detail:    detail,
		Code:      string(code),
		State:     string(state),
		RequestID: RequestID(c),
	}
}

// WriteProblem answers the request with the problem document p.
func WriteProblem(c *gin.Context, p Problem) {
	if b := unreadBody(c); b != nil {
		// Answer now and close, rather than read (or wait for) the rest of
		// a body that will not be used: a client that trickles a body
		// never learns sooner otherwise, and keeps its connection.
		c.Header("Connection", "close")
		b.lingerAfterAnswer()
	}
	if p.Status == http.StatusUnauthorized && c.Writer.Header().Get("WWW-Authenticate") == "" {
		// A key found revoked in the database, a forwarded body that is
		// not the one signed: refused credentials, like withAuth's.
		c.Header("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
	}
	State(c).code = domain.Code(p.Code)
	if p.Status == http.StatusUnauthorized && State(c).badBody != nil {
		// Tells the forwarding replica what was refused.
		cluster.Refuse(c.Writer.Header(), cluster.RefusedBody)
	}
	c.Header("Content-Type", "application/problem+json")
	c.Status(p.Status)
	c.Abort()
	_ = jsoncodec.Encode(c.Writer, p)
}
