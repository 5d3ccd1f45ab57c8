package main

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/provider"
)

// registrations are the providers Tether knows, in the order their
// settings are documented. Each parses its own settings (the provider's
// registration.go); adding a provider is adding its registration here.
var registrations = []provider.Registration{
	sim.Registration,
	local.Registration,
	kubernetes.Registration,
}

// registry is the registrations, checked once: a registration that is not
// valid is a programming error, and fails the binary at once.
var registry = func() *provider.Registry {
	r, err := provider.NewRegistry(registrations...)
	if err != nil {
		panic(err)
	}
	return r
}()

// providerSettings are the settings the registrations declare, as rows of
// the settings table: each keeps its value, blanks dropped, in
// Config.ProviderSettings, for its registration to parse when
// buildProviders makes the provider.
func providerSettings() []setting {
	var out []setting
	for _, r := range registrations {
		for _, s := range r.Settings {
			out = append(out, setting{name: s.Name, def: s.Default, doc: s.Doc, set: func(c *Config, v string) error {
				if c.ProviderSettings == nil {
					c.ProviderSettings = map[string]string{}
				}
				c.ProviderSettings[s.Name] = cmp.Or(strings.TrimSpace(v), s.Default)
				return nil
			}})
		}
	}
	return out
}

// buildProviders makes the providers PROVIDERS enables, the default first,
// each from its settings; local with localOpts too (its egress proxy).
func buildProviders(ctx context.Context, cfg Config, localOpts ...local.Option) ([]sandbox.Provider, error) {
	service := map[string]string{"DATABASE_URL": cfg.DatabaseURL} // what registrations may Use
	reg := registry
	if len(localOpts) > 0 {
		regs := slices.Clone(registrations)
		for i, r := range regs {
			if r.Name == local.Name {
				regs[i] = local.RegistrationWith(localOpts...)
			}
		}
		var err error
		if reg, err = provider.NewRegistry(regs...); err != nil {
			return nil, err
		}
	}
	return reg.Open(ctx, cfg.Providers, func(name string) string {
		if v, ok := cfg.ProviderSettings[name]; ok {
			return v
		}
		return service[name]
	})
}

// nodeDir is the folder the node's id is derived from and kept in: the
// NodeDir setting of the first registration that declares one (local's
// LOCAL_STATE_DIR), "" if none does.
func nodeDir(cfg Config) string {
	for _, r := range registrations {
		if r.NodeDir != "" {
			return cfg.ProviderSettings[r.NodeDir]
		}
	}
	return ""
}
