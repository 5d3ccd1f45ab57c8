package local

// A sandbox's network: by default a namespace of its own with only
// loopback; params.network "host" shares the host's (if the operator
// allows it); "allowlist" reaches only what params.allow names, through
// a namespace and a veth pair whose traffic internal/host/egress sends to
// Tether's egress proxy (internal/egressproxy), which decides each
// connection by the sandbox's rules.
//
// For now the rules come from the create's params (params.allow, and
// params.credentials with secrets by name from a SecretSource), kept in
// the sandbox's folder so that the next Tether serves them again; stored,
// editable rules are to replace them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
)

// networkAllowlist is the params.network of a sandbox that may reach only
// what params.allow names.
const networkAllowlist = "allowlist"

// MaxAllow is the most entries params.allow may hold.
const MaxAllow = egressproxy.MaxRules

// DefaultEgressPool is where allow-list sandboxes take their /30 links from
// unless EgressPool says otherwise: 16384 sandboxes at once.
const DefaultEgressPool = egress.DefaultPool

// EgressPool sets the IPv4 range each allow-list sandbox takes a /30 of
// for its link to the host (default DefaultEgressPool; egress.CheckPool
// says which are valid). It must not overlap a network the host uses (the
// mode is unavailable if it does); sandboxes never reach addresses inside
// it.
func EgressPool(pool netip.Prefix) Option {
	return func(p *Provider) { p.egress.Pool = pool }
}

// SecretSource gives the value of a tenant's secret by name, and whether
// it has one. It stands in for stored secrets until they exist.
type SecretSource func(ctx context.Context, tenant, name string) (string, error)

// A SecretSource's error is egressproxy.ErrNoSecret (wrapped) for a secret
// the tenant does not have; any other is its failure to look (its store
// unreachable), which a create may retry.

// MaxPolicies bounds params.policies.
const MaxPolicies = 16

// EgressRules is where the provider puts each allow-list sandbox's rules,
// from its create's params, when its proxy starts serving it, and takes
// them away when it stops: the Policy the proxy asks
// (egressproxy.MemoryPolicy), or one that keeps the rules in the registry
// and reads them from there, not the provider's (egresspolicy.Policy).
type EgressRules interface {
	Set(id string, r egressproxy.Rules)
	Delete(id string)
}

// WithEgressProxy makes the "allowlist" mode available through px (its
// ports, started by the caller), setting each sandbox's rules in rules
// from its create's params (the Policy px asks), with credentials' secrets
// from secrets (nil: params.credentials is refused). Without it the mode
// is unavailable.
func WithEgressProxy(px *egressproxy.Proxy, rules EgressRules, secrets SecretSource) Option {
	return func(p *Provider) { p.proxy, p.egressRules, p.secrets = px, rules, secrets }
}

// Credential is one entry of params.credentials: for requests to Host
// over HTTPS, the egress proxy adds Header with Format's "{secret}"
// replaced by the tenant's secret named Secret (or basic authentication
// of Username and it). The value never enters the sandbox.
type Credential struct {
	Host     string `json:"host"`
	Header   string `json:"header,omitempty"`
	Format   string `json:"format,omitempty"`
	Username string `json:"username,omitempty"`
	Secret   string `json:"secret"`
}

// Files of an allow-list sandbox in its folder: its rules as its create
// gave them, its CA, and its own /etc/hosts, /etc/resolv.conf and trust
// bundle.
const (
	egressParamsFile = "egress.json"
	egressCACert     = "egress-ca.pem"
	egressCAKey      = "egress-ca.key"
	egressHostsFile  = "hosts"
	egressResolvFile = "resolv.conf"
	egressBundleFile = "ca-certificates.crt"
	// trustBundle is where the sandbox's root keeps its trusted CAs.
	trustBundle = "/etc/ssl/certs/ca-certificates.crt"
)

func (p *Provider) networkNote() string {
	if p.hostNetwork {
		return "network: isolated (loopback only) by default; params.network=\"host\" shares the host's (enabled by the operator)"
	}
	return "network: isolated (loopback only); params.network=\"host\" is disabled by the operator"
}

