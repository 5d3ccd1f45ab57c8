package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/test/harness"
)

// The chaos checks, each shown to fail on a fault planted in what it
// reads, and to pass without it. They run with the other tests (not in
// -short's skip): a check that cannot fail proves nothing.

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// TestBoundsFromEveryLapse: a lease that lapses and is renewed later must
// have ended its sandboxes at the lapse, not at the renewal; the final
// expiry alone would hide that.
func TestBoundsFromEveryLapse(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	book := newLeaseBook()
	book.create("sbx-old", "o", at(0), at(0.01))
	book.heartbeat("o", at(0.02), at(0.03), at(3.02))
	// Planted: no heartbeat until 10 s, then a new lease; the old sandbox
	// was ended at the renewal, 7 s after the lapse.
	book.heartbeat("o", at(10), at(10.01), at(13))
	book.create("sbx-new", "o", at(10.02), at(10.03))
	sandboxes := map[string]ended{
		"sbx-old": {owner: "o", endedAt: at(10.005), released: at(10.2)},
		"sbx-new": {owner: "o", endedAt: at(13.4), released: at(13.6)},
	}
	bs := book.bounds(sandboxes, nil, ttl, time.Time{}, time.Time{})
	over := overshoots(bs, janitorInterval+overshootSlack)
	if len(over) != 1 || !strings.HasPrefix(over[0], "sbx-old +6.985s") {
		t.Fatalf("overshoots = %v; want sbx-old, 6.985 s after its lapse at 3.02 s", over)
	}
	f := figures(bs)
	if f.ended.n != 2 || f.ended.max != 6985*time.Millisecond || f.released.max != 7180*time.Millisecond {
		t.Errorf("figures = %s; want 2 ended, max 6.985 s to the end and 7.18 s to the release", f)
	}

	// Without the planted fault (ended within an interval of the lapse),
	// nothing is flagged.
	sandboxes["sbx-old"] = ended{owner: "o", endedAt: at(3.5)}
	if over := overshoots(book.bounds(sandboxes, nil, ttl, time.Time{}, time.Time{}), janitorInterval+overshootSlack); len(over) != 0 {
		t.Errorf("overshoots = %v; want none", over)
	}
}

// TestLapsesWhereUnsure: a heartbeat that got no answer may have renewed
// the lease: no lapse is scored where it might not have been one; an
// outage credit moves the lapse by its length.
func TestLapsesWhereUnsure(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	grants := []grant{
		{sent: at(0), recv: at(0.01), expires: at(3)},
		{sent: at(2.5), recv: at(12.5), maybe: true}, // unanswered
	}
	if ls := lapses(grants, nil, ttl); len(ls) != 0 {
		t.Errorf("lapses = %v; want none scored (the unanswered heartbeat may have renewed until 15.5 s)", ls)
	}
	grants = grants[:1]
	if ls := lapses(grants, nil, ttl); len(ls) != 1 || !ls[0].Equal(at(3)) {
		t.Errorf("lapses = %v; want 3 s", ls)
	}
	credits := []credit{{from: at(2), to: at(4), ceiling: time.Minute}}
	if ls := lapses(grants, credits, ttl); len(ls) != 1 || !ls[0].Equal(at(5)) {
		t.Errorf("lapses with a 2 s credit = %v; want 5 s", ls)
	}
	// A create naming the owner while the clients knew its lease live
	// starts no lease; one after the owner was ended may.
	book := newLeaseBook()
	book.heartbeat("o", at(0), at(0.01), at(3))
	book.create("a", "o", at(1), at(1.01))
	book.release("o", at(1.5))
	book.create("b", "o", at(2), at(2.01))
	if n := len(book.grants["o"]); n != 2 || !book.grants["o"][1].maybe {
		t.Errorf("grants = %+v; want the heartbeat and one maybe grant (the create after the release)", book.grants["o"])
	}
}

