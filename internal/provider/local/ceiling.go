package local

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tetherhq/tether/internal/host/cgroup"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
)

// Each sandbox has its limits (its control groups, cgroup.Groups.Create),
// and all of them together have the host share: what the provider's
// sandboxes may take of the host at once, so that however many there are,
// Tether, Postgres and the rest of the host keep what they need. Each
// tenant has a share of that, so that one tenant cannot take it all. They
// are held two ways:
//
//   - The control groups above the sandboxes' (the "tether" group of each
//     controller, cgroup.Groups.SetCeiling) are capped at the share's pids and memory: the kernel
//     never lets all sandboxes together fork or allocate past it, whatever
//     each one's own limit, so a fork bomb in every sandbox still leaves the
//     host able to fork, and the host's OOM killer never has to choose
//     among Postgres and Tether.
//   - Creates reserve their limits (pids, memory and the workspace's size)
//     and snapshots the bytes they take on disk, against the tenant's
//     share and the host share: a create or snapshot that does not fit
//     beside what the tenant, and all tenants, hold on this host is
//     refused with QUOTA_EXCEEDED, so the limits every sandbox was
//     promised can all be held at once. The tenant's share is checked
//     first, so a tenant past its own share is the one refused, told its
//     own numbers; the host's are not a tenant's to know. The maxima a
//     create may ask for are no larger than the shares, nor a workspace
//     than three quarters of the disk's free space.
//
// Shares left 0 are derived at start (deriveShares).

// WithHostShare sets what all of the provider's sandboxes together may
// reserve of the host (host; 0: derived from the host), and what the
// sandboxes and snapshots of one tenant may (tenant; 0: half the host's,
// at least one default sandbox's limit). WorkspaceMB is the disk, which
// workspaces' size limits and snapshots' bytes take. OpenFiles is not
// shared out.
func WithHostShare(host, tenant Limits) Option {
	return func(p *Provider) { p.hostShare, p.tenantShare = host, tenant }
}

// WithCgroupParent names the control group (below Tether's own under
// cgroup v1, at the root under v2) that holds every sandbox's and carries
// the host share's caps; default "tether". Two Tethers on one host with
// other shares need other names.
func WithCgroupParent(name string) Option {
	return func(p *Provider) { p.cgroupParent = name }
}

// defaultCgroupParent is the control group of all sandboxes.
const defaultCgroupParent = "tether"

// deriveShares derives the shares left 0. The host's: half the pids the
// kernel can hand out (the lower of pid_max and threads-max); the memory
// of the host, or of the control group Tether runs in if that is smaller,
// less a quarter of it (at least 1 GiB) for everything else; three
// quarters of the disk under the state folder that the sandboxes could
// have at start (the space free there and what their workspace images and
// snapshots already take), the rest left to Postgres, logs and the host. A
// tenant's: half the host's, the fair share of two tenants, so that while
// one holds all of its share another can still create as much; at least
// one sandbox of the default limits. A tenant's share past the host's is
// the host's.
func (p *Provider) deriveShares() {
	h := &p.hostShare
	if h.Pids == 0 {
		pids := cgroup.ReadInt("/proc/sys/kernel/pid_max")
		if threads := cgroup.ReadInt("/proc/sys/kernel/threads-max"); threads > 0 && (pids == 0 || threads < pids) {
			pids = threads
		}
		h.Pids = max(minPids, int(pids/2))
	}
	if h.MemoryMB == 0 {
		mem := cgroup.HostMemory()
		h.MemoryMB = max(minMemMB, int((mem-max(mem/4, 1<<30))>>20))
	}
	if h.WorkspaceMB == 0 {
		h.WorkspaceMB = max(MinWorkspaceMB, int((hostos.FreeBytes(p.dir)+p.diskHeld())/4*3>>20))
	}
	half := func(v *int, host, def int) {
		if *v == 0 {
			*v = max(host/2, def)
		}
		*v = min(*v, host)
	}
	half(&p.tenantShare.Pids, h.Pids, p.limits.Pids)
	half(&p.tenantShare.MemoryMB, h.MemoryMB, p.limits.MemoryMB)
	half(&p.tenantShare.WorkspaceMB, h.WorkspaceMB, p.limits.WorkspaceMB)
}

