package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestJanitorsCreditAWholeOutageOnce: three replicas' janitors, each on its
// own link to one database, sweep every second. Postgres is cut off from
// all three for 12 s: their sweeps fail and judge nothing. Once it is back,
// one sweep credits the 12 s, the others nothing, and the owner whose
// heartbeats failed meanwhile keeps its sandbox; the owner that was
// already dead loses its sandbox within one interval of its credited lease.
// Then one replica alone is cut off for 12 s: the other two sweep on, the
// credit is nothing, and a dead owner's sandbox ends on time.
func TestJanitorsCreditAWholeOutageOnce(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	url := storetest.NewURL(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var (
		links    []*storetest.Link
		stores   []*store.Store
		janitors []*lifecycle.Janitor
	)
	for i := range 3 {
		l := storetest.NewLink(t, url)
		st := store.New(l.Pool, store.WithClock(clock.Now), store.WithOutagePolicy(store.OutagePolicy{
			Replica: string(rune('a' + i)), Tolerance: 2 * time.Second, Ceiling: time.Minute,
		}))
		links, stores = append(links, l), append(stores, st)
		janitors = append(janitors, lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Second}, st, nil, log, nil))
	}
	ctx := t.Context()
	if _, err := stores[0].RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	create := func(owner string, ttl time.Duration) domain.Sandbox {
		t.Helper()
		if err := stores[0].SettleOutage(ctx); err != nil {
			t.Fatal(err)
		}
		sb, _, err := stores[0].CreateSandbox(ctx, domain.CreateParams{
			Tenant: "acme", Provider: "sim", Owner: owner, OwnerTTL: ttl, TTL: time.Hour, CreateTimeout: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	// sweep is one interval: every janitor sweeps; it returns how many
	// credited an outage and how many sandboxes ended owner_expired.
	sweep := func() (credits, ended int) {
		t.Helper()
		clock.Advance(time.Second)
		for i, j := range janitors {
			rep, err := j.Sweep(ctx)
			if links[i].IsCut() {
				if !errors.Is(err, domain.ErrUnavailable) || rep.OwnerExpired != 0 {
					t.Fatalf("replica %d, cut off: sweep = %+v, %v; want ErrUnavailable and nothing judged", i, rep, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("replica %d: sweep: %v", i, err)
			}
			credits += rep.OutagesCredited
			ended += rep.OwnerExpired
		}
		return credits, ended
	}
	state := func(id string) domain.Sandbox {
		t.Helper()
		sb, err := stores[0].Sandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}

	heartbeating := create("heartbeating", 3*time.Second)
	dead := create("dead", 3*time.Second)
	sweep()
	for _, l := range links {
		l.Cut()
	}
	for range 12 {
		sweep()
	}
	for _, l := range links {
		l.Restore()
	}
	// The sweep that brings them back: the first janitor credits 12 s
	// (from the last record, 2 s before the dead owner's lease ran out).
	if credits, ended := sweep(); credits != 1 || ended != 0 {
		t.Fatalf("the first sweeps back credited %d outages and ended %d sandboxes; want 1 and 0", credits, ended)
	}
	if _, err := stores[1].RenewOwnerLease(ctx, "acme", "heartbeating", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if credits, _ := sweep(); credits != 0 {
		t.Fatalf("a later sweep credited %d outages, want 0", credits)
	}
	// dead's lease: 3 s from its start, plus 13 s of credit (the 12 cut
	// sweeps and the one back); it ends within one sweep of that.
	var waited int
	for s := state(dead.ID); s.Live(); s = state(dead.ID) {
		if waited++; waited > 3 {
			t.Fatal("the dead owner's sandbox outlived its credited lease by more than one interval")
		}
		sweep()
		if _, err := stores[2].RenewOwnerLease(ctx, "acme", "heartbeating", 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if sb := state(heartbeating.ID); !sb.Live() {
		t.Fatalf("the owner that heartbeated through the outage lost its sandbox: %s/%s", sb.State, sb.Reason)
	}

	// Now replica c alone loses Postgres, for longer than the lease.
	late := create("late", 3*time.Second)
	links[2].Cut()
	for range 12 {
		if credits, _ := sweep(); credits != 0 {
			t.Fatal("a sweep credited an outage while two replicas reached Postgres")
		}
	}
	links[2].Restore()
	if credits, _ := sweep(); credits != 0 {
		t.Fatal("c's return credited its own outage")
	}
	sb := state(late.ID)
	if sb.Live() || sb.Reason != domain.ReasonOwnerExpired || sb.EndedAt == nil {
		t.Fatalf("the late owner's sandbox is %s/%s, want ended owner_expired", sb.State, sb.Reason)
	}
	if took := sb.EndedAt.Sub(late.CreatedAt); took > 4*time.Second {
		t.Errorf("the late owner's sandbox ended %s after its 3 s lease began, want within 4 s", took)
	}
}

// lockedBuffer is a log's output, safe for the janitor and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was logged since the last take, as records.
func (b *lockedBuffer) take(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	b.buf.Reset()
	return out
}

// TestJanitorLogsARestartAsOne: the only replica stops and another starts
// 30 s later (a restart). Its first sweep credits the 30 s, since no
// owner could heartbeat meanwhile, and so the owner that did not lose
// its sandbox, but logs it at INFO as time before its start, not as an
// outage. When later that replica itself goes 30 s without reaching
// Postgres, the credit is an outage, logged at WARN.
func TestJanitorLogsARestartAsOne(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	pool := storetest.NewPool(t)
	policy := store.WithOutagePolicy(store.OutagePolicy{Tolerance: 2 * time.Second, Ceiling: time.Minute})
	logs := &lockedBuffer{}
	replica := func() (*store.Store, *lifecycle.Janitor) {
		st := store.New(pool, store.WithClock(clock.Now), policy)
		return st, lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Second}, st,
			nil, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	}
	ctx := t.Context()
	credited := func(j *lifecycle.Janitor) (level string, msg string) {
		t.Helper()
		rep, err := j.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range logs.take(t) {
			if m, _ := rec["msg"].(string); strings.Contains(m, "credit") {
				level, msg = rec["level"].(string), m
			}
		}
		if (level != "") != (rep.OutagesCredited == 1) {
			t.Fatalf("a sweep credited %d outages and logged %q", rep.OutagesCredited, msg)
		}
		return level, msg
	}

	first, j1 := replica()
	if _, err := first.RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	if err := first.SettleOutage(ctx); err != nil {
		t.Fatal(err)
	}
	sb, _, err := first.CreateSandbox(ctx, domain.CreateParams{
		Tenant: "acme", Provider: "sim", Owner: "agent", OwnerTTL: 10 * time.Second, TTL: time.Hour, CreateTimeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if level, msg := credited(j1); level != "" {
		t.Fatalf("the first sweep ever credited an outage: %s %q", level, msg)
	}

	clock.Advance(30 * time.Second) // stopped, then started again
	second, j2 := replica()
	level, msg := credited(j2)
	if level != "INFO" || !strings.Contains(msg, "before this replica started") {
		t.Errorf("a restart's credit was logged %s %q; want INFO, time before this replica started", level, msg)
	}
	if _, err := second.RenewOwnerLease(ctx, "acme", "agent", 10*time.Second); err != nil {
		t.Fatalf("the owner's first heartbeat after the restart: %v", err)
	}
	if got, err := second.Sandbox(ctx, sb.ID); err != nil || !got.Live() {
		t.Fatalf("the owner lost its sandbox to the restart: %+v, %v", got, err)
	}

	clock.Advance(time.Second)
	if level, msg := credited(j2); level != "" {
		t.Fatalf("a sweep a second later credited: %s %q", level, msg)
	}
	clock.Advance(30 * time.Second) // the running replica could not reach Postgres
	if level, msg := credited(j2); level != "WARN" || !strings.Contains(msg, "outage credited to leases") {
		t.Errorf("an outage while the replica ran was logged %s %q; want WARN, outage credited to leases", level, msg)
	}
}
