package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/test/harness"
)

// The hosts' whole inventory (TestChaosNodes): every kind of resource a
// local create makes (harness.Holdings, harness.SandboxCgroups), taken
// after the storm and again after a grace period. A resource is leaked
// when the registry says its sandbox was released, does not know it, or
// placed it on another node: a sandbox ended but not yet released may
// still hold its resources (the unreleased check covers it).

// holdingsGrace is how long after the first inventory the second is
// taken: the orphan grace, two janitor intervals and a second.
const holdingsGrace = 2*time.Second + 2*janitorInterval + time.Second

// record is what the registry says of a sandbox, for the inventory.
type record struct {
	node     string
	released bool
}

// inventory is the hosts' holdings and the machine's sandbox control
// groups at one moment. The machine's groups and network namespaces are
// shared with every other test that runs local sandboxes here: only those
// of sandboxes this run made (a host had their folder) count.
type inventory struct {
	hosts   map[string]harness.Holdings // by host name
	cgroups []string
}

func (h *chaos) takeInventory() (inventory, error) {
	inv := inventory{hosts: map[string]harness.Holdings{}}
	lives, _ := h.folders.record()
	for _, host := range h.hosts.List {
		hold, err := host.Holdings()
		if err != nil {
			return inv, err
		}
		// /run/netns shows every network namespace of the machine's
		// (the hosts share it): only this run's sandboxes' count.
		for id, kinds := range hold {
			if _, ours := lives[id]; !ours {
				hold[id] = slices.DeleteFunc(kinds, func(k string) bool { return k == "netns" })
			}
		}
		inv.hosts[host.Name] = hold
	}
	cgroups, err := harness.SandboxCgroups()
	for _, id := range cgroups {
		if _, ours := lives[id]; ours {
			inv.cgroups = append(inv.cgroups, id)
		}
	}
	return inv, err
}

// registry reads what the registry says of every sandbox, and which
// snapshots it still has.
func registry(ctx context.Context, conn *pgx.Conn) (map[string]record, map[string]bool, error) {
	rows, err := conn.Query(ctx, `SELECT id, coalesce(node, ''), released FROM sandboxes`)
	if err != nil {
		return nil, nil, err
	}
	recs := map[string]record{}
	var id string
	var r record
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.node, &r.released}, func() error {
		recs[id] = r
		return nil
	}); err != nil {
		return nil, nil, err
	}
	rows, err = conn.Query(ctx, `SELECT id FROM snapshots WHERE state IN ('creating', 'ready')`)
	if err != nil {
		return nil, nil, err
	}
	snaps := map[string]bool{}
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		snaps[id] = true
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return recs, snaps, nil
}

// leaked returns the inventory's leaks, as "id kind@host" (cgroups
// "id cgroup"), against the registry's records and live snapshots.
func (inv inventory) leaked(recs map[string]record, snaps map[string]bool) []string {
	var out []string
	for host, hold := range inv.hosts {
		for id, kinds := range hold {
			for _, kind := range kinds {
				if why := leakOf(id, kind, host, recs, snaps); why != "" {
					out = append(out, fmt.Sprintf("%s %s@%s (%s)", id, kind, host, why))
				}
			}
		}
	}
	for _, id := range inv.cgroups {
		if r, ok := recs[id]; !ok || r.released {
			out = append(out, id+" cgroup (of a sandbox released or unknown)")
		}
	}
	slices.Sort(out)
	return out
}

// leakOf says why a host's resource is a leak, or "".
func leakOf(id, kind, host string, recs map[string]record, snaps map[string]bool) string {
	switch kind {
	case "snapshot":
		if !snaps[id] {
			return "a snapshot the catalog does not keep"
		}
		return ""
	case "veth":
		suffix := strings.TrimPrefix(id, "veth:")
		for sid, r := range recs {
			if strings.HasSuffix(sid, suffix) && !r.released && r.node == host {
				return ""
			}
		}
		return "of no unreleased sandbox on this node"
	}
	r, ok := recs[id]
	switch {
	case !ok:
		return "a sandbox the registry does not know"
	case r.released:
		return "a sandbox already released"
	case r.node != "" && r.node != host:
		return "a sandbox placed on " + r.node
	}
	return ""
}

// checkHoldings takes the inventory now and again after holdingsGrace, and
// returns the leaks of each.
func (h *chaos) checkHoldings(ctx context.Context, conn *pgx.Conn) (first, second []string) {
	take := func() []string {
		// The registry first: what it calls released before the
		// inventory sees it still there is leaked, whatever happens
		// between the two reads.
		recs, snaps, err := registry(ctx, conn)
		if err != nil {
			h.t.Fatal(err)
		}
		inv, err := h.takeInventory()
		if err != nil {
			h.t.Fatal(err)
		}
		return inv.leaked(recs, snaps)
	}
	first = take()
	time.Sleep(holdingsGrace)
	return first, take()
}
