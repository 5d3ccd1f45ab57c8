package server

import (
	"context"
	"slices"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/provider/local"
)

// buildEgress makes the egress proxy when the local provider is enabled
// (its "allowlist" network goes through it), listening on ports of its
// own, and returns the options that hand it to the provider. The rules
// are the sandboxes' create params for now (egressproxy.MemoryPolicy,
// which the provider fills), and no secrets are given: credentials are
// refused until stored secrets exist. Connections are recorded in the
// log (refusals at info, the rest at debug).
func (a *app) buildEgress() ([]local.Option, error) {
	if !slices.Contains(a.cfg.Providers, local.Name) {
		return nil, nil
	}
	rules := &egressproxy.MemoryPolicy{}
	cfg := egressproxy.Config{
		Policy:       rules,
		Recorder:     egressproxy.LogRecorder{Log: a.log},
		AllowPrivate: a.cfg.Egress.AllowPrivate,
		Log:          a.log,
	}
	if a.cfg.Egress.Hosts != nil {
		cfg.Lookup = egressproxy.StaticLookup(a.cfg.Egress.Hosts)
	}
	px, err := egressproxy.New(cfg)
	if err != nil {
		return nil, err
	}
	a.egress = px
	return []local.Option{local.WithEgressProxy(px, rules, nil)}, nil
}

// stopEgress stops the egress proxy, if there is one: the allow-list
// sandboxes' connections end with it.
func (a *app) stopEgress(ctx context.Context) {
	if a.egress == nil {
		return
	}
	if err := a.egress.Stop(ctx); err != nil {
		a.log.Warn("egress proxy stop incomplete", "err", err)
	}
}
