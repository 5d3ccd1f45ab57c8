package provider

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. Tether maps each code to
// one HTTP status and shows it to clients as the problem document's code.
type Code string

// The codes a provider returns. Tether has more (authentication, its own
// registry, lifecycle conflicts); a provider returns only these.
const (
	// CodeInvalidRequest: params, a path or a body the provider does not
	// accept (400).
	CodeInvalidRequest Code = "INVALID_REQUEST"
	// CodeForbidden: the request is well-formed but asks for something the
	// operator has not allowed, such as the host's network (403).
	CodeForbidden Code = "FORBIDDEN"
	// CodeProviderUnavailable: the provider cannot serve right now: it is not
	// usable on this host, or the sandbox no longer runs there (503).
	CodeProviderUnavailable Code = "PROVIDER_UNAVAILABLE"
	// CodeNotSupported: the provider lacks what the request needs (501).
	CodeNotSupported Code = "NOT_SUPPORTED"
	// CodePayloadTooLarge: a file or archive over the limit it was given
	// (413).
	CodePayloadTooLarge Code = "PAYLOAD_TOO_LARGE"
	// CodeQuotaExceeded: the create does not fit the capacity the operator
	// gave the provider (429).
	CodeQuotaExceeded Code = "QUOTA_EXCEEDED"
	// File errors, one per kind of failure an agent framework reports per
	// file, distinct from a missing sandbox.
	CodeFileNotFound     Code = "FILE_NOT_FOUND"
	CodeIsDirectory      Code = "IS_DIRECTORY"
	CodePermissionDenied Code = "PERMISSION_DENIED"
	CodeInvalidPath      Code = "INVALID_PATH"
	// CodeProcessNotFound: a process selector (a pid, a tag) names no
	// process the provider keeps for the sandbox, or one that has ended
	// where only a running one will do (404). Distinct from a missing
	// sandbox, which is CodeProviderUnavailable.
	CodeProcessNotFound Code = "PROCESS_NOT_FOUND"
	// CodePortUnreachable: nothing accepts connections on the port inside
	// the sandbox (the connection was refused or timed out there) (502).
	CodePortUnreachable Code = "PORT_UNREACHABLE"
	// CodeStateConflict: the sandbox's state does not allow the call. A
	// provider returns it only through Paused, for a call on a sandbox it
	// holds paused (a Pauser's race with a pause) (409).
	CodeStateConflict Code = "SANDBOX_STATE_CONFLICT"
	// CodeInternal is the code of every error that is not an *Error: a bug
	// or a failure the client cannot act on (500).
	CodeInternal Code = "INTERNAL"
)

// Error is an error whose message is safe to show to a client. Anything that
// is not an *Error is internal and is shown as a generic message.
type Error struct {
	Code    Code
	Message string
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
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

// retryable marks a provider error that is worth another attempt.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// Retryable marks err as transient: Tether's executor retries the create
// with backoff until the creation deadline or its attempt limit. The mark
// survives wrapping with fmt.Errorf's %w; Retryable(nil) is nil.
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

// pausedError is the error of a call on a paused sandbox: an *Error with
// CodeStateConflict, which errors.As finds through it.
type pausedError struct{ err *Error }

func (p pausedError) Error() string { return p.err.Error() }
func (p pausedError) Unwrap() error { return p.err }

// Paused returns the error for an operation (op: what the caller could not
// do, "run commands in it") on a sandbox the provider holds paused: a
// Pauser refuses data-plane calls that reach a sandbox frozen under them
// with it. Tether shows it as a state conflict naming the state paused.
func Paused(sandboxID, op string) error {
	return pausedError{Errorf(CodeStateConflict, "sandbox %s is paused: cannot %s", sandboxID, op)}
}

// IsPaused reports whether err, or an error it wraps, came from Paused.
func IsPaused(err error) bool {
	var p pausedError
	return errors.As(err, &p)
}
