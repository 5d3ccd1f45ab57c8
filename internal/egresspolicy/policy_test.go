package egresspolicy_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/egresspolicy"
	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/secretbox"
)

// registry is a registry in memory, counting its reads.
type registry struct {
	mu      sync.Mutex
	nets    map[string]domain.SandboxNetwork
	secrets map[string][]byte // tenant/name
	reads   int
}

func (r *registry) SandboxNetworks(_ context.Context, ids []string) ([]domain.SandboxNetwork, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	var out []domain.SandboxNetwork
	for _, id := range ids {
		if n, ok := r.nets[id]; ok {
			out = append(out, n)
		}
	}
	return out, nil
}

func (r *registry) SealedSecrets(_ context.Context, tenant string, names []string) (map[string][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]byte{}
	for _, n := range names {
		if v, ok := r.secrets[tenant+"/"+n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

func (r *registry) set(n domain.SandboxNetwork) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nets[n.SandboxID] = n
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type fixture struct {
	reg    *registry
	clock  *clock
	policy *egresspolicy.Policy
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	box, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{reg: &registry{nets: map[string]domain.SandboxNetwork{}, secrets: map[string][]byte{
		"acme/token": box.Seal("acme", "token", []byte("s3cret")),
	}}, clock: &clock{now: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}}
	f.policy = egresspolicy.New(egresspolicy.Config{Registry: f.reg, Secrets: box,
		Parser: func() egressproxy.Parser { return egressproxy.Parser{} }, Now: f.clock.Now})
	return f
}

func (f *fixture) network(allow ...string) domain.SandboxNetwork {
	return domain.SandboxNetwork{SandboxID: "sbx-1", Tenant: "acme", Provider: "local", State: domain.StateReady,
		Mode: domain.NetworkAllowlist, Allow: allow, LiveUntil: f.clock.Now().Add(time.Minute),
		Credentials: []domain.NetworkCredential{{Host: "api.example", Header: "Authorization", Format: "Bearer {secret}", Secret: "token"}}}
}

func texts(r egressproxy.Rules) []string {
	var out []string
	for _, rule := range r.Allow {
		out = append(out, rule.Text)
	}
	return out
}

func TestLookupServesOnlyWhatWasSet(t *testing.T) {
	f := newFixture(t)
	f.reg.set(f.network("pypi.org"))
	if _, ok := f.policy.Lookup(t.Context(), "sbx-1"); ok {
		t.Fatal("rules of a sandbox the provider never set")
	}
	f.policy.Set("sbx-1", egressproxy.Rules{})
	rules, ok := f.policy.Lookup(t.Context(), "sbx-1")
	if !ok || len(texts(rules)) != 1 || texts(rules)[0] != "pypi.org" {
		t.Fatalf("Lookup = %v, %v; want the registry's pypi.org", texts(rules), ok)
	}
	if len(rules.Credentials) != 1 || rules.Credentials[0].Secret != "s3cret" || rules.Credentials[0].Suspended != "" {
		t.Fatalf("credentials = %+v; want the opened secret, in force", rules.Credentials)
	}
	f.policy.Delete("sbx-1")
	if _, ok := f.policy.Lookup(t.Context(), "sbx-1"); ok {
		t.Fatal("rules of a deleted sandbox")
	}
}

func TestCredentialsLapseWithTheLease(t *testing.T) {
	f := newFixture(t)
	f.reg.set(f.network("api.example"))
	f.policy.Set("sbx-1", egressproxy.Rules{})
	if r, _ := f.policy.Lookup(t.Context(), "sbx-1"); r.Credentials[0].Suspended != "" {
		t.Fatalf("suspended while live: %+v", r.Credentials)
	}
	// The lease passes, and the registry has no renewal: suspended, the
	// secret dropped, after one more read of the registry.
	reads := f.reg.reads
	f.clock.advance(time.Minute + time.Second)
	r, _ := f.policy.Lookup(t.Context(), "sbx-1")
	if c := r.Credentials[0]; c.Suspended == "" || c.Secret != "" {
		t.Fatalf("after the lease, credential = %+v; want suspended without its secret", c)
	}
	if f.reg.reads != reads+1 {
		t.Fatalf("the registry was read %d times before refusing; want once", f.reg.reads-reads)
	}
	// A renewal that landed: the recheck finds it.
	n := f.network("api.example")
	n.LiveUntil = f.clock.Now().Add(time.Minute)
	f.reg.set(n)
	f.clock.advance(time.Second)
	if r, _ := f.policy.Lookup(t.Context(), "sbx-1"); r.Credentials[0].Suspended != "" || r.Credentials[0].Secret != "s3cret" {
		t.Fatalf("after a renewal, credential = %+v; want in force", r.Credentials[0])
	}
	// A sandbox that is not ready has none in force.
	n.State = domain.StatePaused
	f.reg.set(n)
	f.clock.advance(2 * time.Minute)
	if r, _ := f.policy.Lookup(t.Context(), "sbx-1"); r.Credentials[0].Suspended == "" {
		t.Fatalf("a paused sandbox's credential is in force: %+v", r.Credentials[0])
	}
}

func TestMissingSecretSuspends(t *testing.T) {
	f := newFixture(t)
	n := f.network("api.example")
	n.Credentials[0].Secret = "gone"
	f.reg.set(n)
	f.policy.Set("sbx-1", egressproxy.Rules{})
	r, ok := f.policy.Lookup(t.Context(), "sbx-1")
	if !ok || len(r.Credentials) != 1 || r.Credentials[0].Suspended == "" || r.Credentials[0].Secret != "" {
		t.Fatalf("credential of a missing secret = %+v; want kept and suspended", r.Credentials)
	}
}

// changes is a notifier of the test's own.
type changes struct{ ch chan domain.Change }

func (c changes) Subscribe() (<-chan domain.Change, func()) { return c.ch, func() {} }

func TestRunReloadsOnAnEdit(t *testing.T) {
	f := newFixture(t)
	f.reg.set(f.network("pypi.org"))
	f.policy.Set("sbx-1", egressproxy.Rules{})
	if r, _ := f.policy.Lookup(t.Context(), "sbx-1"); texts(r)[0] != "pypi.org" {
		t.Fatalf("first rules = %v", texts(r))
	}
	ch := changes{ch: make(chan domain.Change)}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { f.policy.Run(ctx, ch) })
	defer func() { cancel(); wg.Wait() }()

	f.reg.set(f.network("other.test"))
	ch.ch <- domain.Change{ID: "sbx-1", State: domain.NetworkChanged}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if r, _ := f.policy.Lookup(t.Context(), "sbx-1"); len(texts(r)) == 1 && texts(r)[0] == "other.test" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the edit was not loaded after its announcement")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSeedUntilTheRegistryAnswers(t *testing.T) {
	f := newFixture(t)
	seed, err := egressproxy.Parser{}.Parse([]string{"seed.example"})
	if err != nil {
		t.Fatal(err)
	}
	// The registry lacks the sandbox: after the load it has no rules at
	// all (not the seed's).
	f.policy.Set("sbx-1", egressproxy.Rules{Allow: seed, Credentials: []egressproxy.Credential{{Host: "x", Secret: "leak"}}})
	r, ok := f.policy.Lookup(t.Context(), "sbx-1")
	if !ok || len(r.Allow) != 0 || len(r.Credentials) != 0 {
		t.Fatalf("rules of a sandbox the registry lacks = %+v, %v; want served with none", r, ok)
	}
}
