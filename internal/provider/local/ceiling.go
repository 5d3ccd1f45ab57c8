package local

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/tetherhq/tether/internal/host/cgroup"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/sandbox"
)

// Each sandbox has its limits (its control groups, cgroup.Groups.Create),
// and all of them together have the host share: what the provider's sandboxes may take of the host at
// once, so that however many there are, Tether, Postgres and the rest of
// the host keep what they need. It is held two ways:
//
//   - The control groups above the sandboxes' (the "tether" group of each
//     controller, cgroup.Groups.SetCeiling) are capped at the share's pids and memory: the kernel
//     never lets all sandboxes together fork or allocate past it, whatever
//     each one's own limit, so a fork bomb in every sandbox still leaves the
//     host able to fork, and the host's OOM killer never has to choose
//     among Postgres and Tether.
//   - Creates reserve their limits (pids, memory, and workspace where the
//     operator set a share of it) against the share, and against a
//     tenant's part of it: a create whose limits do not fit beside those of
//     the sandboxes live on this host is refused with QUOTA_EXCEEDED, so the
//     limits every sandbox was promised can all be held at once. The maxima
//     a create may ask for are no larger than the shares, nor a workspace
//     than three quarters of the disk's free space.
//
// Pids and memory shares left 0 are derived from the host at start
// (hostShareDefaults).

// WithHostShare sets what all of the provider's sandboxes together may
// reserve of the host (Pids, MemoryMB of host, 0: derived from the host;
// WorkspaceMB, 0: not reserved), and what the sandboxes of one tenant may
// (tenant; 0: the host share). OpenFiles is not shared out.
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

// hostShareDefaults derives the pids and memory shares left 0: half the
// pids the kernel can hand out (the lower of pid_max and threads-max); the
// memory of the host, or of the control group Tether runs in if that is
// smaller, less a quarter of it (at least 1 GiB) for everything else.
// Workspace space is reserved only when the operator sets a share:
// workspaces are sparse files, and reserving each one's whole limit
// against the disk would hold a host to a handful of sandboxes.
func hostShareDefaults(share Limits) Limits {
	if share.Pids == 0 {
		pids := cgroup.ReadInt("/proc/sys/kernel/pid_max")
		if threads := cgroup.ReadInt("/proc/sys/kernel/threads-max"); threads > 0 && (pids == 0 || threads < pids) {
			pids = threads
		}
		share.Pids = max(minPids, int(pids/2))
	}
	if share.MemoryMB == 0 {
		mem := cgroup.HostMemory()
		share.MemoryMB = max(minMemMB, int((mem-max(mem/4, 1<<30))>>20))
	}
	return share
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

// ledger holds the reservations of the sandboxes on this host: their
// limits and tenants, by id. It is read from their meta.json the first
// time it is needed, so it outlives a restart of Tether.
type ledger struct {
	mu     sync.Mutex
	loaded bool
	held   map[string]reservation
}

type reservation struct {
	tenant string
	lim    Limits
}

// reserve records id's reservation if it fits the host share and its
// tenant's beside the others', or returns QUOTA_EXCEEDED saying what does
// not fit.
func (p *Provider) reserve(id, tenant string, lim Limits) error {
	l := &p.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loaded {
		l.held = map[string]reservation{}
		entries, _ := os.ReadDir(p.dir)
		for _, e := range entries {
			if !e.IsDir() || !sandbox.ValidID(e.Name()) {
				continue
			}
			if m, err := p.readMeta(e.Name()); err == nil {
				l.held[m.SandboxID] = reservation{tenant: m.Tenant, lim: m.Limits}
			}
		}
		l.loaded = true
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
	if what := exceeds(host, lim, p.hostShare); what != "" {
		return sandbox.Errorf(sandbox.CodeQuotaExceeded, "this host's local sandboxes hold their share of its %s (LOCAL_HOST_*): end a sandbox, or ask for less", what)
	}
	if what := exceeds(own, lim, p.tenantShare); what != "" {
		return sandbox.Errorf(sandbox.CodeQuotaExceeded, "the tenant's local sandboxes on this host hold its share of the host's %s (LOCAL_TENANT_*): end one of them, or ask for less", what)
	}
	l.held[id] = reservation{tenant: tenant, lim: lim}
	return nil
}

// unreserve frees id's reservation.
func (p *Provider) unreserve(id string) {
	p.ledger.mu.Lock()
	delete(p.ledger.held, id)
	p.ledger.mu.Unlock()
}

func (l Limits) plus(o Limits) Limits {
	return Limits{Pids: l.Pids + o.Pids, MemoryMB: l.MemoryMB + o.MemoryMB, WorkspaceMB: l.WorkspaceMB + o.WorkspaceMB}
}

// exceeds says what of held+lim is past share (a 0 in share: no cap), or
// "".
func exceeds(held, lim, share Limits) string {
	var out []string
	if share.Pids > 0 && lim.Pids > 0 && held.Pids+lim.Pids > share.Pids {
		out = append(out, fmt.Sprintf("processes (%d reserved of %d; this create asks for %d)", held.Pids, share.Pids, lim.Pids))
	}
	if share.MemoryMB > 0 && lim.MemoryMB > 0 && held.MemoryMB+lim.MemoryMB > share.MemoryMB {
		out = append(out, fmt.Sprintf("memory (%d MiB reserved of %d; this create asks for %d)", held.MemoryMB, share.MemoryMB, lim.MemoryMB))
	}
	if share.WorkspaceMB > 0 && lim.WorkspaceMB > 0 && held.WorkspaceMB+lim.WorkspaceMB > share.WorkspaceMB {
		out = append(out, fmt.Sprintf("workspace space (%d MiB reserved of %d; this create asks for %d)", held.WorkspaceMB, share.WorkspaceMB, lim.WorkspaceMB))
	}
	return strings.Join(out, " and ")
}

// shareNote says what the host share is, for Info.
func (p *Provider) shareNote() string {
	how := "reserved by their limits at create and capped in their parent control group"
	if p.cg == nil {
		how = "reserved by their workspace limits at create; no control groups here"
	}
	note := fmt.Sprintf("host share (all sandboxes together, %s): pids %d, memory %d MiB", how,
		p.hostShare.Pids, p.hostShare.MemoryMB)
	if p.hostShare.WorkspaceMB > 0 {
		note += fmt.Sprintf(", workspace %d MiB", p.hostShare.WorkspaceMB)
	} else {
		note += ", workspace not reserved (LOCAL_HOST_WORKSPACE_MB unset)"
	}
	if t := p.tenantShare; t.Pids > 0 || t.MemoryMB > 0 || t.WorkspaceMB > 0 {
		note += fmt.Sprintf("; per tenant: pids %d, memory %d MiB, workspace %d MiB (0: the host share)", t.Pids, t.MemoryMB, t.WorkspaceMB)
	}
	return note + "; a create that does not fit is QUOTA_EXCEEDED"
}
