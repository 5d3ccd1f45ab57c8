package store_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// beat registers nodes as alive, with the local provider.
func (b bundle) beat(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := b.st.Heartbeat(b.ctx, store.Node{ID: id, URL: "http://" + id, Providers: []string{"local", "sim"}}, true); err != nil {
			t.Fatal(err)
		}
	}
}

// kill makes a node's last heartbeat an hour old: dead.
func (b bundle) kill(t *testing.T, id string) {
	t.Helper()
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE nodes SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

func local(p *domain.CreateParams) { p.Provider = "local" }

// TestClaimsPlaceOnTheClaimingNode: a host-bound create is placed on the
// node that claims it; only that node releases it and retries it while it
// is alive; once it is dead another node may take a lapsed create over.
func TestClaimsPlaceOnTheClaimingNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.beat(t, "n1", "n2")

	sb := b.create(t, local)
	claims, err := b.st.ClaimCreates(b.ctx, "local", "n1", "w1", 10, 10*time.Second, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("ClaimCreates on n1 = %d, %v; want 1", len(claims), err)
	}
	if got := claims[0].Sandbox.Node; got != "n1" {
		t.Fatalf("claimed sandbox's node = %q, want n1", got)
	}
	evs := b.events(t, sb.ID)
	if msg := evs[len(evs)-1].Message; !strings.Contains(msg, "on node n1") {
		t.Errorf("claim event says %q; want it to name the node", msg)
	}

	// Its lease lapses: no other node takes it, even once n1 is dead (its
	// interrupted call may have left it running there); it is stranded.
	b.clock.Advance(11 * time.Second)
	if claims, _ := b.st.ClaimCreates(b.ctx, "local", "n2", "w2", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatalf("n2 reclaimed a lapsed create of live node n1")
	}
	b.kill(t, "n1")
	if claims, _ := b.st.ClaimCreates(b.ctx, "local", "n2", "w2", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatalf("n2 reclaimed a lapsed create of dead node n1: it could run twice")
	}
	if st, err := b.st.StrandedSandboxes(b.ctx, 10); err != nil || len(st) != 1 || st[0].ID != sb.ID {
		t.Fatalf("stranded = %+v, %v; want n1's creating sandbox", st, err)
	}
	ended, ok, err := b.st.MarkStranded(b.ctx, sb.ID, "n1", "its node n1 died")
	if err != nil || !ok || ended.State != domain.StateCancelled || ended.Reason != domain.ReasonLost {
		t.Fatalf("MarkStranded of a creating sandbox = %+v, %v, %v; want cancelled, reason lost", ended, ok, err)
	}

	// Ended: only its node releases it, when it comes back.
	b.clock.Advance(11 * time.Second)
	if claims, _ := b.st.ClaimReleases(b.ctx, "local", "n2", "w2", 10, time.Second, store.Share{}); len(claims) != 0 {
		t.Fatal("n2 claimed the release of a sandbox placed on n1")
	}
	b.beat(t, "n1")
	if claims, err := b.st.ClaimReleases(b.ctx, "local", "n1", "w1", 10, time.Second, store.Share{}); err != nil || len(claims) != 1 {
		t.Fatalf("n1's release claim = %d, %v; want its sandbox", len(claims), err)
	}

	// Without a node (a provider that is not host-bound) nothing changes.
	b.create(t)
	if claims, err := b.st.ClaimCreates(b.ctx, "sim", "", "w3", 10, time.Minute, store.Share{}); err != nil || len(claims) != 1 || claims[0].Sandbox.Node != "" {
		t.Fatalf("sim claim = %+v, %v; want one, with no node", claims, err)
	}
}

