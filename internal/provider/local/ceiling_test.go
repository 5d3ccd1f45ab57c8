package local

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/test/harness"
)

// newSharedProvider returns a provider over a fresh state folder whose
// sandboxes live in a parent control group of the test's own (removed at
// the end), under the given shares. Their workspaces have no size limit:
// these tests are about processes and memory, and a loop device's release
// can outlast a destroy's wait on a loaded host.
func newSharedProvider(t *testing.T, host, tenant Limits) (*Provider, string) {
	t.Helper()
	dir := harness.ReachableTempDir(t)
	noWorkspaceLimit := WithLimits(Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB, OpenFiles: DefaultOpenFiles},
		Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: DefaultMaxWorkspaceMB, OpenFiles: DefaultMaxOpenFiles})
	p, err := New(dir, noWorkspaceLimit, WithHostShare(host, tenant), WithCgroupParent("tether-test-"+hostos.RandomSuffix()))
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(t.Context()); !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	if p.cg == nil {
		t.Fatal("no control groups on this host")
	}
	t.Cleanup(func() { // after every sandbox's destroy, registered later
		if err := p.cg.RemoveParents(); err != nil {
			t.Errorf("removing the test's parent group: %v", err)
		}
	})
	return p, dir
}

// createAs creates a sandbox of tenant with params, returning its id or
// the create's error.
func createAs(t *testing.T, p *Provider, tenant, params string) (string, error) {
	t.Helper()
	id := sandbox.NewID()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := p.Create(ctx, sandbox.CreateSpec{SandboxID: id, Tenant: tenant, Params: json.RawMessage(params)})
	if err == nil {
		t.Cleanup(func() {
			if err := p.Destroy(context.Background(), id); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		})
	}
	return id, err
}

