package providertest

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The Watcher's contract: Lookup tells a live resource from a missing one,
// and Watch reports a sandbox that died behind the provider's back
// (Harness.Kill) at once, Defunct set.

func (s *suite) testWatcher(t *testing.T) {
	skipWithout[provider.Watcher](t, s, "Watcher")
	t.Parallel()
	t.Run("Lookup", s.testLookup)
	t.Run("WatchDefunct", s.testWatchDefunct)
}

func (s *suite) testLookup(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	w := capability[provider.Watcher](t, p, "Watcher")
	res := s.create(t, p, provider.CreateSpec{})
	got, found, err := w.Lookup(s.ctx(t), res.SandboxID)
	if err != nil || !found || got.SandboxID != res.SandboxID || got.Defunct {
		t.Errorf("Lookup of a live sandbox: %+v, found %v, err %v", got, found, err)
	}
	if _, found, err := w.Lookup(s.ctx(t), provider.NewSandboxID()); err != nil || found {
		t.Errorf("Lookup of a sandbox never made: found %v, err %v", found, err)
	}
	s.destroy(t, p, res.SandboxID)
	if got, found, err := w.Lookup(s.ctx(t), res.SandboxID); err != nil || (found && !got.Defunct) {
		t.Errorf("Lookup of a destroyed sandbox: %+v, found %v, err %v", got, found, err)
	}
}

func (s *suite) testWatchDefunct(t *testing.T) {
	if s.h.Kill == nil {
		t.Skip("no Harness.Kill: the provider's test cannot end a sandbox behind its back")
	}
	t.Parallel()
	p, _ := s.open(t)
	w := capability[provider.Watcher](t, p, "Watcher")
	res := s.create(t, p, provider.CreateSpec{})
	ctx := s.ctx(t)
	events := w.Watch(ctx)
	time.Sleep(time.Second) // the watch starts from what is there now
	s.h.Kill(t, res)
	for {
		select {
		case got, ok := <-events:
			if !ok {
				t.Fatal("Watch closed its channel before its context ended")
			}
			if got.SandboxID == res.SandboxID && got.Defunct {
				return
			}
		case <-ctx.Done():
			t.Fatalf("Watch did not report the killed sandbox %s within %s", res.SandboxID, s.h.Timeout)
		}
	}
}

// A HostBound provider's sandboxes belong to the state they were made
// in (the node): a provider over the same state (the node's restarted
// process) reaches and destroys them, and one over another state (another
// node) does not list them.

func (s *suite) testHostBound(t *testing.T) {
	if !provider.IsHostBound(s.probe) {
		t.Skip("the provider is not host-bound")
	}
	t.Parallel()
	p, state := s.open(t)
	res := s.create(t, p, provider.CreateSpec{})
	other, _ := s.open(t)
	if !provider.IsHostBound(other) {
		t.Error("HostBound differs between two providers of one kind")
	}
	if _, seen := s.list(t, other)[res.SandboxID]; seen {
		t.Error("a provider over another state (another node) lists the sandbox")
	}
	again := s.h.Open(t, state)
	if e, ok := again.(provider.Execer); ok {
		if out := s.run(t, e, res.SandboxID, provider.ExecRequest{Command: "echo here"}); out.Output != "here\n" {
			t.Errorf("a restarted provider's exec in the sandbox: %+v", out)
		}
	}
	s.destroy(t, again, res.SandboxID)
	if _, seen := s.list(t, p)[res.SandboxID]; seen {
		t.Error("a sandbox the restarted provider destroyed is still listed by the first")
	}
}
