package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tetherhq/tether/internal/domain"
)

// apiError is an error in E2B's shape: the HTTP status, repeated as code
// in the body, and a message. The SDK maps the status to its error
// classes (404 SandboxNotFoundError, 401 AuthenticationError, ...).
type apiError struct {
	Status  int
	Message string
	// Code is the /v1 problem's code (PROCESS_NOT_FOUND, ...) of an
	// error fromV1; empty for the others.
	Code string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// errorf is an apiError of status with a formatted message.
func errorf(status int, format string, args ...any) error {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

// problem is what this package reads of a /v1 problem+json answer.
type problem struct {
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// fromV1 turns a /v1 error answer into an apiError of the same status,
// its detail (else title) as the message.
func fromV1(rep reply) error {
	var p problem
	if json.Unmarshal(rep.body, &p) != nil || (p.Detail == "" && p.Title == "") {
		return &apiError{Status: rep.status, Message: http.StatusText(rep.status)}
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	return &apiError{Status: rep.status, Message: msg, Code: p.Code}
}

// statusClientClosedRequest is the status logged for a request whose
// caller went away before its answer; it is never sent.
const statusClientClosedRequest = 499

// errorBody is E2B's error: {"code": status, "message": "..."}.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers err in E2B's shape: an apiError as it says, any
// other error as a 500 without its detail (which may name the host).
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case domain.ErrorCode(err) == domain.CodeUnavailable:
		// Postgres out of reach for a moment (a restart, a failover): a
		// retry may succeed, as /v1's 503 says.
		ae = &apiError{Status: http.StatusServiceUnavailable, Message: "Tether's registry is unavailable for a moment; retry shortly"}
	default:
		ae = &apiError{Status: http.StatusInternalServerError, Message: "internal error"}
	}
	writeJSON(w, ae.Status, errorBody{Code: ae.Status, Message: ae.Message})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may be gone; nothing to do about it
}
