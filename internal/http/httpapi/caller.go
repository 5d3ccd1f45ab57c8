package httpapi

import (
	"github.com/tetherhq/tether/internal/domain"
)

// CallerName is the key name an audit record shows: null exactly when it
// names no key.
func CallerName(by domain.Caller) *string {
	if by.KeyID == "" {
		return nil
	}
	return &by.KeyName
}
