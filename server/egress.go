package server

import (
	"context"
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/egresspolicy"
	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/secretbox"
)

// egress is the egress proxy of allow-list sandboxes and what feeds it:
// the rules from the registry, and the records into the sandboxes'
// activity.
type egress struct {
	proxy    *egressproxy.Proxy
	policy   *egresspolicy.Policy
	recorder *egresspolicy.Recorder
}

// buildSecrets makes the box that seals tenants' secrets, from
// SECRETS_KEY; nil without one (the secrets API then answers
// NOT_SUPPORTED, and credentials are refused).
func (a *app) buildSecrets() error {
	if a.cfg.SecretsKey == nil {
		return nil
	}
	box, err := secretbox.New(a.cfg.SecretsKey)
	if err != nil {
		return err
	}
	a.secrets = box
	return nil
}

// buildEgress makes the egress proxy when the local provider is enabled
// (its "allowlist" network goes through it), listening on ports of its
// own, and returns the options that hand it to the provider. The rules
// are the registry's (egresspolicy.Policy), credentials' secrets opened
// with the secrets box; every connection is recorded in the sandbox's
// activity and in the log (refusals at info, the rest at debug).
func (a *app) buildEgress() ([]local.Option, error) {
	if !slices.Contains(a.cfg.Providers, local.Name) {
		return nil, nil
	}
	var (
		px  *egressproxy.Proxy
		err error
	)
	pcfg := egresspolicy.Config{Registry: appStore{a}, Parser: func() egressproxy.Parser { return px.Parser() }, Log: a.log}
	var source local.SecretSource
	if a.secrets != nil {
		pcfg.Secrets = a.secrets
	}
	policy := egresspolicy.New(pcfg)
	if a.secrets != nil {
		source = policy.Secret
	}
	recorder := egresspolicy.NewRecorder(appStore{a}, a.log, nil)
	cfg := egressproxy.Config{
		Policy:       policy,
		Recorder:     recorders{recorder, egressproxy.LogRecorder{Log: a.log}},
		AllowPrivate: a.cfg.Egress.AllowPrivate,
		Log:          a.log,
	}
	if a.cfg.Egress.Hosts != nil {
		cfg.Lookup = egressproxy.StaticLookup(a.cfg.Egress.Hosts)
	}
	if px, err = egressproxy.New(cfg); err != nil {
		return nil, err
	}
	a.egress = &egress{proxy: px, policy: policy, recorder: recorder}
	return []local.Option{local.WithEgressProxy(px, policy, source)}, nil
}

// appStore is the app's store for the egress proxy's policy and
// recorder, which are made with the providers, before the store is
// opened (a provider misconfigured is refused before Postgres is
// reached), and used only once the app has started.
// Until then (the local provider serves its running allow-list sandboxes
// again while it is made) it answers errNotOpen: their rules are loaded
// once the proxy is asked for them.
type appStore struct{ a *app }

var errNotOpen = errors.New("the registry is not open yet")

func (s appStore) SandboxNetworks(ctx context.Context, ids []string) ([]domain.SandboxNetwork, error) {
	if s.a.st == nil {
		return nil, errNotOpen
	}
	return s.a.st.SandboxNetworks(ctx, ids)
}

func (s appStore) SealedSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error) {
	if s.a.st == nil {
		return nil, errNotOpen
	}
	return s.a.st.SealedSecrets(ctx, tenant, names)
}

func (s appStore) RecordEgress(ctx context.Context, records []domain.Activity) error {
	if s.a.st == nil {
		return errNotOpen
	}
	return s.a.st.RecordEgress(ctx, records)
}

// recorders records with each of them.
type recorders []egressproxy.Recorder

func (rs recorders) Record(r egressproxy.ConnRecord) {
	for _, rec := range rs {
		rec.Record(r)
	}
}

// egressCollectors are the egress recorder's metrics, if a proxy runs.
func (a *app) egressCollectors() []prometheus.Collector {
	if a.egress == nil {
		return nil
	}
	return a.egress.recorder.Collectors()
}

// startEgress starts the proxy and, on the workers, its rules' reloads
// and its records' writes.
func (a *app) startEgress() {
	if a.egress == nil {
		return
	}
	a.egress.proxy.Start()
	a.workers.Go(func() { a.egress.policy.Run(a.workCtx, a.notifier) })
	a.workers.Go(func() { a.egress.recorder.Run(a.workCtx) })
}

// stopEgress stops the egress proxy, if there is one: the allow-list
// sandboxes' connections end with it (and their records are written as
// the workers stop).
func (a *app) stopEgress(ctx context.Context) {
	if a.egress == nil {
		return
	}
	if err := a.egress.proxy.Stop(ctx); err != nil {
		a.log.Warn("egress proxy stop incomplete", "err", err)
	}
}

// egressRules checks network edits as this server's egress proxy reads
// them (controlplane.EgressRules).
type egressRules struct{ px *egressproxy.Proxy }

func (a *app) egressRules() *egressRules {
	if a.egress == nil {
		return nil
	}
	return &egressRules{px: a.egress.proxy}
}

// Serves implements controlplane.EgressRules: local's sandboxes go out
// through the proxy.
func (r *egressRules) Serves(provider string) bool { return provider == local.Name }

// CheckAllow implements controlplane.EgressRules.
func (r *egressRules) CheckAllow(allow []string) error {
	_, err := r.px.Parser().Parse(allow)
	return err
}

// CheckCredential implements controlplane.EgressRules.
func (r *egressRules) CheckCredential(c domain.NetworkCredential) error {
	return egressproxy.CheckCredential(egressproxy.Credential{Host: c.Host, Header: c.Header, Format: c.Format, Username: c.Username})
}
