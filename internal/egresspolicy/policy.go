// Package egresspolicy gives the egress proxy (package egressproxy) the
// sandboxes' rules from the registry, and writes what it decided into
// their activity.
//
// The rules of an allow-list sandbox are data (domain.SandboxNetwork): its
// create's params until an edit (PATCH /v1/sandboxes/{id}/network)
// replaces them. Policy keeps those of the sandboxes this replica's proxy
// serves in memory, so the proxy's questions are answered at once, and
// reloads them when it hears an edit announced (any replica's, through
// the notifier), for every sandbox when the notifier reconnects, and on a
// timer besides: an edit is in force within a second, and holds across
// pause and resume, a restart of Tether and a move between nodes, because
// it is the registry's and not this process's.
//
// A credential names a tenant's secret, which Policy opens (package
// secretbox) when it loads the rules; the value stays in this process.
// It is in force only while its sandbox is ready and before LiveUntil
// (the earlier of the sandbox's expiry and its owner's lease): past that
// the proxy refuses the sandbox's requests to the credential's host
// rather than send them without it, at once, whether or not the janitor
// has ended the sandbox yet. The deadlines of sandboxes with credentials
// are reloaded every second, so a renewed lease keeps them working, and a
// deadline that passes is checked against the registry once more before
// a request is refused (a renewal may have landed since the last load).
package egresspolicy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/egressproxy"
)

// Registry is what Policy reads: the rules of sandboxes, and the sealed
// values of the secrets their credentials name (a *store.Store).
type Registry interface {
	SandboxNetworks(ctx context.Context, ids []string) ([]domain.SandboxNetwork, error)
	SealedSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error)
}

// Opener opens sealed secrets (a *secretbox.Box).
type Opener interface {
	Open(tenant, name string, sealed []byte) ([]byte, error)
}

// Changes announces the registry's changes (a *notify.Notifier).
type Changes interface {
	Subscribe() (<-chan domain.Change, func())
}

// Timings of Policy's reloads.
const (
	// credentialReload is how often the rules of sandboxes with
	// credentials are reloaded: a renewed lease or an edited secret is
	// seen within it.
	credentialReload = time.Second
	// fullReload is how often every sandbox's rules are reloaded, in case
	// an announcement was lost.
	fullReload = 30 * time.Second
	// recheck is how long after its last load a sandbox whose credentials
	// seem lapsed is read again before a request is refused.
	recheck = 200 * time.Millisecond
	// loadTimeout bounds a load the proxy waits for.
	loadTimeout = 2 * time.Second
)

// Config is a Policy's configuration.
type Config struct {
	Registry Registry
	// Secrets opens the secrets credentials name; nil: no secrets
	// (credentials are then never in force).
	Secrets Opener
	// Parser gives the parser of allow lists as the proxy's operator
	// allows (egressproxy.Proxy.Parser).
	Parser func() egressproxy.Parser
	Log    *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Policy is an egressproxy.Policy over the registry, and where the local
// provider puts and takes away the sandboxes its proxy serves (Set,
// Delete).
type Policy struct {
	cfg Config

	mu      sync.Mutex
	entries map[string]*entry
	// reads numbers the registry's reads, so that one that started
	// before another already applied is not applied over it.
	reads uint64
}

// entry is what Policy holds of one sandbox the proxy serves.
type entry struct {
	// loaded is false until the registry has answered: the sandbox then
	// has no rules at all.
	loaded bool
	// rules are the registry's, credentials' secrets opened; ready and
	// liveUntil say whether the credentials are in force.
	rules     egressproxy.Rules
	ready     bool
	liveUntil time.Time
	loadedAt  time.Time
	// read is the number of the read applied last.
	read uint64
}

// New returns a Policy; Run keeps it current.
func New(cfg Config) *Policy {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Policy{cfg: cfg, entries: map[string]*entry{}}
}

// Set starts serving sandbox id. The rules the provider read from its
// create's params are not used: the registry's are (the first lookup
// loads them), which an edit may have changed since.
func (p *Policy) Set(id string, _ egressproxy.Rules) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[id] == nil {
		p.entries[id] = &entry{}
	}
}

// Delete stops serving sandbox id.
func (p *Policy) Delete(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, id)
}