// detectEgress checks the host for the allow-list mode and, where it
// runs, has the proxy refuse the pool and serve the sandboxes an earlier
// Tether made.
func (p *Provider) detectEgress() {
	p.egress.Detect(p.problem)
	if p.proxy != nil && p.egress.Problem() == "" {
		p.proxy.Deny(p.egress.Pool)
		p.reattachEgress()
	}
}

// egressProblem says why the allow-list mode is unavailable, or "".
func (p *Provider) egressProblem() string {
	switch {
	case p.egress.Problem() != "":
		return p.egress.Problem()
	case p.proxy == nil:
		return "no egress proxy runs in this Tether"
	}
	return ""
}

// egressNote is the allow-list mode's line in Info.
func (p *Provider) egressNote() string {
	if problem := p.egressProblem(); problem != "" {
		return "network \"allowlist\": unavailable on this host: " + problem
	}
	return fmt.Sprintf("network \"allowlist\": params.allow lists host names, wildcards (*.example.com: the names below it, not itself), IPv4 and IPv6 addresses or CIDRs, each with an optional :port, at most %d; "+
		"every TCP connection and DNS question of the sandbox goes through Tether's egress proxy, which decides TLS by its server name, HTTP by its Host and other TCP by its address, "+
		"resolves names itself and answers DNS for allowed names only; other UDP and IPv6 are refused; "+
		"the host itself, loopback, link-local and metadata addresses and other sandboxes are never reachable, private ranges only through entries that name an address inside them",
		MaxAllow)
}

// checkNetwork checks params.network, params.allow and
// params.credentials, including what the operator allows.
func (p *Provider) checkNetwork(prm Params) error {
	switch prm.Network {
	case "", "none":
	case networkAllowlist:
		_, err := p.parseEgress(prm)
		return err
	case "host":
		if !p.hostNetwork {
			return provider.Errorf(provider.CodeForbidden,
				"params.network \"host\" is disabled on this server: it would share the host's network, and every service on its loopback, with the sandbox; only the operator can enable it")
		}
	default:
		return provider.Errorf(provider.CodeInvalidRequest, "params.network must be \"none\", \"host\" or \"allowlist\" (got %q)", prm.Network)
	}
	if prm.Allow != nil || prm.Credentials != nil || prm.Policies != nil {
		return provider.Errorf(provider.CodeInvalidRequest, "params.allow, params.credentials and params.policies apply only to params.network \"allowlist\"")
	}
	return nil
}

// parseEgress parses an allow-list sandbox's rules, its credentials
// without their secrets.
func (p *Provider) parseEgress(prm Params) (egressproxy.Rules, error) {
	var rules egressproxy.Rules
	if problem := p.egressProblem(); problem != "" {
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.network \"allowlist\" is unavailable on this server: %s", problem)
	}
	if len(prm.Policies) > MaxPolicies {
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.policies has %d names; at most %d are allowed", len(prm.Policies), MaxPolicies)
	}
	for i, name := range prm.Policies {
		if !provider.ValidName(name) {
			return rules, provider.Errorf(provider.CodeInvalidRequest, "params.policies[%d]: %q is not a policy name", i, name)
		}
	}
	switch {
	case len(prm.Allow) == 0 && len(prm.Policies) == 0:
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.allow must list at least one host name, address or CIDR for params.network \"allowlist\" (or params.policies name a network policy)")
	case len(prm.Allow) > MaxAllow:
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.allow has %d entries; at most %d are allowed", len(prm.Allow), MaxAllow)
	}
	allow, err := p.proxy.Parser().Parse(prm.Allow)
	if err != nil {
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.allow%s", err)
	}
	rules.Allow = allow
	if len(prm.Credentials) > 0 && p.secrets == nil {
		return rules, provider.Errorf(provider.CodeInvalidRequest, "params.credentials: this server keeps no secrets (its operator has not set SECRETS_KEY)")
	}
	for i, c := range prm.Credentials {
		cred := egressproxy.Credential{Host: c.Host, Header: c.Header, Format: c.Format, Username: c.Username}
		if c.Secret == "" {
			return rules, provider.Errorf(provider.CodeInvalidRequest, "params.credentials[%d]: secret must name a secret", i)
		}
		if err := egressproxy.CheckCredential(cred); err != nil {
			return rules, provider.Errorf(provider.CodeInvalidRequest, "params.credentials[%d]: %s", i, err)
		}
		rules.Credentials = append(rules.Credentials, cred)
	}
	return rules, nil
}