// TestStrandedAndNodes: ready sandboxes of a dead node are stranded, those
// of a live node are not; Nodes and NodeLoad count per node.
func TestStrandedAndNodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.beat(t, "n1", "n2")
	ready := func(node string) domain.Sandbox {
		t.Helper()
		b.create(t, local)
		claims, err := b.st.ClaimCreates(b.ctx, "local", node, "w-"+node, 1, time.Minute, store.Share{})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim on %s: %d, %v", node, len(claims), err)
		}
		sb, err := b.st.MarkReady(b.ctx, claims[0].Sandbox.ID, claims[0].Sandbox.Epoch, domain.Resource{SandboxID: claims[0].Sandbox.ID})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	on1, on2a, _ := ready("n1"), ready("n2"), ready("n2")

	load, err := b.st.NodeLoad(b.ctx, "local", "n2")
	if err != nil || load != (store.Load{Own: 2, Least: 1, Nodes: 2, Serves: true}) {
		t.Fatalf("NodeLoad(n2) = %+v, %v; want own 2, least 1 of 2 nodes", load, err)
	}
	if st, err := b.st.StrandedSandboxes(b.ctx, 100); err != nil || len(st) != 0 {
		t.Fatalf("stranded with every node alive = %+v, %v; want none", st, err)
	}

	b.kill(t, "n2")
	stranded, err := b.st.StrandedSandboxes(b.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, s := range stranded {
		if s.Node != "n2" {
			t.Errorf("stranded %s names node %q, want n2", s.ID, s.Node)
		}
		ids = append(ids, s.ID)
	}
	if len(ids) != 2 || !slices.Contains(ids, on2a.ID) || slices.Contains(ids, on1.ID) {
		t.Fatalf("stranded = %v; want n2's two sandboxes and not n1's %s", ids, on1.ID)
	}

	nodes, err := b.st.Nodes(b.ctx, "acme")
	if err != nil || len(nodes) != 2 {
		t.Fatalf("Nodes = %+v, %v", nodes, err)
	}
	if n := nodes[0]; n.ID != "n1" || !n.Alive || n.LiveSandboxes != 1 {
		t.Errorf("node n1 = %+v; want alive with 1 sandbox", n)
	}
	if n := nodes[1]; n.ID != "n2" || n.Alive || n.LiveSandboxes != 2 {
		t.Errorf("node n2 = %+v; want dead with 2 sandboxes", n)
	}
	if other, _ := b.st.Nodes(b.ctx, "other"); other[0].LiveSandboxes != 0 {
		t.Errorf("another tenant sees %d sandboxes on n1; want 0", other[0].LiveSandboxes)
	}
	// A dead node is a live one again after a heartbeat, and a sandbox found
	// stranded before that beat is not ended after it.
	b.beat(t, "n2")
	if st, _ := b.st.StrandedSandboxes(b.ctx, 100); len(st) != 0 {
		t.Fatalf("stranded after n2's heartbeat = %+v; want none", st)
	}
	if _, ended, err := b.st.MarkStranded(b.ctx, stranded[0].ID, "n2", "test"); err != nil || ended {
		t.Fatalf("MarkStranded after its node beat again = %v, %v; want nothing ended", ended, err)
	}
	b.kill(t, "n2")
	if sb, ended, err := b.st.MarkStranded(b.ctx, stranded[0].ID, "n2", "its node n2 died"); err != nil || !ended || sb.Reason != domain.ReasonLost {
		t.Fatalf("MarkStranded of a dead node's sandbox = %+v, %v, %v; want it ended lost", sb, ended, err)
	}
}

// TestAdoptUnplaced: sandboxes made before nodes existed join the only
// live node; with another node alive, nobody adopts them.
func TestAdoptUnplaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, local)
	if claims, err := b.st.ClaimCreates(b.ctx, "local", "", "old", 1, time.Minute, store.Share{}); err != nil || len(claims) != 1 {
		t.Fatal("claim without a node", err)
	}
	b.beat(t, "n1", "n2")
	if n, err := b.st.AdoptUnplaced(b.ctx, "n1", []string{"local"}); err != nil || n != 0 {
		t.Fatalf("AdoptUnplaced with another node alive = %d, %v; want 0", n, err)
	}
	b.kill(t, "n2")
	if n, err := b.st.AdoptUnplaced(b.ctx, "n1", []string{"local"}); err != nil || n != 1 {
		t.Fatalf("AdoptUnplaced alone = %d, %v; want 1", n, err)
	}
}

// TestClusterSecret: made once, the same for every caller.
func TestClusterSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.st.ClusterSecret(b.ctx)
	if err != nil || len(first) < 32 {
		t.Fatalf("ClusterSecret = %x, %v", first, err)
	}
	again, err := b.st.ClusterSecret(b.ctx)
	if err != nil || string(again) != string(first) {
		t.Fatalf("second ClusterSecret = %x, %v; want the first", again, err)
	}
}

// TestStats: the registry's counters count live sandboxes by provider and
// state, the ended ones not yet released, and each node with whether it
// is alive and its live sandboxes of every tenant.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.beat(t, "n1", "n2")
	b.kill(t, "n2")
	b.create(t) // stays requested
	b.create(t, local)
	b.create(t, local, func(p *domain.CreateParams) { p.Tenant = "other" })
	claims, err := b.st.ClaimCreates(b.ctx, "local", "n1", "w", 2, time.Minute, store.Share{})
	if err != nil || len(claims) != 2 {
		t.Fatalf("ClaimCreates = %d, %v; want 2", len(claims), err)
	}
	// The first is made and ended, and waits for its release; the other
	// stays creating on n1.
	done := claims[0].Sandbox
	if _, err := b.st.MarkReady(b.ctx, done.ID, done.Epoch, domain.Resource{ProviderID: "p"}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	if _, _, err := b.st.EndSandbox(b.ctx, done.Tenant, done.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
		t.Fatal(err)
	}
	// A requested sandbox ended is released at once: it counts nowhere.
	gone := b.create(t)
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", gone.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
		t.Fatal(err)
	}

	st, err := b.st.Stats(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLive := map[[2]string]int64{{"sim", "requested"}: 1, {"local", "creating"}: 1}
	if !maps.Equal(st.Live, wantLive) {
		t.Errorf("Live = %v, want %v", st.Live, wantLive)
	}
	if st.Unreleased != 1 || st.OldestUnreleased == nil || !st.OldestUnreleased.Equal(b.st.Now()) {
		t.Errorf("Unreleased = %d since %v, want 1 since %v", st.Unreleased, st.OldestUnreleased, b.st.Now())
	}
	got := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		got[i] = fmt.Sprintf("%s alive=%t live=%d", n.ID, n.Alive, n.LiveSandboxes)
	}
	if want := []string{"n1 alive=true live=1", "n2 alive=false live=0"}; !slices.Equal(got, want) {
		t.Errorf("Nodes = %v, want %v", got, want)
	}
}