// Lookup implements egressproxy.Policy: the sandbox's rules from memory,
// loaded first if they have not been yet, or if its credentials seem to
// have lapsed since the last load.
func (p *Policy) Lookup(ctx context.Context, id string) (egressproxy.Rules, bool) {
	now := p.cfg.Now()
	p.mu.Lock()
	e := p.entries[id]
	stale := e != nil && (!e.loaded ||
		len(e.rules.Credentials) > 0 && e.ready && !now.Before(e.liveUntil) && now.Sub(e.loadedAt) >= recheck)
	p.mu.Unlock()
	if e == nil {
		return egressproxy.Rules{}, false
	}
	if stale {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		err := p.load(ctx, []string{id})
		cancel()
		if err != nil {
			p.cfg.Log.Warn("egress rules not reloaded", "sandbox", id, "err", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e = p.entries[id]
	switch {
	case e == nil:
		return egressproxy.Rules{}, false
	case !e.loaded:
		// The registry has not answered yet: nothing, rather than the
		// create's rules, which an edit may have narrowed since.
		return egressproxy.Rules{}, true
	}
	rules := e.rules
	if why := lapsed(e, now); why != "" {
		rules.Credentials = suspend(rules.Credentials, why)
	}
	return rules, true
}

// lapsed says why e's credentials are not in force at now, or "".
func lapsed(e *entry, now time.Time) string {
	switch {
	case !e.ready:
		return "the sandbox is not ready"
	case !now.Before(e.liveUntil):
		return "the sandbox's lease has lapsed (its owner's, or its own expiry)"
	}
	return ""
}

// suspend returns copies of creds suspended for why, their secrets
// dropped.
func suspend(creds []egressproxy.Credential, why string) []egressproxy.Credential {
	out := make([]egressproxy.Credential, len(creds))
	for i, c := range creds {
		c.Secret, c.Suspended = "", cmp.Or(c.Suspended, why)
		out[i] = c
	}
	return out
}

// Run keeps the rules current until ctx is done: reloads on the
// announcements of edits and ends, and on timers.
func (p *Policy) Run(ctx context.Context, changes Changes) {
	var notes <-chan domain.Change
	if changes != nil {
		ch, cancel := changes.Subscribe()
		defer cancel()
		notes = ch
	}
	creds := time.NewTicker(credentialReload)
	defer creds.Stop()
	full := time.NewTicker(fullReload)
	defer full.Stop()
	for {
		var ids []string
		select {
		case <-ctx.Done():
			return
		case c := <-notes:
			ids = p.affected(c)
		case <-creds.C:
			ids = p.served(func(e *entry) bool { return len(e.rules.Credentials) > 0 })
		case <-full.C:
			ids = p.served(nil)
		}
		if len(ids) == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, loadTimeout)
		if err := p.load(lctx, ids); err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("egress rules not reloaded", "sandboxes", len(ids), "err", err)
		}
		cancel()
	}
}

// affected are the served sandboxes an announcement concerns: an edit's
// or a state change's sandbox, or all of them for the empty change the
// notifier sends after it reconnects.
func (p *Policy) affected(c domain.Change) []string {
	if c.ID == "" {
		return p.served(nil)
	}
	if c.State == domain.SnapshotChanged {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[c.ID] == nil {
		return nil
	}
	return []string{c.ID}
}

// served are the ids of the sandboxes served whose entries keep (all if
// keep is nil).
func (p *Policy) served(keep func(*entry) bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, e := range p.entries {
		if keep == nil || keep(e) {
			ids = append(ids, id)
		}
	}
	return ids
}

// maxLoad bounds the sandboxes one query reloads.
const maxLoad = 500

// load reloads the rules of the sandboxes ids from the registry. A
// sandbox the registry no longer has keeps no rules at all; one whose
// rules no longer parse keeps none either (they were checked when set).
func (p *Policy) load(ctx context.Context, ids []string) error {
	var errs []error
	for chunk := range slices.Chunk(ids, maxLoad) {
		p.mu.Lock()
		p.reads++
		read := p.reads
		p.mu.Unlock()
		nets, err := p.cfg.Registry.SandboxNetworks(ctx, chunk)
		if err != nil {
			return fmt.Errorf("load egress rules: %w", err)
		}
		found := make(map[string]loaded, len(nets))
		failed := map[string]bool{}
		for _, n := range nets {
			l, err := p.compile(ctx, n)
			if err != nil {
				errs = append(errs, fmt.Errorf("sandbox %s: %w", n.SandboxID, err))
				failed[n.SandboxID] = true
				continue
			}
			found[n.SandboxID] = l
		}
		now := p.cfg.Now()
		p.mu.Lock()
		for _, id := range chunk {
			e := p.entries[id]
			if e == nil || e.read > read || (failed[id] && e.loaded) {
				// Deleted meanwhile, or a later read applied already, or
				// this one failed (what was loaded before stays).
				continue
			}
			l := found[id] // zero (no rules, nothing in force) if gone or failed
			e.loaded, e.rules, e.ready, e.liveUntil, e.loadedAt, e.read = true, l.rules, l.ready, l.liveUntil, now, read
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// loaded is a sandbox's rules as load keeps them.
type loaded struct {
	rules     egressproxy.Rules
	ready     bool
	liveUntil time.Time
}

// compile parses n's rules and opens its credentials' secrets. A
// credential whose secret is missing or does not open is suspended, not
// dropped: the proxy refuses its host's requests rather than send them
// without it.
func (p *Policy) compile(ctx context.Context, n domain.SandboxNetwork) (loaded, error) {
	out := loaded{ready: n.State == domain.StateReady, liveUntil: n.LiveUntil}
	if n.Mode != domain.NetworkAllowlist {
		return out, nil
	}
	parser := p.cfg.Parser()
	allow, err := parser.Parse(n.Allow)
	if err != nil {
		return out, fmt.Errorf("allow: %w", err)
	}
	out.rules.Allow = allow
	creds := n.Credentials
	hosts := map[string]bool{}
	for _, c := range creds {
		hosts[c.Host] = true
	}
	// The attached policies' rules join the sandbox's own, named by their
	// policy in the records; their credentials too, for hosts the
	// sandbox's own do not cover. A policy whose rules no longer parse
	// (the operator's settings changed) adds nothing.
	for _, pol := range n.Attached {
		rules, err := parser.Parse(pol.Allow)
		if err != nil {
			p.cfg.Log.Warn("network policy's rules do not parse", "tenant", n.Tenant, "policy", pol.Name, "err", err)
			continue
		}
		for _, r := range rules {
			r.Text += " (policy " + pol.Name + ")"
			out.rules.Allow = append(out.rules.Allow, r)
		}
		for _, c := range pol.Credentials {
			if !hosts[c.Host] {
				hosts[c.Host] = true
				creds = append(creds, c)
			}
		}
	}
	if len(creds) == 0 {
		return out, nil
	}
	values, err := p.secrets(ctx, n.Tenant, creds)
	if err != nil {
		return out, err
	}
	for _, c := range creds {
		cred := egressproxy.Credential{Host: c.Host, Header: c.Header, Format: c.Format, Username: c.Username}
		v, ok := values[c.Secret]
		switch {
		case p.cfg.Secrets == nil:
			cred.Suspended = "this server keeps no secrets (SECRETS_KEY is not set)"
		case !ok:
			cred.Suspended = fmt.Sprintf("the secret %q does not exist", c.Secret)
		default:
			cred.Secret = v
		}
		out.rules.Credentials = append(out.rules.Credentials, cred)
	}
	return out, nil
}

// secrets opens the secrets n's credentials name; one that does not open
// is left out (and logged, never its value).
func (p *Policy) secrets(ctx context.Context, tenant string, creds []domain.NetworkCredential) (map[string]string, error) {
	if p.cfg.Secrets == nil {
		return nil, nil
	}
	names := map[string]bool{}
	for _, c := range creds {
		names[c.Secret] = true
	}
	sealed, err := p.cfg.Registry.SealedSecrets(ctx, tenant, slices.Collect(maps.Keys(names)))
	if err != nil {
		return nil, fmt.Errorf("load secrets: %w", err)
	}
	out := make(map[string]string, len(sealed))
	for name, s := range sealed {
		v, err := p.cfg.Secrets.Open(tenant, name, s)
		if err != nil {
			p.cfg.Log.Error("secret does not open", "tenant", tenant, "secret", name, "err", err)
			continue
		}
		out[name] = string(v)
	}
	return out, nil
}

// Secret returns the value of the tenant's secret name: the local
// provider's check, at create, that a credential names a secret.
// egressproxy.ErrNoSecret is wrapped for one the tenant lacks, or that does not
// open; another error is the registry's.
func (p *Policy) Secret(ctx context.Context, tenant, name string) (string, error) {
	if p.cfg.Secrets == nil {
		return "", fmt.Errorf("this server keeps no secrets: %w", egressproxy.ErrNoSecret)
	}
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	sealed, err := p.cfg.Registry.SealedSecrets(ctx, tenant, []string{name})
	if err != nil {
		return "", err
	}
	if sealed[name] == nil {
		return "", egressproxy.ErrNoSecret
	}
	v, err := p.cfg.Secrets.Open(tenant, name, sealed[name])
	if err != nil {
		return "", fmt.Errorf("%w: %w", egressproxy.ErrNoSecret, err)
	}
	return string(v), nil
}
