package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
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
	checkShared(t, p)
	return p, dir
}

// checkShared checks that p can run sandboxes in control groups, and
// removes its parent groups once the test's sandboxes are destroyed.
func checkShared(t *testing.T, p *Provider) {
	t.Helper()
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
}

// createAs creates a sandbox of tenant with params, returning its id or
// the create's error.
func createAs(t *testing.T, p *Provider, tenant, params string) (string, error) {
	t.Helper()
	id := provider.NewSandboxID()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := p.Create(ctx, provider.CreateSpec{SandboxID: id, Tenant: tenant, Params: json.RawMessage(params)})
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
	p, dir := newSharedProvider(t, Limits{Pids: 700, MemoryMB: 3000}, Limits{Pids: 500, MemoryMB: 3000})
	if got := p.hostShare; got.Pids != 700 || got.MemoryMB != 3000 {
		t.Fatalf("host share %+v", got)
	}
	want := func(err error, what string) {
		t.Helper()
		if provider.ErrorCode(err) != provider.CodeQuotaExceeded || !strings.Contains(err.Error(), what) {
			t.Fatalf("create = %v; want QUOTA_EXCEEDED naming %q", err, what)
		}
	}
	if _, err := createAs(t, p, "a", `{"pids": 200}`); err != nil {
		t.Fatal(err)
	}
	_, err := createAs(t, p, "a", `{"pids": 400}`)
	want(err, "this create would pass the tenant's share of this node's local sandboxes; processes: the tenant holds 200 of its 500 here (LOCAL_TENANT_PIDS), this create asks for 400")
	b, err := createAs(t, p, "b", `{"pids": 400}`)
	if err != nil {
		t.Fatal(err)
	}
	// Refused by the host share, the tenant is told what it holds and may
	// hold, never what the others hold.
	_, err = createAs(t, p, "c", `{"pids": 200}`)
	want(err, "this node has no room now for this create's processes (200; the tenant holds 0 of its 500 here), though it is within the tenant's share")
	if strings.Contains(err.Error(), "600") || strings.Contains(err.Error(), "700") {
		t.Errorf("the refusal tells the tenant the host's reservations: %v", err)
	}
	_, err = createAs(t, p, "c", `{"pids": 16, "memory_mb": 2500}`)
	want(err, "memory (2500 MiB; the tenant holds 0 MiB of its 3000 MiB here)")
	// The maxima are what the shares can hold.
	if err := p.ValidateParams([]byte(`{"pids": 600}`)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("pids 600 past the tenant share: %v, want INVALID_REQUEST", err)
	}
	if err := p.ValidateParams([]byte(`{"memory_mb": 3001}`)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("memory past the host share: %v, want INVALID_REQUEST", err)
	}
	// A refused create leaves nothing behind.
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if provider.ValidSandboxID(e.Name()) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d sandbox folders after two creates and three refusals", n)
	}
	// A provider started anew counts what runs.
	again, err := New(dir, WithLimits(p.limits, p.maxLimits), WithHostShare(Limits{Pids: 700, MemoryMB: 3000}, Limits{Pids: 500, MemoryMB: 3000}), WithCgroupParent(filepath.Base(p.cg.Parents()[0])))
	if err != nil {
		t.Fatal(err)
	}
	_, err = createAs(t, again, "c", `{"pids": 200}`)
	want(err, "this node has no room now for this create's processes")
	_, err = createAs(t, again, "a", `{"pids": 400}`)
	want(err, "the tenant holds 200 of its 500 here")
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
	p, _ := newSharedProvider(t, Limits{Pids: 1200}, Limits{Pids: 1200})
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
			_, _ = p.exec(bombCtx, m, provider.ExecRequest{Command: `b() { b | b & }; b`, Timeout: 8 * time.Second})
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
			res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: "echo ok", Timeout: 5 * time.Second})
			if err == nil && res.Output == "ok\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("15 s after its bomb, a sandbox's exec = %+v, %v", res, err)
			}
		}
	}
}

