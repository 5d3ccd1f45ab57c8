package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
)

// hostSim is the real sim provider declared host-bound: one per simulated
// host, each with its own inventory folder, like local.
type hostSim struct{ *sim.Provider }

func (hostSim) HostBound() bool { return true }

// TestJanitorsOfTwoNodes: each node's janitor judges only the sandboxes
// placed on it, so neither marks the other's lost; when a node dies its
// ready sandboxes end lost naming it, and nothing of the live node's is
// touched; a resource of a sandbox placed elsewhere is an orphan.
func TestJanitorsOfTwoNodes(t *testing.T) {
	t.Parallel()
	e := setupWith(t, nil)
	hosts := map[string]hostSim{}
	janitors := map[string]*lifecycle.Janitor{}
	for _, node := range []string{"n1", "n2"} {
		p, err := sim.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		hosts[node] = hostSim{p}
		// An orphan grace of zero (1ns): nothing here is being recorded.
		janitors[node] = lifecycle.NewJanitor(lifecycle.JanitorConfig{Holder: node, Node: node, OrphanGrace: time.Nanosecond, NodeGrace: time.Nanosecond},
			e.st, []domain.Provider{hosts[node]}, e.log, nil)
		if err := e.st.Heartbeat(e.ctx, store.Node{ID: node, URL: "http://" + node, Providers: []string{"sim"}}, true); err != nil {
			t.Fatal(err)
		}
	}
	readyOn := func(node string) domain.Sandbox {
		t.Helper()
		sb := e.create("")
		claims, err := e.st.ClaimCreates(e.ctx, "sim", node, "w-"+node, 1, time.Hour, store.Share{})
		if err != nil || len(claims) != 1 || claims[0].Sandbox.ID != sb.ID {
			t.Fatalf("claim on %s: %v %v", node, claims, err)
		}
		res, err := hosts[node].Create(e.ctx, domain.CreateSpec{SandboxID: sb.ID})
		if err != nil {
			t.Fatal(err)
		}
		if sb, err = e.st.MarkReady(e.ctx, sb.ID, claims[0].Sandbox.Epoch, res); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	get := func(id string) domain.Sandbox {
		t.Helper()
		sb, err := e.st.Sandbox(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	run := func(node string) lifecycle.Report {
		t.Helper()
		rep, err := janitors[node].RunOnce(e.ctx)
		if err != nil {
			t.Fatalf("janitor of %s: %v", node, err)
		}
		return rep
	}
	on1, on2 := readyOn("n1"), readyOn("n2")
	time.Sleep(10 * time.Millisecond) // past the readiness grace, on the wall clock
	for _, node := range []string{"n1", "n2", "n1"} {
		if rep := run(node); rep.Lost != 0 || rep.Stranded != 0 || rep.OrphansDestroyed != 0 {
			t.Fatalf("janitor of %s with both nodes alive: %+v; want nothing done", node, rep)
		}
	}
	for _, sb := range []domain.Sandbox{on1, on2} {
		if got := get(sb.ID); got.State != domain.StateReady {
			t.Fatalf("%s on %s is %s; want ready", sb.ID, sb.Node, got.State)
		}
	}

	// n1's copy of a sandbox placed on n2 (a create re-placed) is an orphan.
	if _, err := hosts["n1"].Create(e.ctx, domain.CreateSpec{SandboxID: on2.ID}); err != nil {
		t.Fatal(err)
	}
	if rep := run("n1"); rep.OrphansDestroyed != 1 {
		t.Fatalf("n1's janitor destroyed %d orphans; want its copy of n2's sandbox", rep.OrphansDestroyed)
	}
	if got := get(on2.ID); got.State != domain.StateReady {
		t.Fatalf("n2's sandbox is %s after n1 destroyed its copy; want ready", got.State)
	}

	// n2 dies: its ready sandbox ends lost, naming it; n1's is untouched.
	if _, err := e.st.Pool().Exec(e.ctx, `UPDATE nodes SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = 'n2'`); err != nil {
		t.Fatal(err)
	}
	// A janitor that has not yet reached Postgres for a whole grace period
	// (just started, or back from an outage) judges no node dead: every
	// live node must have had time to beat again.
	fresh := lifecycle.NewJanitor(lifecycle.JanitorConfig{Holder: "fresh", Node: "n1", NodeGrace: time.Hour},
		e.st, []domain.Provider{hosts["n1"]}, e.log, nil)
	if rep, err := fresh.RunOnce(e.ctx); err != nil || rep.Stranded != 0 {
		t.Fatalf("a fresh janitor ended %d sandboxes of a dead node (%v); want none before a grace period", rep.Stranded, err)
	}
	if rep := run("n1"); rep.Stranded != 1 || rep.Lost != 0 {
		t.Fatalf("n1's janitor after n2 died: %+v; want 1 stranded", rep)
	}
	got := get(on2.ID)
	if got.State != domain.StateTerminated || got.Reason != domain.ReasonLost {
		t.Fatalf("dead n2's sandbox = %s/%s; want terminated/lost", got.State, got.Reason)
	}
	events, err := e.st.SandboxEvents(e.ctx, on2.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; !strings.Contains(last.Message, "node n2") {
		t.Fatalf("the lost event says %q; want it to name node n2", last.Message)
	}
	if got := get(on1.ID); got.State != domain.StateReady {
		t.Fatalf("live n1's sandbox is %s; want ready", got.State)
	}
}

// TestExecutorsPlaceOverNodes: executors on two nodes of a host-bound
// provider share a burst of creates, each sandbox is made on the node it
// is placed on, and released there.
func TestExecutorsPlaceOverNodes(t *testing.T) {
	t.Parallel()
	e := setupWith(t, nil)
	hosts := map[string]hostSim{}
	for _, node := range []string{"n1", "n2"} {
		p, err := sim.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		hosts[node] = hostSim{p}
		if err := e.st.Heartbeat(e.ctx, store.Node{ID: node, URL: "http://" + node, Providers: []string{"sim"}}, true); err != nil {
			t.Fatal(err)
		}
		e.executorOf(lifecycle.ExecutorConfig{WorkerID: "w-" + node, Node: node}, hosts[node])
	}
	const n = 24
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.create("").ID
	}
	placed := map[string]int{}
	for _, id := range ids {
		sb := e.waitFor(id, "ready", isState(domain.StateReady))
		placed[sb.Node]++
		held, err := hosts[sb.Node].List(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !heldIn(held, id) {
			t.Fatalf("%s is placed on %s but that node does not hold it", id, sb.Node)
		}
	}
	// Without placement the first executor to wake would take as many as
	// it has slots (16) and leave the other 8.
	if placed["n1"]+placed["n2"] != n || max(placed["n1"], placed["n2"])-min(placed["n1"], placed["n2"]) > 6 {
		t.Fatalf("placement = %v; want all %d spread evenly (within 6) over both nodes", placed, n)
	}
	t.Logf("placement of %d creates: %v", n, placed)
	for _, id := range ids {
		if _, _, err := e.st.EndSandbox(e.ctx, "acme", id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		e.waitFor(id, "released", isReleased)
	}
	for node, p := range hosts {
		if held, _ := p.List(e.ctx); len(held) != 0 {
			t.Fatalf("node %s still holds %d resources after every release", node, len(held))
		}
	}
}

func heldIn(held []domain.Resource, id string) bool {
	for _, r := range held {
		if r.SandboxID == id {
			return true
		}
	}
	return false
}

// TestNodeWithoutTheProviderClaimsNone: a node whose host-bound provider is
// unavailable (its heartbeat does not offer it) draws none of its creates
// while another node offers it.
func TestNodeWithoutTheProviderClaimsNone(t *testing.T) {
	t.Parallel()
	e := setupWith(t, nil)
	offers := map[string][]string{"ok": {"sim"}, "broken": {}}
	for _, node := range []string{"ok", "broken"} {
		p, err := sim.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.st.Heartbeat(e.ctx, store.Node{ID: node, URL: "http://" + node, Providers: offers[node]}, true); err != nil {
			t.Fatal(err)
		}
		e.executorOf(lifecycle.ExecutorConfig{WorkerID: "w-" + node, Node: node}, hostSim{p})
	}
	for range 8 {
		sb := e.waitFor(e.create("").ID, "ready", isState(domain.StateReady))
		if sb.Node != "ok" {
			t.Fatalf("%s was placed on %q; want the node that offers the provider", sb.ID, sb.Node)
		}
	}
}
