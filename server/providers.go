package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/provider/microvm"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
)

// builtin are the providers Tether ships, in the order their settings are
// documented. Each parses its own settings (the provider's
// registration.go); adding one to Tether is adding its registration here,
// and adding one to a program of its own is Options.Providers.
var builtin = []provider.Registration{
	sim.Registration,
	local.Registration,
	kubernetes.Registration,
	microvm.Registration,
}

// providerSet is the registrations a program runs with, the built-in ones
// and its Options.Providers after them, checked together: the settings
// table, PROVIDERS and the providers' construction all read it.
type providerSet struct {
	regs []provider.Registration
	reg  *provider.Registry
}

// newProviderSet checks the built-in registrations and extra together: a
// registration without a name or constructor, a name registered twice, a
// setting declared twice or one the service reads itself is an error.
func newProviderSet(extra ...provider.Registration) (*providerSet, error) {
	regs := append(slices.Clone(builtin), extra...)
	reg, err := provider.NewRegistry(regs...)
	if err != nil {
		return nil, err
	}
	own := coreSettings()
	for _, r := range extra {
		for _, s := range r.Settings {
			if slices.ContainsFunc(own, func(o setting) bool { return o.name == s.Name }) {
				return nil, fmt.Errorf("provider: registration %q: setting %s is one of the service's own", r.Name, s.Name)
			}
		}
	}
	return &providerSet{regs: regs, reg: reg}, nil
}

// providerSettings are the settings the registrations declare, as rows of
// the settings table: each keeps its value, blanks dropped, in
// config.ProviderSettings, for its registration to parse when
// buildProviders makes the provider.
func (ps *providerSet) providerSettings() []setting {
	var out []setting
	for _, r := range ps.regs {
		for _, s := range r.Settings {
			out = append(out, setting{name: s.Name, def: s.Default, doc: s.Doc, set: func(c *config, v string) error {
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
func buildProviders(ctx context.Context, cfg config, localOpts ...local.Option) ([]provider.Provider, error) {
	service := map[string]string{ // what registrations may Use
		"DATABASE_URL":                cfg.DatabaseURL,
		provider.SettingProcessMax:    strconv.Itoa(cfg.ProcessMax),
		provider.SettingProcessOutput: strconv.FormatInt(cfg.ProcessOutput, 10),
	}
	reg := cfg.providers.reg
	if len(localOpts) > 0 {
		regs := slices.Clone(cfg.providers.regs)
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
func nodeDir(cfg config) string {
	for _, r := range cfg.providers.regs {
		if r.NodeDir != "" {
			return cfg.ProviderSettings[r.NodeDir]
		}
	}
	return ""
}