// TestUnaccountedCreates: an accepted create the registry lost, or that
// never settled, is reported.
func TestUnaccountedCreates(t *testing.T) {
	t.Parallel()
	got := unaccounted([]string{"a", "b", "c"}, map[string]string{"a": "ready", "c": "creating"})
	want := []string{"b accepted, not in the registry", "c accepted, still creating"}
	if !slices.Equal(got, want) {
		t.Errorf("unaccounted = %v; want %v", got, want)
	}
	if got := unaccounted([]string{"a"}, map[string]string{"a": "terminated"}); len(got) != 0 {
		t.Errorf("unaccounted = %v; want none", got)
	}
}

// TestOverlappingCreates: two create calls of one sandbox at once, on two
// replicas, are found in calls.log, including one cut short by its
// process's death; calls one after the other are not.
func TestOverlappingCreates(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		"begin create sbx_a 100 1 2026-12-07T10:00:00Z",
		"end create sbx_a 100 1 2026-12-07T10:00:00Z 2026-12-07T10:00:01Z made",
		"begin create sbx_a 200 2 2026-12-07T10:00:02Z",
		"end create sbx_a 200 2 2026-12-07T10:00:02Z 2026-12-07T10:00:03Z exists",
		// Planted: pid 300's call never ended; it died at 10:00:06, after
		// pid 400's began.
		"begin create sbx_b 300 1 2026-12-07T10:00:04Z",
		"begin create sbx_b 400 2 2026-12-07T10:00:05Z",
		"end create sbx_b 400 2 2026-12-07T10:00:05Z 2026-12-07T10:00:07Z made",
		"begin destroy sbx_b 400 0 2026-12-07T10:00:08Z",
		"end destroy sbx_b 400 0 2026-12-07T10:00:08Z 2026-12-07T10:00:08.5Z removed",
	}, "\n")
	calls, err := parseCalls(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	died := func(pid int) time.Time {
		if pid == 300 {
			return at(6)
		}
		return time.Time{}
	}
	got := overlappingCreates(calls, died, at(60))
	if len(got) != 1 || !strings.HasPrefix(got[0], "sbx_b:") {
		t.Errorf("overlapping = %v; want sbx_b only", got)
	}
	if r := removals(calls); !r["sbx_b"].Equal(at(8.5)) || len(r) != 1 {
		t.Errorf("removals = %v; want sbx_b at 8.5 s", r)
	}
	if _, err := parseCalls(strings.NewReader("begin create sbx_c x 1 now")); err == nil {
		t.Error("a malformed line parsed")
	}
}

// TestMadeTwice: a sandbox's folders on two hosts, or twice at once on
// one, are duplicates; remade one after the other is counted apart.
func TestMadeTwice(t *testing.T) {
	t.Parallel()
	lives := map[string][]life{
		"two-hosts": {{host: "h1", from: at(0), to: at(1)}, {host: "h2", from: at(5), to: at(6)}},
		"at-once":   {{host: "h1", from: at(0), to: at(4)}, {host: "h1", from: at(2), to: at(3)}},
		"remade":    {{host: "h1", from: at(0), to: at(1)}, {host: "h1", from: at(2)}},
		"once":      {{host: "h2", from: at(0), to: at(9)}},
	}
	twice, remade := madeTwice(lives)
	if want := []string{"at-once twice at once on h1", "two-hosts on 2 hosts"}; !slices.Equal(twice, want) || remade != 2 {
		t.Errorf("madeTwice = %v, %d remade; want %v and 2 remade (at-once and remade)", twice, remade, want)
	}
	if g := gone(lives); !g["once"].Equal(at(9)) || !g["two-hosts"].Equal(at(6)) || !g["remade"].IsZero() {
		t.Errorf("gone = %v", g)
	}
}