// egressRulesFor are the rules of a tenant's allow-list sandbox with
// prm, secrets included. A credential whose secret is missing fails a
// create (strict); when a restarted Tether serves a sandbox again, it is
// suspended instead (the proxy refuses its host's requests).
func (p *Provider) egressRulesFor(ctx context.Context, tenant string, prm Params, strict bool) (egressproxy.Rules, error) {
	rules, err := p.parseEgress(prm)
	if err != nil {
		return rules, err
	}
	for i, c := range prm.Credentials {
		v, err := p.secrets(ctx, tenant, c.Secret)
		switch {
		case err != nil && !strict:
			rules.Credentials[i].Suspended = fmt.Sprintf("the secret %q could not be read", c.Secret)
		case errors.Is(err, egressproxy.ErrNoSecret):
			return rules, provider.Errorf(provider.CodeInvalidRequest, "params.credentials[%d]: no secret %q", i, c.Secret)
		case err != nil:
			return rules, provider.Retryable(fmt.Errorf("params.credentials[%d]: reading secret %q: %w", i, c.Secret, err))
		}
		rules.Credentials[i].Secret = v
	}
	return rules, nil
}

// egressError is err of the egress package as the sandbox API has it: a
// temporary failure is retryable.
func egressError(err error) error {
	if errors.Is(err, egress.ErrTemporary) {
		return provider.Retryable(err)
	}
	return err
}

// setupEgress gives an allow-list sandbox its network before its init
// starts (egress.Setup), its CA and its own /etc files, and has the proxy
// serve it. What it made is removed by Destroy (the caller destroys the
// sandbox when it fails).
func (p *Provider) setupEgress(ctx context.Context, id, tenant string, prm Params) error {
	if prm.Network != networkAllowlist {
		return nil
	}
	rules, err := p.egressRulesFor(ctx, tenant, prm, true)
	if err != nil {
		return err
	}
	dir := p.sandboxDir(id)
	saved, err := json.Marshal(Params{Allow: prm.Allow, Credentials: prm.Credentials, Policies: prm.Policies})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, egressParamsFile), saved, 0o600); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	tcp, dns := p.proxy.Ports()
	link, err := p.egress.Setup(ctx, id, egress.Ports{TCP: tcp, DNS: dns})
	if err != nil {
		return egressError(err)
	}
	ca, err := egressproxy.NewCA(id)
	if err != nil {
		return err
	}
	if err := p.writeEgressFiles(dir, prm, link, ca); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	p.egressRules.Set(id, rules)
	return p.proxy.Attach(egressproxy.Sandbox{ID: id, Addr: link.Sandbox, Gateway: link.Host, CA: ca})
}

// writeEgressFiles writes the sandbox's CA (its key for the host alone),
// its /etc/hosts and /etc/resolv.conf (the proxy's DNS at the host's end
// of its link), and its root's trust bundle with the CA added, if the
// root has one.
func (p *Provider) writeEgressFiles(dir string, prm Params, link egress.Link, ca *egressproxy.CA) error {
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	hosts := "# Written by Tether. Names resolve through Tether's egress proxy, for names the sandbox may reach.\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	resolv := fmt.Sprintf("# Written by Tether: its egress proxy answers for the names the sandbox may reach.\nnameserver %s\noptions timeout:2 attempts:2\n", link.Host)
	for name, content := range map[string][]byte{egressCAKey: key, egressCACert: ca.CertPEM(),
		egressHostsFile: []byte(hosts), egressResolvFile: []byte(resolv)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return err
		}
	}
	bundle, err := p.rootBundle(prm)
	if err != nil || bundle == nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, egressBundleFile), append(append(bundle, '\n'), ca.CertPEM()...), 0o600)
}

