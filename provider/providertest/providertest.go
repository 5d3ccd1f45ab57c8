// Package providertest is the conformance suite of Tether's provider SDK:
// the behaviour Tether relies on from every provider, checked against the
// real thing.
//
// A provider's own test calls Run with a Harness that makes fresh state
// for the provider and opens providers over it:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			NewState: func(t *testing.T) string { return t.TempDir() },
//			Open: func(t *testing.T, state string) provider.Provider {
//				p, err := myprovider.New(state)
//				if err != nil {
//					t.Fatal(err)
//				}
//				return p
//			},
//			BadParams: []string{`{"size":"huge"}`},
//		})
//	}
//
// Run checks the core contract (create and destroy idempotent, listing
// after a restart, params validation, concurrency) and, for each optional
// capability the provider implements (Execer, StreamExecer, Files,
// Archives, Pauser, Snapshotter, MemorySnapshotter, PortDialer, Processes, PTY, FileWatcher,
// Watcher, HostBound), its semantics and error codes: a capability
// claimed is a capability tested. The subtests of a capability the
// provider lacks are skipped, and so are the defunct checks without a
// Kill hook; a PortDialer without Harness.Ports fails. Run it with -race:
// several subtests call the provider from many goroutines at once.
package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// Harness is what the suite needs from the provider under test.
type Harness struct {
	// NewState makes fresh state for the provider, shared with no other
	// state: a folder, a namespace, an installation id. It returns its
	// name, for Open, and removes it in t's cleanup.
	NewState func(t *testing.T) string
	// Open returns a provider over state. Two calls with one state give two
	// provider values over the same resources, as two Tether processes, or
	// one that restarted, have. The provider must be available.
	Open func(t *testing.T, state string) provider.Provider
	// Kill ends what runs for res behind the provider's back (a crash, an
	// OOM kill, a pod deleted by hand) and leaves its remains, so that List
	// reports it Defunct. Nil skips the Defunct subtest.
	Kill func(t *testing.T, res provider.Resource)
	// BadParams are create params the provider refuses with
	// CodeInvalidRequest. Give at least one if the provider takes params.
	BadParams []string
	// SnapshotParams are the create params of a sandbox the provider
	// can snapshot (local's {"workspace_mb":64}); "" for the defaults.
	SnapshotParams string
	// Ports says how a sandbox serves a port, for a PortDialer: required
	// when the provider dials ports.
	Ports *PortServer
	// ProcessLimit is how many processes the providers Open returns keep
	// per sandbox (Processes); 0 skips the subtest of the limit.
	ProcessLimit int
	// ProcessOutput is how many bytes of each process's output they keep;
	// 0 skips the subtest of the window.
	ProcessOutput int64
	// Parallel is how many sandboxes the concurrency subtest runs at once;
	// 0 means 8.
	Parallel int
	// Timeout bounds each provider call the suite makes; 0 means one
	// minute.
	Timeout time.Duration
}

// envMarker is set in the test process's environment while the suite runs:
// no command in a sandbox may see it.
const envMarker = "TETHER_PROVIDERTEST_HOST_ONLY"

// Run runs the conformance suite against the provider h opens.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewState == nil || h.Open == nil {
		t.Fatal("providertest: Harness.NewState and Harness.Open are required")
	}
	if h.Parallel <= 0 {
		h.Parallel = 8
	}
	if h.Timeout <= 0 {
		h.Timeout = time.Minute
	}
	prev, had := os.LookupEnv(envMarker)
	if err := os.Setenv(envMarker, "leaked-"+provider.NewSandboxID()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if had {
			_ = os.Setenv(envMarker, prev)
		} else {
			_ = os.Unsetenv(envMarker)
		}
	})
	s := &suite{h: h, probe: h.Open(t, h.NewState(t))}
	t.Run("Info", s.testInfo)
	t.Run("ValidateParams", s.testValidateParams)
	t.Run("CreateIsIdempotent", s.testCreateIsIdempotent)
	t.Run("ConcurrentCreatesOfOneSandbox", s.testConcurrentCreates)
	t.Run("DestroyIsIdempotent", s.testDestroyIsIdempotent)
	t.Run("ListAfterRestart", s.testListAfterRestart)
	t.Run("Defunct", s.testDefunct)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("Exec", s.testExec)
	t.Run("ExecStream", s.testExecStream)
	t.Run("Files", s.testFiles)
	t.Run("Archives", s.testArchives)
	t.Run("ArchivesRace", s.testArchivesRace)
	t.Run("Pause", s.testPause)
	t.Run("Processes", s.testProcesses)
	t.Run("PTY", s.testPTY)
	t.Run("WatchFiles", s.testWatch)
	t.Run("Snapshots", s.testSnapshots)
	t.Run("MemorySnapshots", s.testMemorySnapshots)
	t.Run("Ports", s.testPorts)
	t.Run("Watcher", s.testWatcher)
	t.Run("HostBound", s.testHostBound)
}

// suite carries the harness to the subtests.
type suite struct {
	h Harness
	// probe is a provider over state of its own, for the capabilities.
	probe provider.Provider
}

