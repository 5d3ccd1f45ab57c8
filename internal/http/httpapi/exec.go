package httpapi

import (
	"github.com/tetherhq/tether/internal/domain"
)

// ExecCall is an exec's body, decoded and checked: the command to run, and
// how its output goes back.
type ExecCall struct {
	Req domain.ExecRequest
	// base64: the output goes back as base64 (output_encoding base64),
	// every byte whole, rather than as text.
	Base64 bool
}