// rootBundle is the trust bundle of the sandbox's root (the host's, or
// its image's, read inside the image), nil if it has none.
func (p *Provider) rootBundle(prm Params) ([]byte, error) {
	if prm.Image == "" {
		b, err := os.ReadFile(trustBundle)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	img := p.images[prm.Image]
	if img == nil {
		return nil, fmt.Errorf("image %q is not registered", prm.Image)
	}
	root, err := os.OpenRoot(img.root)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Close() }()
	b, err := root.ReadFile(trustBundle[1:])
	if err != nil {
		return nil, nil // none, or none the image's own
	}
	return b, nil
}

// teardownEgress stops serving the sandbox and removes its network.
func (p *Provider) teardownEgress(ctx context.Context, id string) error {
	if p.proxy != nil {
		p.proxy.Detach(id)
		p.egressRules.Delete(id)
	}
	return p.egress.Teardown(ctx, id)
}

// reattachEgress serves again the allow-list sandboxes an earlier Tether
// made in the state folder: their tables now send their traffic to this
// proxy's ports, with the rules their creates gave. A sandbox that cannot
// be served is left without a way out until it is destroyed.
func (p *Provider) reattachEgress() {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tcp, dns := p.proxy.Ports()
	for _, e := range entries {
		id := e.Name()
		if !provider.ValidSandboxID(id) {
			continue
		}
		_ = p.reattach(ctx, id, egress.Ports{TCP: tcp, DNS: dns})
	}
}

func (p *Provider) reattach(ctx context.Context, id string, ports egress.Ports) error {
	dir := p.sandboxDir(id)
	saved, err := os.ReadFile(filepath.Join(dir, egressParamsFile))
	if err != nil {
		return err
	}
	var prm Params
	if err := json.Unmarshal(saved, &prm); err != nil {
		return err
	}
	prm.Network = networkAllowlist
	m, err := p.readMeta(id)
	if err != nil {
		return err
	}
	rules, err := p.egressRulesFor(ctx, m.Tenant, prm, false)
	if err != nil {
		return err
	}
	certPEM, err1 := os.ReadFile(filepath.Join(dir, egressCACert))
	keyPEM, err2 := os.ReadFile(filepath.Join(dir, egressCAKey))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	ca, err := egressproxy.LoadCA(certPEM, keyPEM)
	if err != nil {
		return err
	}
	link, err := egress.SandboxLink(id)
	if err != nil {
		return err
	}
	if err := p.egress.Redirect(ctx, id, link, ports); err != nil {
		return err
	}
	p.egressRules.Set(id, rules)
	return p.proxy.Attach(egressproxy.Sandbox{ID: id, Addr: link.Sandbox, Gateway: link.Host, CA: ca})
}

// egressFiles are an allow-list sandbox's own files in its folder (next
// to workspace) and where they go in the sandbox; none for other
// sandboxes. The trust bundle goes over the root's, if the sandbox has
// one of its own.
func egressFiles(workspace string, prm Params) (files, dests []string) {
	if prm.Network != networkAllowlist {
		return nil, nil
	}
	dir := filepath.Dir(workspace)
	files = []string{filepath.Join(dir, egressHostsFile), filepath.Join(dir, egressResolvFile)}
	dests = []string{"/etc/hosts", "/etc/resolv.conf"}
	if bundle := filepath.Join(dir, egressBundleFile); fileExists(bundle) {
		files, dests = append(files, bundle), append(dests, trustBundle)
	}
	return files, dests
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// startSandbox runs start, which starts the sandbox's bwrap, on an OS
// thread of its own (hostos.OnOwnThread): an allow-list sandbox's in the
// network namespace made for it.
func startSandbox(id string, prm Params, start func() error) error {
	if prm.Network != networkAllowlist {
		return hostos.OnOwnThread(start)
	}
	return egress.InNamespace(id, start)
}
