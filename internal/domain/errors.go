package domain

import (
	"errors"

	"github.com/tetherhq/tether/provider"
)

// Code is a stable, machine-readable error class. Each code maps to one HTTP
// status in the HTTP adapter; the rest of Tether only chooses the code.
// Providers return the codes of package provider; the others are Tether's
// own.
type Code = provider.Code

// The error codes of the API contract.
const (
	CodeInvalidRequest       = provider.CodeInvalidRequest
	CodeUnauthenticated Code = "UNAUTHENTICATED"
	// CodeForbidden: the request is well-formed but asks for something the
	// operator has not allowed (such as the host's network).
	CodeForbidden                 = provider.CodeForbidden
	CodeNotFound             Code = "NOT_FOUND"
	CodeStateConflict             = provider.CodeStateConflict
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	// CodeSandboxIDTaken: a create named an id another sandbox has.
	CodeSandboxIDTaken Code = "SANDBOX_ID_TAKEN"
	// CodePoolExists: a pool of that name exists.
	CodePoolExists Code = "POOL_EXISTS"
	// CodePoolEmpty: a create with pool_only found no ready member.
	CodePoolEmpty Code = "POOL_EMPTY"
	// CodeSnapshotNotReady: a create's from_snapshot names a snapshot
	// that is not ready (creating, failed, lost or deleted).
	CodeSnapshotNotReady Code = "SNAPSHOT_NOT_READY"
	// CodeSnapshotProviderMismatch: a create's from_snapshot names a
	// snapshot of another provider than the create's.
	CodeSnapshotProviderMismatch Code = "SNAPSHOT_PROVIDER_MISMATCH"
	CodeUnknownProvider          Code = "UNKNOWN_PROVIDER"
	CodeProviderUnavailable           = provider.CodeProviderUnavailable
	CodeNotSupported                  = provider.CodeNotSupported
	CodePayloadTooLarge               = provider.CodePayloadTooLarge
	CodeQuotaExceeded                 = provider.CodeQuotaExceeded
	// CodeRequestTimeout: the client sent its request body too slowly.
	CodeRequestTimeout Code = "REQUEST_TIMEOUT"
	// File errors, distinct from the sandbox's own NOT_FOUND, one per kind
	// of failure an agent framework reports per file.
	CodeFileNotFound     = provider.CodeFileNotFound
	CodeIsDirectory      = provider.CodeIsDirectory
	CodePermissionDenied = provider.CodePermissionDenied
	CodeInvalidPath      = provider.CodeInvalidPath
	// CodeProcessNotFound: no such process in the sandbox (a pid or tag
	// of the processes capability).
	CodeProcessNotFound = provider.CodeProcessNotFound
	// CodeProcessStateConflict: the process's state does not allow the
	// operation (input to a process without stdin, or whose stdin was
	// closed; a resize or a terminal of a process without one).
	CodeProcessStateConflict Code = "PROCESS_STATE_CONFLICT"
	// CodePortUnreachable: nothing listens on the port inside the sandbox.
	CodePortUnreachable = provider.CodePortUnreachable
	CodeInternal        = provider.CodeInternal
	// CodePreviewGone: a preview URL that expired, was revoked, or whose
	// sandbox ended.
	CodePreviewGone Code = "PREVIEW_GONE"
	// CodeUnavailable: a dependency (Postgres) cannot be reached right now;
	// the request may be retried.
	CodeUnavailable Code = "UNAVAILABLE"
)

// Error is an error whose message is safe to show to a client. Anything that
// is not an *Error is internal and is shown as a generic message.
type Error = provider.Error

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return provider.Errorf(code, format, args...)
}

// StateConflictError is the error for an operation that the sandbox's
// current state does not allow: an *Error with CodeStateConflict (which
// errors.As finds through it) and the state. It is Tether's; a provider
// says the same of a sandbox it holds paused with provider.Paused.
type StateConflictError struct {
	Err   *Error
	State State
}

// Error implements error.
func (e *StateConflictError) Error() string { return e.Err.Error() }

// Unwrap returns the *Error with CodeStateConflict.
func (e *StateConflictError) Unwrap() error { return e.Err }

// StateConflict returns the error for an operation that the sandbox's current
// state does not allow.
func StateConflict(id string, state State, op string) error {
	return &StateConflictError{
		Err:   Errorf(CodeStateConflict, "sandbox %s is %s: cannot %s", id, state, op),
		State: state,
	}
}

// ConflictState returns the sandbox state a StateConflict error carries
// (StatePaused for a provider's provider.Paused), or "" if err has none.
func ConflictState(err error) State {
	var c *StateConflictError
	if errors.As(err, &c) {
		return c.State
	}
	if provider.IsPaused(err) {
		return StatePaused
	}
	return ""
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal if there is none.
func ErrorCode(err error) Code { return provider.ErrorCode(err) }

// Sentinel errors that adapters translate to and from. The store returns them
// wrapped with the operation; callers test with errors.Is.
var (
	// ErrNotFound: the row does not exist (or belongs to another tenant).
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	// ErrUnavailable: the registry cannot be reached right now.
	ErrUnavailable = &Error{Code: CodeUnavailable, Message: "the registry is temporarily unavailable; retry shortly"}
	// ErrFenced: a worker's write lost the race — the sandbox changed state
	// or another worker claimed it since this one did.
	ErrFenced = errors.New("fenced: sandbox changed since it was claimed")
)

// Retryable marks err as transient: the executor retries the call with
// backoff until the creation deadline or the attempt limit.
func Retryable(err error) error { return provider.Retryable(err) }

// IsRetryable reports whether err, or an error it wraps, was marked
// Retryable.
func IsRetryable(err error) bool { return provider.IsRetryable(err) }
