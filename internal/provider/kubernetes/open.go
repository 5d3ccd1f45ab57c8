//go:build kubernetes

package kubernetes

import (
	"context"

	"github.com/tetherhq/tether/provider"
)

// open is the Registration's New: the provider, from its settings.
func open(_ context.Context, s *provider.Settings) (provider.Provider, error) {
	cfg, err := ConfigFromEnv(s.String)
	if err != nil {
		return nil, err
	}
	p, err := New(cfg)
	if err != nil {
		return nil, err // not a nil *Provider in a non-nil interface
	}
	return p, nil
}
