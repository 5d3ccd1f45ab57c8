package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// TestPlanOrphans is the table of which provider resources the janitor
// destroys, without a database or a provider.
func TestPlanOrphans(t *testing.T) {
	t.Parallel()
	listed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const grace = 30 * time.Second
	old, young := listed.Add(-time.Minute), listed.Add(-10*time.Second)
	at := func(tm time.Time) *time.Time { return &tm }
	cases := []struct {
		name    string
		created time.Time
		rec     *store.Record // nil: the registry has no such sandbox
		destroy string        // what the why must say, "" to keep it
	}{
		{"unknown, old", old, nil, "no sandbox in the registry"},
		// A create may be recording its sandbox right now.
		{"unknown, young", young, nil, ""},
		{"live: requested", old, &store.Record{State: domain.StateRequested}, ""},
		{"live: creating", old, &store.Record{State: domain.StateCreating}, ""},
		{"live: ready", old, &store.Record{State: domain.StateReady}, ""},
		// Ended but not yet released: the executor's release owns it.
		{"terminated, release pending", old, &store.Record{State: domain.StateTerminated, EndedAt: at(old)}, ""},
		{"terminated, released long ago", old, &store.Record{State: domain.StateTerminated, Released: true, EndedAt: at(old)}, "terminated sandbox already released"},
		{"cancelled, released just now", old, &store.Record{State: domain.StateCancelled, Released: true, EndedAt: at(young)}, ""},
		// A late creation: the resource is newer than the sandbox's end.
		{"failed, released, resource young", young, &store.Record{State: domain.StateFailed, Released: true, EndedAt: at(old)}, ""},
		// This inventory is node n1's (see planOrphans' call below).
		{"ready on this node", old, &store.Record{State: domain.StateReady, Node: "n1"}, ""},
		// A create re-placed on n2 after n1 was dead: n1's copy goes.
		{"ready on another node", old, &store.Record{State: domain.StateReady, Node: "n2"}, "placed on node n2"},
		{"ready on another node, resource young", young, &store.Record{State: domain.StateReady, Node: "n2"}, ""},
		{"ended on this node, release pending", old, &store.Record{State: domain.StateTerminated, Node: "n1", EndedAt: at(old)}, ""},
	}
	held := map[string]domain.Resource{}
	records := map[string]store.Record{}
	for _, tc := range cases {
		held[tc.name] = domain.Resource{SandboxID: tc.name, CreatedAt: tc.created}
		if tc.rec != nil {
			rec := *tc.rec
			rec.ID, rec.Tenant = tc.name, "acme"
			records[tc.name] = rec
		}
	}
	got := map[string]orphan{}
	for _, o := range planOrphans(held, records, "n1", listed, grace) {
		got[o.id] = o
	}
	for _, tc := range cases {
		o, destroyed := got[tc.name]
		switch {
		case tc.destroy == "" && destroyed:
			t.Errorf("%s: destroyed (%s), want kept", tc.name, o.why)
		case tc.destroy != "" && !destroyed:
			t.Errorf("%s: kept, want destroyed", tc.name)
		case destroyed && !strings.Contains(o.why, tc.destroy):
			t.Errorf("%s: why = %q, want it to say %q", tc.name, o.why, tc.destroy)
		case destroyed && tc.rec != nil && o.tenant != "acme":
			t.Errorf("%s: tenant = %q, want the sandbox's", tc.name, o.tenant)
		}
	}
}

// TestLostIn: a ready sandbox is lost when the inventory lacks it or holds
// it defunct.
func TestLostIn(t *testing.T) {
	t.Parallel()
	held := map[string]domain.Resource{
		"running": {SandboxID: "running"},
		"defunct": {SandboxID: "defunct", Defunct: true},
	}
	var lost []string
	for _, id := range []string{"running", "defunct", "missing"} {
		if lostIn(held, id) {
			lost = append(lost, id)
		}
	}
	if want := []string{"defunct", "missing"}; !slices.Equal(lost, want) {
		t.Errorf("lost = %v, want %v", lost, want)
	}
}