// openWithDefaults opens the provider as Tether does, from its settings,
// with their defaults but for env (and the state folder and parent
// control group, the test's own).
func openWithDefaults(t *testing.T, env map[string]string) (*Provider, string) {
	t.Helper()
	dir := harness.ReachableTempDir(t)
	env["LOCAL_STATE_DIR"], env["LOCAL_CGROUP_PARENT"] = dir, "tether-test-"+hostos.RandomSuffix()
	opened, err := Registration.Open(t.Context(), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := opened.(*Provider)
	checkShared(t, p)
	return p, dir
}

// TestDefaultSharesLeaveRoomForAnotherTenant is the attack of one tenant
// that reserves all it can of a host with the default settings: sandboxes
// of the largest limits a create may ask for, then smaller and smaller
// ones until even the smallest is refused. Each refusal is QUOTA_EXCEEDED
// naming the tenant's own share, not the host's reservations; and another
// tenant then still creates a sandbox of the default limits. Before the
// tenants' shares had defaults, the first tenant took the whole host
// share and the second's create was refused.
func TestDefaultSharesLeaveRoomForAnotherTenant(t *testing.T) {
	t.Parallel()
	// Without a workspace size limit: this is about processes and memory
	// (TestDefaultDiskShare is about the disk).
	p, _ := openWithDefaults(t, map[string]string{"LOCAL_WORKSPACE_MB": "0"})
	host, tenant := p.hostShare, p.tenantShare
	t.Logf("host share %+v, a tenant's %+v, a sandbox's maxima %+v and defaults %+v", host, tenant, p.maxLimits, p.limits)
	if tenant.Pids > host.Pids-p.limits.Pids || tenant.MemoryMB > host.MemoryMB-p.limits.MemoryMB {
		t.Fatalf("a tenant's share %+v leaves less than a default sandbox %+v of the host's %+v", tenant, p.limits, host)
	}
	var held Limits
	created, refused := 0, 0
	for shift := 0; ; shift++ {
		ask := Limits{Pids: max(minPids, p.maxLimits.Pids>>shift), MemoryMB: max(minMemMB, p.maxLimits.MemoryMB>>shift)}
		for range 64 {
			_, err := createAs(t, p, "greedy", fmt.Sprintf(`{"pids": %d, "memory_mb": %d}`, ask.Pids, ask.MemoryMB))
			if err == nil {
				held, created = held.plus(ask), created+1
				continue
			}
			refused++
			msg := err.Error()
			if provider.ErrorCode(err) != provider.CodeQuotaExceeded || !strings.Contains(msg, "would pass the tenant's share") ||
				!strings.Contains(msg, "LOCAL_TENANT_") || strings.Contains(msg, "no room") {
				t.Fatalf("create %+v of the greedy tenant = %v; want QUOTA_EXCEEDED naming its own share", ask, err)
			}
			if held.Pids+ask.Pids <= tenant.Pids && held.MemoryMB+ask.MemoryMB <= tenant.MemoryMB {
				t.Fatalf("create %+v refused while the tenant holds %+v of its %+v: %v", ask, held, tenant, err)
			}
			break
		}
		if ask.Pids == minPids && ask.MemoryMB == minMemMB {
			break
		}
	}
	t.Logf("the greedy tenant holds %+v in %d sandboxes; %d creates were refused", held, created, refused)
	if held.Pids > tenant.Pids || held.MemoryMB > tenant.MemoryMB {
		t.Fatalf("the greedy tenant holds %+v, past its share %+v", held, tenant)
	}
	if _, err := createAs(t, p, "modest", `{}`); err != nil {
		t.Fatalf("another tenant's create of the default limits, beside the greedy one's %+v: %v", held, err)
	}
}

// TestDefaultDiskShare: with the default settings, workspaces are
// reserved against a share of the disk measured at start: a create asking
// for a workspace larger than a tenant's share of it is refused at once
// (the was three quarters of the free disk), and one that does not
// fit beside the tenant's others is QUOTA_EXCEEDED. Before, the disk was
// not shared out at all unless LOCAL_HOST_WORKSPACE_MB was set.
func TestDefaultDiskShare(t *testing.T) {
	t.Parallel()
	p, dir := openWithDefaults(t, map[string]string{})
	if p.workspace.Problem() != "" {
		t.Skipf("no workspace size limits on this host: %s", p.workspace.Problem())
	}
	host, tenant := p.hostShare.WorkspaceMB, p.tenantShare.WorkspaceMB
	freeMB := int(hostos.FreeBytes(dir) >> 20)
	t.Logf("disk: %d MiB free under the state folder; host share %d MiB, a tenant's %d MiB; default workspace %d MiB, at most %d",
		freeMB, host, tenant, p.limits.WorkspaceMB, p.maxLimits.WorkspaceMB)
	if host <= 0 || host > freeMB || tenant != max(host/2, p.limits.WorkspaceMB) || p.limits.WorkspaceMB != DefaultWorkspaceMB {
		t.Fatalf("disk shares: host %d MiB, tenant %d MiB, of %d MiB free; want three quarters of it and half that", host, tenant, freeMB)
	}
	if host-tenant < p.limits.WorkspaceMB {
		t.Errorf("a tenant's disk share %d MiB leaves less than a default workspace of the host's %d MiB", tenant, host)
	}
	for _, mb := range []int{tenant + 1, hostos.FreeMB(dir)} {
		params := fmt.Sprintf(`{"workspace_mb": %d}`, mb)
		if err := p.ValidateParams([]byte(params)); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("ValidateParams(%s), past the tenant's disk share: %v, want INVALID_REQUEST", params, err)
		}
		if _, err := createAs(t, p, "a", params); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("create %s, past the tenant's disk share: %v, want INVALID_REQUEST", params, err)
		}
	}
	// The share is reserved: a workspace of all but 16 MiB of it fits once,
	// and then no other of the tenant's does, though another tenant's does.
	if _, err := createAs(t, p, "a", fmt.Sprintf(`{"workspace_mb": %d}`, min(p.maxLimits.WorkspaceMB, tenant-MinWorkspaceMB))); err != nil {
		t.Fatal(err)
	}
	_, err := createAs(t, p, "a", `{"workspace_mb": 32}`)
	if provider.ErrorCode(err) != provider.CodeQuotaExceeded || !strings.Contains(err.Error(), "disk (workspaces and snapshots): the tenant holds") ||
		!strings.Contains(err.Error(), "LOCAL_TENANT_WORKSPACE_MB") {
		t.Errorf("a second workspace past the tenant's disk share: %v, want QUOTA_EXCEEDED naming it", err)
	}
	if _, err := createAs(t, p, "b", `{}`); err != nil {
		t.Errorf("another tenant's default create: %v", err)
	}
}

