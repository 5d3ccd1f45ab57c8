package sandbox

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. Each code maps to one HTTP
// status in the HTTP adapter; the rest of Tether only chooses the code.
type Code string

// The error codes of the API contract.
const (
	CodeInvalidRequest  Code = "INVALID_REQUEST"
	CodeUnauthenticated Code = "UNAUTHENTICATED"
	// CodeForbidden: the request is well-formed but asks for something the
	// operator has not allowed (such as the host's network).
	CodeForbidden            Code = "FORBIDDEN"
	CodeNotFound             Code = "NOT_FOUND"
	CodeStateConflict        Code = "SANDBOX_STATE_CONFLICT"
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED"
	// CodeSandboxIDTaken: a create named an id another sandbox has.
	CodeSandboxIDTaken      Code = "SANDBOX_ID_TAKEN"
	CodeUnknownProvider     Code = "UNKNOWN_PROVIDER"
	CodeProviderUnavailable Code = "PROVIDER_UNAVAILABLE"
	CodeNotSupported        Code = "NOT_SUPPORTED"
	CodePayloadTooLarge     Code = "PAYLOAD_TOO_LARGE"
	CodeQuotaExceeded       Code = "QUOTA_EXCEEDED"
	// CodeRequestTimeout: the client sent its request body too slowly.
	CodeRequestTimeout Code = "REQUEST_TIMEOUT"
	// File errors, distinct from the sandbox's own NOT_FOUND, one per kind
	// of failure an agent framework reports per file.
	CodeFileNotFound     Code = "FILE_NOT_FOUND"
	CodeIsDirectory      Code = "IS_DIRECTORY"
	CodePermissionDenied Code = "PERMISSION_DENIED"
	CodeInvalidPath      Code = "INVALID_PATH"
	CodeInternal         Code = "INTERNAL"
	// CodeUnavailable: a dependency (Postgres) cannot be reached right now;
	// the request may be retried.
	CodeUnavailable Code = "UNAVAILABLE"
)

// Error is an error whose message is safe to show to a client. Anything that
// is not an *Error is internal and is shown as a generic message.
type Error struct {
	Code    Code
	Message string
	// State is the sandbox's state, set for CodeStateConflict.
	State State
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// StateConflict returns the error for an operation that the sandbox's current
// state does not allow.
func StateConflict(id string, state State, op string) *Error {
	return &Error{
		Code:    CodeStateConflict,
		Message: fmt.Sprintf("sandbox %s is %s: cannot %s", id, state, op),
		State:   state,
	}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal if there is none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

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

// retryable marks a provider error that is worth another attempt.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// Retryable marks err as transient: the executor retries the call with
// backoff until the creation deadline or the attempt limit.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryable{err}
}

// IsRetryable reports whether err, or an error it wraps, was marked
// Retryable.
func IsRetryable(err error) bool {
	var r retryable
	return errors.As(err, &r)
}