// diskHeld is the bytes the sandboxes' workspace images and the snapshots
// under the state folder take on disk.
func (p *Provider) diskHeld() int64 {
	var n int64
	for _, dir := range []string{p.dir, filepath.Join(p.dir, snapshotsFolder)} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				used, _ := workspace.DiskUsage(filepath.Join(dir, e.Name(), workspace.ImageFile))
				n += used
			}
		}
	}
	return n
}

// capToShare lowers the provider's maxima (and defaults) to what the host
// share and a tenant's can hold, and the workspace's to what the disk
// under dir can.
func (p *Provider) capToShare(dir string) {
	limit := func(v *int, caps ...int) {
		for _, c := range caps {
			if c > 0 && *v > c {
				*v = c
			}
		}
	}
	for _, lim := range []*Limits{&p.maxLimits, &p.limits} {
		limit(&lim.Pids, p.hostShare.Pids, p.tenantShare.Pids)
		limit(&lim.MemoryMB, p.hostShare.MemoryMB, p.tenantShare.MemoryMB)
		limit(&lim.WorkspaceMB, p.hostShare.WorkspaceMB, p.tenantShare.WorkspaceMB)
		if disk := hostos.FreeMB(dir); disk >= MinWorkspaceMB {
			limit(&lim.WorkspaceMB, disk)
		}
	}
}

// ledger holds the reservations on this host: of its sandboxes (their
// limits) and of its snapshots (their bytes on disk, in WorkspaceMB), with
// their tenants, by sandbox or snapshot id. It is read from the sandboxes'
// meta.json and the snapshots' folders the first time it is needed, so it
// outlives a restart of Tether.
type ledger struct {
	mu     sync.Mutex
	loaded bool
	held   map[string]reservation
}

type reservation struct {
	tenant string
	lim    Limits
}

// load reads the ledger from the state folder. l.mu is held.
func (l *ledger) load(p *Provider) {
	l.held = map[string]reservation{}
	entries, _ := os.ReadDir(p.dir)
	for _, e := range entries {
		if !e.IsDir() || !provider.ValidSandboxID(e.Name()) {
			continue
		}
		if m, err := p.readMeta(e.Name()); err == nil {
			l.held[m.SandboxID] = reservation{tenant: m.Tenant, lim: Limits{Pids: m.Limits.Pids, MemoryMB: m.Limits.MemoryMB, WorkspaceMB: m.Limits.WorkspaceMB}}
		}
	}
	snaps, _ := os.ReadDir(filepath.Join(p.dir, snapshotsFolder))
	for _, e := range snaps {
		if id, _ := strings.CutSuffix(e.Name(), provider.PartialSuffix); e.IsDir() && provider.ValidSnapshotID(id) {
			tenant, mb := p.snapshotOnDisk(id)
			l.held[id] = reservation{tenant: tenant, lim: Limits{WorkspaceMB: mb}}
		}
	}
	l.loaded = true
}

// snapshotOnDisk is the tenant of the snapshot id (from its spec.json; ""
// when it has none, as a partial one) and the MiB its data takes on disk,
// complete and partial.
func (p *Provider) snapshotOnDisk(id string) (tenant string, mb int) {
	var used int64
	for _, dir := range []string{p.snapshotDir(id), p.snapshotDir(id) + provider.PartialSuffix} {
		n, _ := workspace.DiskUsage(filepath.Join(dir, workspace.ImageFile))
		used += n
		if spec, err := p.readSnapshotSpec(dir); err == nil && tenant == "" {
			tenant = spec.Tenant
		}
	}
	return tenant, mibOf(used)
}

// mibOf is n bytes in MiB, rounded up.
func mibOf(n int64) int { return int((n + 1<<20 - 1) >> 20) }