// skipWithout skips t unless the provider implements C.
func skipWithout[C any](t *testing.T, s *suite, name string) {
	t.Helper()
	if _, ok := s.probe.(C); !ok {
		t.Skipf("the provider has no %s", name)
	}
}

// open makes fresh state and a provider over it.
func (s *suite) open(t *testing.T) (provider.Provider, string) {
	t.Helper()
	state := s.h.NewState(t)
	p := s.h.Open(t, state)
	if p == nil {
		t.Fatal("providertest: Open returned nil")
	}
	return p, state
}

// ctx is a context for one provider call.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), s.h.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox that t's cleanup destroys.
func (s *suite) create(t *testing.T, p provider.Provider, spec provider.CreateSpec) provider.Resource {
	t.Helper()
	if spec.SandboxID == "" {
		spec.SandboxID = provider.NewSandboxID()
	}
	if spec.Tenant == "" {
		spec.Tenant = "providertest"
	}
	res, err := p.Create(s.ctx(t), spec)
	if err != nil {
		t.Fatalf("Create(%s): %v", spec.SandboxID, err)
	}
	if res.SandboxID != spec.SandboxID {
		t.Errorf("Create(%s) returned the resource of %q", spec.SandboxID, res.SandboxID)
	}
	t.Cleanup(func() { s.destroy(t, p, spec.SandboxID) })
	return res
}

// destroy destroys a sandbox from a cleanup, when t's context has ended.
func (s *suite) destroy(t *testing.T, p provider.Provider, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	if err := p.Destroy(ctx, id); err != nil {
		t.Errorf("Destroy(%s) in cleanup: %v", id, err)
	}
}

// list returns p's inventory by sandbox id, failing on a sandbox listed
// twice.
func (s *suite) list(t *testing.T, p provider.Provider) map[string]provider.Resource {
	t.Helper()
	inv, err := p.List(s.ctx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return byID(t, "List has sandbox", inv, func(r provider.Resource) string { return r.SandboxID })
}

// byID returns items by their id, failing t (saying what) on an id listed
// twice.
func byID[T any](t *testing.T, what string, items []T, id func(T) string) map[string]T {
	t.Helper()
	out := make(map[string]T, len(items))
	for _, item := range items {
		if _, dup := out[id(item)]; dup {
			t.Errorf("%s %s twice", what, id(item))
		}
		out[id(item)] = item
	}
	return out
}

// wantCode fails t unless err is an *provider.Error with code want.
func wantCode(t *testing.T, what string, err error, want provider.Code) {
	t.Helper()
	var e *provider.Error
	if !errors.As(err, &e) || e.Code != want {
		t.Errorf("%s: err = %v, want an *provider.Error with code %s", what, err, want)
	}
}

// capability returns p as C, skipping t if p lacks it.
func capability[C any](t *testing.T, p provider.Provider, name string) C {
	t.Helper()
	c, ok := p.(C)
	if !ok {
		t.Skipf("the provider has no %s", name)
	}
	return c
}

func (s *suite) testInfo(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	info := p.Info(s.ctx(t))
	if info.Name != p.Name() || p.Name() == "" {
		t.Errorf("Info().Name = %q, Name() = %q: want one non-empty name", info.Name, p.Name())
	}
	if !info.Available {
		t.Fatalf("the provider is not available: %s", info.Reason)
	}
	_, execer := p.(provider.Execer)
	_, files := p.(provider.Files)
	if info.Exec != execer || info.Files != files {
		t.Errorf("Info says exec %v, files %v; the provider implements exec %v, files %v", info.Exec, info.Files, execer, files)
	}
	// A provider may implement one of these and not offer it as
	// configured, but never offer one it does not implement.
	_, procs := p.(provider.Processes)
	_, pty := p.(provider.PTY)
	_, watch := p.(provider.FileWatcher)
	if (info.Processes && !procs) || (info.PTY && (!pty || !info.Processes)) || (info.Watch && !watch) {
		t.Errorf("Info says processes %v, pty %v, watch %v; the provider implements processes %v, pty %v, watch %v",
			info.Processes, info.PTY, info.Watch, procs, pty, watch)
	}
}

func (s *suite) testValidateParams(t *testing.T) {
	t.Parallel()
	p, _ := s.open(t)
	for _, ok := range []string{"", "null", "{}"} {
		if err := p.ValidateParams(json.RawMessage(ok)); err != nil {
			t.Errorf("ValidateParams(%q) = %v; no params are the defaults", ok, err)
		}
	}
	for _, bad := range s.h.BadParams {
		wantCode(t, "ValidateParams("+bad+")", p.ValidateParams(json.RawMessage(bad)), provider.CodeInvalidRequest)
		id := provider.NewSandboxID()
		_, err := p.Create(s.ctx(t), provider.CreateSpec{SandboxID: id, Tenant: "providertest", Params: json.RawMessage(bad)})
		if err == nil || provider.IsRetryable(err) {
			t.Errorf("Create with params %s: err = %v, want a failure that is not retryable", bad, err)
		}
		if _, made := s.list(t, p)[id]; made {
			t.Errorf("Create with params %s made a resource", bad)
			_ = p.Destroy(s.ctx(t), id)
		}
	}
}