// TestSnapshotsCountInTheDiskShare: a snapshot's bytes count against its
// tenant's share of the disk, beside its workspaces' limits: one that
// would pass it is refused with QUOTA_EXCEEDED saying so (not retryable,
// nothing left behind), as is a create past it; deleting a snapshot frees
// its bytes; a provider started anew counts the snapshots on disk. Before,
// snapshots were counted nowhere on the host.
func TestSnapshotsCountInTheDiskShare(t *testing.T) {
	t.Parallel()
	p, dir := newSharedProvider(t, Limits{WorkspaceMB: 4000}, Limits{WorkspaceMB: 600})
	if p.workspace.Problem() != "" {
		t.Skipf("no workspace size limits on this host: %s", p.workspace.Problem())
	}
	id, err := createAs(t, p, "a", `{"workspace_mb": 256}`)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: "head -c 200M /dev/urandom >/workspace/data && sync", Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("writing 200 MiB: %+v, %v", res, err)
	}
	first, second := provider.NewSnapshotID(), provider.NewSnapshotID()
	size, err := p.Snapshot(t.Context(), id, first)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), first) })
	t.Logf("a snapshot of a 256 MiB workspace holding 200 MiB: %d MiB", size>>20)
	// 256 MiB of workspace and about 205 of snapshot held: another 205
	// does not fit in 600.
	_, err = p.Snapshot(t.Context(), id, second)
	if provider.ErrorCode(err) != provider.CodeQuotaExceeded || provider.IsRetryable(err) ||
		!strings.Contains(err.Error(), "this snapshot would pass the tenant's share of this node's local sandboxes; disk (workspaces and snapshots): the tenant holds") ||
		!strings.Contains(err.Error(), "of its 600 MiB here (LOCAL_TENANT_WORKSPACE_MB)") {
		t.Fatalf("a second snapshot past the tenant's disk share: %v; want QUOTA_EXCEEDED saying so, not retryable", err)
	}
	if list, err := p.ListSnapshots(t.Context()); err != nil || len(list) != 1 || list[0].ID != first {
		t.Errorf("snapshots after the refusal: %+v, %v; want the first alone", list, err)
	}
	if _, err := createAs(t, p, "a", `{"workspace_mb": 256}`); provider.ErrorCode(err) != provider.CodeQuotaExceeded {
		t.Errorf("a create past the tenant's disk share, its snapshot counted: %v, want QUOTA_EXCEEDED", err)
	}
	if _, err := createAs(t, p, "b", `{"workspace_mb": 256}`); err != nil {
		t.Errorf("another tenant's create: %v", err)
	}
	// A provider started anew counts the snapshot on disk.
	again, err := New(dir, WithLimits(p.limits, p.maxLimits), WithHostShare(p.hostShare, p.tenantShare), WithCgroupParent(filepath.Base(p.cg.Parents()[0])))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := createAs(t, again, "a", `{"workspace_mb": 256}`); provider.ErrorCode(err) != provider.CodeQuotaExceeded {
		t.Errorf("after a restart, a create past the tenant's disk share: %v, want QUOTA_EXCEEDED", err)
	}
	// Deleting the first snapshot makes room for the second.
	if err := p.DeleteSnapshot(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Snapshot(t.Context(), id, second); err != nil {
		t.Fatalf("a snapshot once the first is deleted: %v", err)
	}
	t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), second) })
}