// reserve records id's reservation, of a create or a snapshot (what), if
// it fits the tenant's share and the host share beside the others', or
// returns QUOTA_EXCEEDED saying what does not fit. A reservation id held
// already is replaced.
func (p *Provider) reserve(id, tenant string, lim Limits, what string) error {
	l := &p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loaded {
		l.load(p)
	}
	var host, own Limits
	for other, r := range l.held {
		if other == id {
			continue
		}
		host = host.plus(r.lim)
		if r.tenant == tenant {
			own = own.plus(r.lim)
		}
	}
	if over := overShare(own, lim, p.tenantShare); len(over) > 0 {
		var parts []string
		for _, d := range over {
			parts = append(parts, fmt.Sprintf("%s: the tenant holds %d%s of its %d%s here (%s), this %s asks for %d%s",
				d.name, d.of(own), d.unit, d.of(p.tenantShare), d.unit, d.setting, what, d.of(lim), d.unit))
		}
		return provider.Errorf(provider.CodeQuotaExceeded, "this %s would pass the tenant's share of this node's local sandboxes; %s: %s",
			what, strings.Join(parts, "; "), remedy[what])
	}
	if over := overShare(host, lim, p.hostShare); len(over) > 0 {
		var parts []string
		for _, d := range over {
			parts = append(parts, fmt.Sprintf("%s (%d%s; the tenant holds %d%s of its %d%s here)",
				d.name, d.of(lim), d.unit, d.of(own), d.unit, d.of(p.tenantShare), d.unit))
		}
		return provider.Errorf(provider.CodeQuotaExceeded, "this node has no room now for this %s's %s, though it is within the tenant's share: try again once sandboxes end",
			what, strings.Join(parts, " and "))
	}
	l.held[id] = reservation{tenant: tenant, lim: lim}
	return nil
}

// remedy is what a tenant past its share can do, by what it asked.
var remedy = map[string]string{
	"create":   "end one of its sandboxes here or delete a snapshot, or ask for less",
	"snapshot": "delete one of its snapshots or end a sandbox",
}

// unreserve frees id's reservation.
func (p *Provider) unreserve(id string) {
	p.ledger.mu.Lock()
	delete(p.ledger.held, id)
	p.ledger.mu.Unlock()
}

// recountSnapshot sets the snapshot id's reservation to what its data
// takes on disk now (none once it is gone), after a snapshot call that
// did not end as it reserved.
func (p *Provider) recountSnapshot(id, tenant string) {
	l := &p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loaded {
		return // the load counts it
	}
	onDisk, mb := p.snapshotOnDisk(id)
	_, errFinal := os.Stat(p.snapshotDir(id))
	_, errPartial := os.Stat(p.snapshotDir(id) + provider.PartialSuffix)
	if errFinal != nil && errPartial != nil {
		delete(l.held, id)
		return
	}
	l.held[id] = reservation{tenant: cmp.Or(onDisk, tenant), lim: Limits{WorkspaceMB: mb}}
}

func (l Limits) plus(o Limits) Limits {
	return Limits{Pids: l.Pids + o.Pids, MemoryMB: l.MemoryMB + o.MemoryMB, WorkspaceMB: l.WorkspaceMB + o.WorkspaceMB}
}

// shareDim is one resource shared out: its name and unit in messages, the
// setting of a tenant's share of it, and its amount in a Limits.
type shareDim struct {
	name, unit, setting string
	of                  func(Limits) int
}

var shareDims = []shareDim{
	{"processes", "", "LOCAL_TENANT_PIDS", func(l Limits) int { return l.Pids }},
	{"memory", " MiB", "LOCAL_TENANT_MEMORY_MB", func(l Limits) int { return l.MemoryMB }},
	{"disk (workspaces and snapshots)", " MiB", "LOCAL_TENANT_WORKSPACE_MB", func(l Limits) int { return l.WorkspaceMB }},
}

// overShare lists the resources of which held+lim is past share (a 0 in
// share or lim: none).
func overShare(held, lim, share Limits) []shareDim {
	var out []shareDim
	for _, d := range shareDims {
		if s, n := d.of(share), d.of(lim); s > 0 && n > 0 && d.of(held)+n > s {
			out = append(out, d)
		}
	}
	return out
}

// shareNote says what the shares are, for Info.
func (p *Provider) shareNote() string {
	how := "reserved by their limits at create and capped in their parent control group"
	if p.cg == nil {
		how = "reserved by their workspace limits at create; no control groups here"
	}
	h, t := p.hostShare, p.tenantShare
	return fmt.Sprintf("host share (all sandboxes together, %s): pids %d, memory %d MiB, disk %d MiB (workspaces' size limits and snapshots' bytes); "+
		"each tenant's share of it: pids %d, memory %d MiB, disk %d MiB; a create or snapshot that does not fit is QUOTA_EXCEEDED",
		how, h.Pids, h.MemoryMB, h.WorkspaceMB, t.Pids, t.MemoryMB, t.WorkspaceMB)
}