// TestLeakedHoldings: what a host holds of a released, unknown or
// elsewhere-placed sandbox is a leak; what it holds of one not yet
// released, on its node, is not.
func TestLeakedHoldings(t *testing.T) {
	t.Parallel()
	inv := inventory{
		hosts: map[string]harness.Holdings{
			"h1": {"live": {"process", "folder", "loop"}, "done": {"loop"}, "ghost": {"cgroup"}, "moved": {"folder"},
				"veth:abcdefabcdef": {"veth"}, "snp_gone": {"snapshot"}},
		},
		cgroups: []string{"live", "done"},
	}
	recs := map[string]record{"live": {node: "h1"}, "done": {node: "h1", released: true}, "moved": {node: "h2"}}
	got := inv.leaked(recs, map[string]bool{})
	var ids []string
	for _, g := range got {
		id, rest, _ := strings.Cut(g, " ")
		kind, _, _ := strings.Cut(rest, " ")
		ids = append(ids, id+" "+kind)
	}
	want := []string{"done cgroup", "done loop@h1", "ghost cgroup@h1", "moved folder@h1", "snp_gone snapshot@h1", "veth:abcdefabcdef veth@h1"}
	if !slices.Equal(ids, want) {
		t.Errorf("leaked = %v; want %v", ids, want)
	}
}

// TestHoldingsOfARealHost: a loop device and a control group left of a
// sandbox, planted on a simulated host, are in its inventory, as leaks of
// a sandbox the registry does not know.
func TestHoldingsOfARealHost(t *testing.T) {
	harness.RequireHosts(t)
	hosts := harness.NewHosts(t, 1)
	host := hosts.List[0]
	id := domain.NewID()
	dir := filepath.Join(host.StateDir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "workspace.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	// A control group of the sandbox's, as the provider names them.
	planted := ""
	for _, base := range cgroupBases(t) {
		if err := os.MkdirAll(filepath.Join(base, id), 0o755); err == nil {
			planted = filepath.Join(base, id)
			t.Cleanup(func() { _ = os.Remove(planted) })
			break
		}
	}
	hold, err := host.Holdings()
	if err != nil {
		t.Fatal(err)
	}
	if kinds := hold[id]; !slices.Contains(kinds, "loop") || !slices.Contains(kinds, "folder") {
		t.Errorf("holdings of %s = %v; want its folder and loop device", id, kinds)
	}
	cgroups, err := harness.SandboxCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if planted != "" && !slices.Contains(cgroups, id) {
		t.Errorf("control groups %v lack the planted %s", cgroups, planted)
	}
	inv := inventory{hosts: map[string]harness.Holdings{host.Name: hold}, cgroups: cgroups}
	leaks := strings.Join(inv.leaked(map[string]record{}, nil), "\n")
	for _, want := range []string{id + " loop@" + host.Name, id + " folder@" + host.Name} {
		if !strings.Contains(leaks, want) {
			t.Errorf("leaks:\n%s\nlack %q", leaks, want)
		}
	}
	if planted != "" && !strings.Contains(leaks, id+" cgroup") {
		t.Errorf("leaks:\n%s\nlack the planted control group", leaks)
	}
}

// cgroupBases are where the local provider would make a sandbox's control
// groups when it runs in this process's groups: tether under each v1
// controller's group, or at the v2 root.
func cgroupBases(t *testing.T) []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup/tether"}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "pids" {
			out = append(out, filepath.Join("/sys/fs/cgroup/pids", parts[2], "tether"))
		}
	}
	return out
}

// TestFolderWatch: the watch sees a folder made and removed, with its
// times, and stops.
func TestFolderWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := watchFolders(map[string]string{"h1": dir})
	if err != nil {
		t.Fatal(err)
	}
	id := domain.NewID()
	if err := os.Mkdir(filepath.Join(dir, id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, id)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		lives, _ := w.record()
		if ls := lives[id]; len(ls) == 1 && !ls[0].to.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lives = %v; want one life of %s, ended", lives, id)
		}
	}
	done := make(chan struct{})
	go func() { w.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return")
	}
}