// TestHostShareReservations: creates reserve their limits against the
// host share and their tenant's; one that does not fit beside the live
// sandboxes is QUOTA_EXCEEDED, saying what, and fits again once a sandbox
// ends; the maxima shrink to the shares; a restarted provider counts the
// sandboxes that outlived it.
func TestHostShareReservations(t *testing.T) {
	t.Parallel()
	p, dir := newSharedProvider(t, Limits{Pids: 700, MemoryMB: 3000}, Limits{Pids: 500})
	if got := p.hostShare; got.Pids != 700 || got.MemoryMB != 3000 {
		t.Fatalf("host share %+v", got)
	}
	want := func(err error, what string) {
		t.Helper()
		if sandbox.ErrorCode(err) != sandbox.CodeQuotaExceeded || !strings.Contains(err.Error(), what) {
			t.Fatalf("create = %v; want QUOTA_EXCEEDED naming %q", err, what)
		}
	}
	if _, err := createAs(t, p, "a", `{"pids": 200}`); err != nil {
		t.Fatal(err)
	}
	_, err := createAs(t, p, "a", `{"pids": 400}`)
	want(err, "the tenant's local sandboxes on this host hold its share of the host's processes (200 reserved of 500; this create asks for 400)")
	b, err := createAs(t, p, "b", `{"pids": 400}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = createAs(t, p, "c", `{"pids": 200}`)
	want(err, "this host's local sandboxes hold their share of its processes (600 reserved of 700; this create asks for 200)")
	_, err = createAs(t, p, "c", `{"pids": 16, "memory_mb": 2500}`)
	want(err, "memory (1024 MiB reserved of 3000; this create asks for 2500)")
	// The maxima are what the shares can hold.
	if err := p.ValidateParams([]byte(`{"pids": 600}`)); sandbox.ErrorCode(err) != sandbox.CodeInvalidRequest {
		t.Errorf("pids 600 past the tenant share: %v, want INVALID_REQUEST", err)
	}
	if err := p.ValidateParams([]byte(`{"memory_mb": 3001}`)); sandbox.ErrorCode(err) != sandbox.CodeInvalidRequest {
		t.Errorf("memory past the host share: %v, want INVALID_REQUEST", err)
	}
	// A refused create leaves nothing behind.
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if sandbox.ValidID(e.Name()) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d sandbox folders after two creates and three refusals", n)
	}
	// A provider started anew counts what runs.
	again, err := New(dir, WithLimits(p.limits, p.maxLimits), WithHostShare(Limits{Pids: 700, MemoryMB: 3000}, Limits{Pids: 500}), WithCgroupParent(filepath.Base(p.cg.Parents()[0])))
	if err != nil {
		t.Fatal(err)
	}
	_, err = createAs(t, again, "c", `{"pids": 200}`)
	want(err, "(600 reserved of 700")
	// Ending a sandbox frees its share.
	if err := p.Destroy(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if _, err := createAs(t, p, "c", `{"pids": 200}`); err != nil {
		t.Fatalf("create after a sandbox ended: %v", err)
	}
}

// TestForkBombsLeaveTheHostAbleToFork: the parent group of all sandboxes
// is capped at the host share, so fork bombs in several sandboxes at once,
// each within its own limit, together never hold more processes than the
// cap (lowered here below the sum of their limits, as it is for whatever
// the reservations do not count), and the host forks all along.
func TestForkBombsLeaveTheHostAbleToFork(t *testing.T) {
	// Not parallel: its fork bombs load every core, which would stretch the
	// timings the package's parallel tests keep to (exec timeouts).
	p, _ := newSharedProvider(t, Limits{Pids: 1200}, Limits{})
	pidsBase := p.cg.Parents()[0]
	if b, err := os.ReadFile(filepath.Join(pidsBase, "pids.max")); err != nil || strings.TrimSpace(string(b)) != "1200" {
		t.Fatalf("the parent group's pids.max = %q, %v; want the host share, 1200", b, err)
	}
	var ids []string
	for range 3 {
		id, err := createAs(t, p, "bomber", `{"pids": 400}`)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	const ceiling = 150
	if err := p.cg.SetCeiling(ceiling, p.hostShare.MemoryMB); err != nil {
		t.Fatal(err)
	}
	var bombs sync.WaitGroup
	bombCtx, stopBombs := context.WithCancel(t.Context())
	defer stopBombs()
	for _, id := range ids {
		bombs.Go(func() {
			m, err := p.running(id)
			if err != nil {
				t.Error(err)
				return
			}
			// Each bomb holds what it can until the sampling below ends
			// (or, at the latest, its 8 s timeout), then it is killed.
			_, _ = p.exec(bombCtx, m, sandbox.ExecRequest{Command: `b() { b | b & }; b`, Timeout: 8 * time.Second})
		})
	}
	peak, forks := 0, 0
	// Sample until the bombs have pressed against the cap for a while: on a
	// loaded machine they take longer to get there.
	for deadline := time.Now().Add(7500 * time.Millisecond); time.Now().Before(deadline) && (peak < ceiling*9/10 || forks < 30); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(pidsBase, "pids.current"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		peak = max(peak, n)
		//nolint:noctx // ends at once
		if err := exec.Command("true").Run(); err != nil {
			t.Errorf("the host cannot fork during the bombs: %v", err)
		} else {
			forks++
		}
	}
	stopBombs()
	bombs.Wait()
	t.Logf("3 fork bombs: at most %d processes in all sandboxes (cap %d); the host forked %d times meanwhile", peak, ceiling, forks)
	// The cap refuses forks, not moves: each exec's shell joins its exec
	// group by moving itself there, which the pids controller lets past
	// pids.max ("attaching processes" may make pids.current exceed it). So
	// each bomb's exec may bring one process over.
	if allowed := ceiling + len(ids); peak > allowed || peak < ceiling/2 {
		t.Errorf("the sandboxes held %d processes at most; want the cap, %d, reached and passed by no more than the %d execs' own shells", peak, ceiling, len(ids))
	}
	if err := p.cg.SetCeiling(p.hostShare.Pids, p.hostShare.MemoryMB); err != nil {
		t.Fatal(err)
	}
	// The bombs' processes are freed a moment after their kill.
	for _, id := range ids {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			res, err := p.Exec(t.Context(), id, sandbox.ExecRequest{Command: "echo ok", Timeout: 5 * time.Second})
			if err == nil && res.Output == "ok\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("15 s after its bomb, a sandbox's exec = %+v, %v", res, err)
			}
		}
	}
}
