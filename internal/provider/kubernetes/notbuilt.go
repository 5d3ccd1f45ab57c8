//go:build !kubernetes

package kubernetes

import (
	"context"

	"github.com/tetherhq/tether/provider"
)

// open is the Registration's New in a Tether built without the provider:
// it refuses, saying how to build one with it.
func open(context.Context, *provider.Settings) (provider.Provider, error) {
	return nil, ErrNotBuiltIn
}
