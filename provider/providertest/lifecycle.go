package providertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

func (s *suite) testCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	spec := provider.CreateSpec{SandboxID: provider.NewSandboxID(), Tenant: "providertest", Labels: map[string]string{"suite": "providertest"}}
	first := s.create(t, p, spec)
	if first.ProviderID == "" || first.CreatedAt.IsZero() || first.Defunct {
		t.Errorf("Create = %+v: want a provider id, a creation time and not defunct", first)
	}
	again, err := p.Create(s.ctx(t), spec)
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if again.SandboxID != first.SandboxID || again.ProviderID != first.ProviderID {
		t.Errorf("second Create = %+v, want the first one's resource %+v", again, first)
	}
	inv := s.list(t, p)
	if len(inv) != 1 {
		t.Errorf("List after two creates of one sandbox has %d entries: %+v", len(inv), inv)
	}
	if got, ok := inv[spec.SandboxID]; !ok || got.ProviderID != first.ProviderID || got.Defunct {
		t.Errorf("List entry = %+v (listed %v), want %+v", got, ok, first)
	}
}

// testConcurrentCreates: two executors may call Create for one sandbox at
// once (one whose lease was taken mid-call, and the new holder).
func (s *suite) testConcurrentCreates(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	spec := provider.CreateSpec{SandboxID: provider.NewSandboxID(), Tenant: "providertest"}
	const n = 4
	results := make([]provider.Resource, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = p.Create(s.ctx(t), spec) })
	}
	wg.Wait()
	t.Cleanup(func() { s.destroy(t, p, spec.SandboxID) })
	for i := range n {
		if errs[i] != nil {
			t.Errorf("concurrent Create %d: %v", i, errs[i])
		} else if results[i].ProviderID != results[0].ProviderID {
			t.Errorf("concurrent creates returned resources %q and %q for one sandbox", results[0].ProviderID, results[i].ProviderID)
		}
	}
	if inv := s.list(t, p); len(inv) != 1 {
		t.Errorf("List after concurrent creates of one sandbox: %d entries, want 1: %+v", len(inv), inv)
	}
}

func (s *suite) testDestroyIsIdempotent(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	if err := p.Destroy(s.ctx(t), provider.NewSandboxID()); err != nil {
		t.Errorf("Destroy of a sandbox the provider never made: %v", err)
	}
	kept := s.create(t, p, provider.CreateSpec{})
	res := s.create(t, p, provider.CreateSpec{})
	for i := range 2 {
		if err := p.Destroy(s.ctx(t), res.SandboxID); err != nil {
			t.Errorf("Destroy %d: %v", i+1, err)
		}
	}
	inv := s.list(t, p)
	if _, ok := inv[res.SandboxID]; ok {
		t.Errorf("a destroyed sandbox is still listed: %+v", inv[res.SandboxID])
	}
	if _, ok := inv[kept.SandboxID]; !ok || len(inv) != 1 {
		t.Errorf("Destroy of one sandbox changed the others: List = %+v", inv)
	}
}

// testListAfterRestart: a new provider value over the same state (a
// restarted Tether, another replica) lists what the first made, and one
// over other state does not.
func (s *suite) testListAfterRestart(t *testing.T) {
	t.Parallel()
	p, state := s.open(t)
	res := s.create(t, p, provider.CreateSpec{})
	other, _ := s.open(t)
	otherRes := s.create(t, other, provider.CreateSpec{})

	restarted := s.h.Open(t, state)
	inv := s.list(t, restarted)
	if got, ok := inv[res.SandboxID]; len(inv) != 1 || !ok || got.ProviderID != res.ProviderID || got.Defunct {
		t.Fatalf("List after a restart = %+v, want exactly %+v", inv, res)
	}
	if _, ok := s.list(t, other)[res.SandboxID]; ok {
		t.Error("a provider over other state lists this state's sandbox")
	}
	if _, ok := inv[otherRes.SandboxID]; ok {
		t.Error("the restarted provider lists another state's sandbox")
	}
	again, err := restarted.Create(s.ctx(t), provider.CreateSpec{SandboxID: res.SandboxID, Tenant: "providertest"})
	if err != nil || again.ProviderID != res.ProviderID {
		t.Errorf("Create after a restart = %+v, %v; want the existing %s", again, err, res.ProviderID)
	}
	if err := restarted.Destroy(s.ctx(t), res.SandboxID); err != nil {
		t.Fatalf("Destroy after a restart: %v", err)
	}
	if inv := s.list(t, p); len(inv) != 0 {
		t.Errorf("the first provider still lists %+v after the restarted one destroyed it", inv)
	}
	if _, ok := s.list(t, other)[otherRes.SandboxID]; !ok {
		t.Error("destroying in one state removed another state's sandbox")
	}
}

func (s *suite) testDefunct(t *testing.T) {
	if s.h.Kill == nil {
		t.Skip("no Harness.Kill: the provider's test cannot end a sandbox behind its back")
	}
	t.Parallel()
	p, _ := s.open(t)
	res := s.create(t, p, provider.CreateSpec{})
	alive := s.create(t, p, provider.CreateSpec{})
	s.h.Kill(t, res)
	deadline := time.Now().Add(30 * time.Second)
	for {
		inv := s.list(t, p)
		got, ok := inv[res.SandboxID]
		if !ok {
			t.Fatalf("a killed sandbox whose remains are held is not listed: %+v", inv)
		}
		if got.Defunct {
			if inv[alive.SandboxID].Defunct {
				t.Error("the sandbox beside the killed one is listed defunct too")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a killed sandbox is not listed defunct within 30s: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Destroy(s.ctx(t), res.SandboxID); err != nil {
		t.Fatalf("Destroy of a defunct sandbox: %v", err)
	}
	if _, ok := s.list(t, p)[res.SandboxID]; ok {
		t.Error("a destroyed defunct sandbox is still listed")
	}
}

// testConcurrency runs whole lifecycles on distinct sandboxes at once.
func (s *suite) testConcurrency(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	execer, _ := p.(provider.Execer)
	var wg sync.WaitGroup
	errs := make(chan error, s.h.Parallel)
	for range s.h.Parallel {
		wg.Go(func() { errs <- s.lifecycle(t, p, execer) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if inv := s.list(t, p); len(inv) != 0 {
		t.Errorf("List after every sandbox was destroyed: %+v", inv)
	}
}

// lifecycle creates a sandbox, runs a command in it if it can, lists it
// and destroys it.
func (s *suite) lifecycle(t *testing.T, p provider.Provider, execer provider.Execer) error {
	id := provider.NewSandboxID()
	if _, err := p.Create(s.ctx(t), provider.CreateSpec{SandboxID: id, Tenant: "providertest", Env: map[string]string{"ID": id}}); err != nil {
		return fmt.Errorf("create %s: %w", id, err)
	}
	if execer != nil {
		res, err := execer.Exec(s.ctx(t), id, provider.ExecRequest{Command: `printf %s "$ID"`, Timeout: s.h.Timeout, MaxOutput: 4096})
		if err != nil || res.Output != id || res.ExitCode != 0 {
			return fmt.Errorf("exec in %s: %+v, %w", id, res, err)
		}
	}
	inv, err := p.List(s.ctx(t))
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	listed := false
	for _, r := range inv {
		listed = listed || r.SandboxID == id
	}
	if !listed {
		return fmt.Errorf("sandbox %s is not listed while it lives", id)
	}
	if err := p.Destroy(s.ctx(t), id); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	return nil
}
