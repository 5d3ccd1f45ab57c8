// Package chaos is Tether's chaos harness: several real Tether processes
// over one Postgres and one sim provider, a storm of client traffic, kill -9
// of replicas at random moments and a Postgres restart, then a check of
// Tether's invariants (README, "What Tether guarantees") against the
// registry and the provider's inventory.
//
//	go test ./test/chaos -run TestChaos -chaos.duration=3m -v   # the long run (make chaos)
//
// The default (20s of storm) runs with the rest of the tests. It needs
// scripts/postgres.sh, which starts a cluster of its own ("chaos") so that
// restarting it disturbs nothing else.
package chaos

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/test/harness"
)

var (
	stormFor  = flag.Duration("chaos.duration", 20*time.Second, "how long the storm lasts")
	nReplicas = flag.Int("chaos.replicas", 3, "Tether replicas")
	nClients  = flag.Int("chaos.clients", 6, "concurrent client loops")
	seedFlag  = flag.Int("chaos.seed", 0, "random seed (0: from the clock)")
)

const (
	apiKey          = "chaos-key"
	janitorInterval = time.Second
	ownerTTL        = 3 * time.Second
	// overshootSlack is scheduling tolerance on a loaded two-core machine on
	// top of the one janitor interval the invariant allows.
	overshootSlack = 2 * time.Second
)

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	seed := uint64(*seedFlag)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	h := newChaos(t, seed)
	h.startReplicas()
	h.storm()
	h.quiesce()
	h.check()
}

type chaos struct {
	t      *testing.T
	rng    *rand.Rand
	rngMu  sync.Mutex
	root   string
	bin    string
	dbURL  string
	simDir string
	logDir string

	replicas []*harness.Replica

	kills      atomic.Int64
	requests   atomic.Int64
	created    sync.Map // sandbox id -> struct{}
	liveOwners sync.Map // owner name -> struct{}
	pgDown     time.Time
	pgUp       time.Time
}

func newChaos(t *testing.T, seed uint64) *chaos {
	h := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), simDir: t.TempDir(), logDir: t.TempDir()}
	h.root = harness.RepoRoot(t)
	h.bin = harness.Build(t)
	harness.Postgres(t, "start", "chaos")
	t.Cleanup(func() { harness.Postgres(t, "stop", "chaos") }) // nothing of a test outlives it
	h.dbURL = harness.CreateDatabase(t, "chaos", fmt.Sprintf("chaos_%d", seed%1_000_000_000))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica logs kept in %s", h.logDir)
			for _, r := range h.replicas {
				t.Logf("tail of %s:\n%s", r.LogPath, harness.Tail(r.LogPath, 30))
			}
		}
	})
	return h
}

func (h *chaos) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

func (h *chaos) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.intn(int(hi-lo)+1))
}

func (h *chaos) startReplicas() {
	for i := range *nReplicas {
		r := harness.NewReplica(h.t, h.bin, filepath.Join(h.logDir, fmt.Sprintf("replica-%d.log", i)),
			"DATABASE_URL="+h.dbURL,
			"BOOTSTRAP_API_KEY="+apiKey,
			"PROVIDERS=sim",
			"SIM_STATE_DIR="+h.simDir,
			"JANITOR_INTERVAL="+janitorInterval.String(),
			"DEFAULT_OWNER_TTL="+ownerTTL.String(),
			"DEFAULT_TTL=20s",
			"CREATE_TIMEOUT=15s",
			"EXECUTOR_LEASE=2s",
			"EXECUTOR_POLL_INTERVAL=250ms",
			// A destroy_once sandbox fails its first destroy in every
			// process that tries it; after a long storm its backoff
			// would otherwise reach 30s per replica, past the quiesce.
			"EXECUTOR_MAX_BACKOFF=3s",
			"ORPHAN_GRACE=2s",
			"SHUTDOWN_TIMEOUT=2s",
			"DB_MAX_CONNS=8",
			// The storm is one tenant and one key: quotas would only get
			// in its way.
			"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
		)
		h.replicas = append(h.replicas, r)
		r.Start()
	}
	for _, r := range h.replicas {
		r.WaitReady(60 * time.Second)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// call sends a request to a random live replica, trying others when one
// is down. It returns the status (0 if no replica answered) and the body.
func (h *chaos) call(method, path string, body any) (int, map[string]any) {
	h.requests.Add(1)
	c := harness.Client{Key: apiKey, HTTP: client}
	for try := 0; try < 2*len(h.replicas); try++ {
		r := h.replicas[h.intn(len(h.replicas))]
		code, out, err := c.Do(method, r.URL()+path, body)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if code >= 500 && code != http.StatusServiceUnavailable {
			h.t.Errorf("%s %s: %d %v", method, path, code, out)
		}
		return code, out
	}
	return 0, nil
}

func (h *chaos) randomCreated() string {
	var ids []string
	h.created.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return len(ids) < 200
	})
	if len(ids) == 0 {
		return ""
	}
	return ids[h.intn(len(ids))]
}

func (h *chaos) randomOwner() string {
	var owners []string
	h.liveOwners.Range(func(k, _ any) bool {
		owners = append(owners, k.(string))
		return true
	})
	if len(owners) == 0 {
		return ""
	}
	return owners[h.intn(len(owners))]
}

func (h *chaos) createBody() map[string]any {
	params := map[string]any{"create_delay_ms": h.intn(800)}
	switch n := h.intn(20); {
	case n < 2:
		params["ignore_cancel"] = true
	case n < 4:
		params["fail"] = "create_once"
	case n < 5:
		params["fail"] = "create"
	case n < 7:
		params["fail"] = "destroy_once"
	}
	body := map[string]any{"params": params, "labels": map[string]string{"chaos": "yes"}}
	if h.intn(2) == 0 {
		if o := h.randomOwner(); o != "" {
			body["owner"] = o
		}
	}
	if h.intn(3) == 0 {
		body["ttl_seconds"] = 3 + h.intn(12)
	}
	return body
}

// clientLoop is one agent-like client hammering the API.
func (h *chaos) clientLoop(ctx context.Context) {
	for ctx.Err() == nil {
		switch n := h.intn(100); {
		case n < 40:
			code, sb := h.call(http.MethodPost, "/v1/sandboxes", h.createBody())
			if code == http.StatusAccepted {
				id := sb["id"].(string)
				h.created.Store(id, struct{}{})
				if h.intn(4) == 0 { // cancel while requested or creating
					time.Sleep(h.between(0, 300*time.Millisecond))
					h.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
				}
			}
		case n < 60:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
			}
		case n < 70:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodPost, "/v1/sandboxes/"+id+"/renew", map[string]any{"ttl_seconds": 5 + h.intn(15)})
			}
		case n < 85:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodGet, "/v1/sandboxes/"+id+"?wait=2s", nil)
			}
		default:
			h.call(http.MethodGet, "/v1/sandboxes?limit=20&state=ready", nil)
		}
		time.Sleep(h.between(5*time.Millisecond, 40*time.Millisecond))
	}
}

// ownerLoop plays owners one after another: each heartbeats for a while,
// then either stops silently (a crashed client) or ends itself.
func (h *chaos) ownerLoop(ctx context.Context, n int) {
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("owner-%d-%d", n, i)
		// The owner comes into being with its first sandbox.
		code, sb := h.call(http.MethodPost, "/v1/sandboxes", map[string]any{"owner": name, "params": map[string]any{"create_delay_ms": h.intn(300)}})
		if code != http.StatusAccepted {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		h.created.Store(sb["id"].(string), struct{}{})
		h.liveOwners.Store(name, struct{}{})
		lifetime := time.Now().Add(h.between(2*time.Second, 8*time.Second))
		for time.Now().Before(lifetime) && ctx.Err() == nil {
			h.call(http.MethodPut, "/v1/owners/"+name+"/lease", map[string]any{"ttl_seconds": int(ownerTTL / time.Second)})
			time.Sleep(700 * time.Millisecond)
		}
		h.liveOwners.Delete(name)
		if h.intn(10) < 3 {
			h.call(http.MethodDelete, "/v1/owners/"+name, nil)
		}
	}
}

// killLoop kill -9s a random replica every few seconds and restarts it.
func (h *chaos) killLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(1500*time.Millisecond, 4*time.Second)):
		}
		r := h.replicas[h.intn(len(h.replicas))]
		if !r.Alive() {
			continue
		}
		r.Kill()
		h.kills.Add(1)
		time.Sleep(h.between(200*time.Millisecond, 1500*time.Millisecond))
		r.Start()
	}
}

func (h *chaos) storm() {
	ctx, cancel := context.WithTimeout(h.t.Context(), *stormFor)
	defer cancel()
	var wg sync.WaitGroup
	for range *nClients {
		wg.Go(func() { h.clientLoop(ctx) })
	}
	for i := range 3 {
		wg.Go(func() { h.ownerLoop(ctx, i) })
	}
	wg.Go(func() { h.killLoop(ctx) })
	wg.Go(func() {
		// Crash and restart Postgres once, 40% into the storm.
		select {
		case <-ctx.Done():
			return
		case <-time.After(*stormFor * 4 / 10):
		}
		h.pgDown = time.Now()
		// A crash, not a clean shutdown: the server replays its WAL, and
		// the workers' asynchronous commits of the last moments are lost.
		harness.Postgres(h.t, "stop", "chaos", "TETHER_PG_STOP_MODE=immediate")
		time.Sleep(time.Second)
		harness.Postgres(h.t, "start", "chaos")
		h.pgUp = time.Now()
	})
	wg.Wait()
	// Bring every replica back for the quiet phase.
	for _, r := range h.replicas {
		if !r.Alive() {
			r.Start()
		}
	}
	for _, r := range h.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// state is what the registry and the provider hold.
type state struct {
	unsettled  []string
	unreleased []string
	ready      map[string]bool
	held       map[string]bool
	// owned counts live sandboxes with an owner. Every owner stopped
	// heartbeating with the storm, so each of them is still to be ended.
	owned int
}

func (h *chaos) snapshot(ctx context.Context, conn *pgx.Conn) (state, error) {
	s := state{ready: map[string]bool{}, held: map[string]bool{}}
	rows, err := conn.Query(ctx, `SELECT id, state, released, owner IS NOT NULL FROM sandboxes`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id string
		var st sandbox.State
		var released, owned bool
		if err := rows.Scan(&id, &st, &released, &owned); err != nil {
			return s, err
		}
		if owned && !st.Terminal() {
			s.owned++
		}
		switch {
		case !st.Settled():
			s.unsettled = append(s.unsettled, id)
		case st == sandbox.StateReady:
			s.ready[id] = true
		case !released:
			s.unreleased = append(s.unreleased, id)
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	entries, err := os.ReadDir(h.simDir)
	if err != nil {
		return s, err
	}
	for _, e := range entries {
		if e.Name() != "creates.log" && !strings.HasPrefix(e.Name(), ".") {
			s.held[e.Name()] = true
		}
	}
	return s, nil
}

func (s state) quiet() bool {
	if len(s.unsettled) > 0 || len(s.unreleased) > 0 || len(s.held) != len(s.ready) || s.owned > 0 {
		return false
	}
	for id := range s.ready {
		if !s.held[id] {
			return false
		}
	}
	return true
}

// quiesce waits for every sandbox to settle and be released, the provider's
// inventory to match the live sandboxes, and every owned sandbox to end:
// owners stopped heartbeating with the storm, so their leases lapse too, and
// until the janitor has ended their sandboxes the registry is not quiet yet
// (a moment between two ends could look quiet).
func (h *chaos) quiesce() {
	ctx := h.t.Context()
	conn, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := h.snapshot(ctx, conn)
		if err != nil {
			h.t.Fatal(err)
		}
		if s.quiet() {
			return
		}
		if time.Now().After(deadline) {
			h.t.Logf("not quiet after 90s: %d unsettled, %d unreleased, %d held vs %d ready, %d owned and live",
				len(s.unsettled), len(s.unreleased), len(s.held), len(s.ready), s.owned)
			return // check reports the details
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (h *chaos) check() {
	ctx := h.t.Context()
	conn, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	s, err := h.snapshot(ctx, conn)
	if err != nil {
		h.t.Fatal(err)
	}
	var total int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sandboxes`).Scan(&total); err != nil {
		h.t.Fatal(err)
	}

	// Leaks: resources no live sandbox accounts for; and live sandboxes the
	// provider lacks.
	var leaks, missing []string
	for id := range s.held {
		if !s.ready[id] {
			leaks = append(leaks, id)
		}
	}
	for id := range s.ready {
		if !s.held[id] {
			missing = append(missing, id)
		}
	}

	// Duplicates: more than one create call made a resource for a sandbox.
	creates := map[string]int{}
	if f, err := os.Open(filepath.Join(h.simDir, "creates.log")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 0 {
				creates[fields[0]]++
			}
		}
		_ = f.Close()
	}
	var duplicates []string
	for id, n := range creates {
		if n > 1 {
			duplicates = append(duplicates, fmt.Sprintf("%s×%d", id, n))
		}
	}

	// Owner overshoot: no owned sandbox may end later than one janitor
	// interval after its owner's final lease expiry. (Leases only move
	// forward, so the final expiry bounds every earlier lapse.) While
	// Postgres was down nothing could be ended: a lapse in that window is
	// measured from Postgres's return.
	var maxOvershoot time.Duration
	var overshoots []string
	rows, err := conn.Query(ctx, `
		SELECT s.id, s.ended_at, o.expires_at FROM sandboxes s
		JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.ended_at IS NOT NULL AND s.ended_at > o.expires_at`)
	if err != nil {
		h.t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var ended, lapsed time.Time
		if err := rows.Scan(&id, &ended, &lapsed); err != nil {
			h.t.Fatal(err)
		}
		from := lapsed
		if !h.pgDown.IsZero() && lapsed.After(h.pgDown.Add(-janitorInterval)) && lapsed.Before(h.pgUp) {
			from = h.pgUp
		}
		over := ended.Sub(from)
		maxOvershoot = max(maxOvershoot, over)
		if over > janitorInterval+overshootSlack {
			overshoots = append(overshoots, fmt.Sprintf("%s +%s", id, over.Round(time.Millisecond)))
		}
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	var liveOwned int
	if err := conn.QueryRow(ctx, `
		SELECT count(*) FROM sandboxes s JOIN owners o ON o.tenant = s.tenant AND o.name = s.owner
		WHERE s.state IN ('requested', 'creating', 'ready') AND o.expires_at < now() - $1::interval`,
		janitorInterval+overshootSlack).Scan(&liveOwned); err != nil {
		h.t.Fatal(err)
	}

	// Every history is a legal path through the state machine that ends in
	// the sandbox's current state.
	illegal := h.checkHistories(ctx, conn)

	summary := fmt.Sprintf("chaos: sandboxes=%d requests=%d kills=%d pg_restarts=%d leaks=%d missing=%d duplicates=%d unsettled=%d unreleased=%d max_owner_overshoot=%s illegal_histories=%d",
		total, h.requests.Load(), h.kills.Load(), boolInt(!h.pgUp.IsZero()), len(leaks), len(missing), len(duplicates),
		len(s.unsettled), len(s.unreleased), maxOvershoot.Round(time.Millisecond), len(illegal))
	fmt.Println(summary)
	h.t.Log(summary)

	fail := func(what string, items []string) {
		if len(items) > 0 {
			slices.Sort(items)
			h.t.Errorf("%s (%d): %v", what, len(items), items[:min(len(items), 10)])
		}
	}
	fail("unsettled sandboxes", s.unsettled)
	fail("terminal sandboxes never released", s.unreleased)
	fail("leaked provider resources", leaks)
	fail("ready sandboxes missing at the provider", missing)
	fail("sandboxes created more than once", duplicates)
	fail("owned sandboxes that outlived their owner's lease by more than one interval", overshoots)
	fail("illegal histories", illegal)
	if liveOwned > 0 {
		h.t.Errorf("%d sandboxes are still live under a lapsed owner lease", liveOwned)
	}
	if total < 20 {
		h.t.Errorf("the storm made only %d sandboxes; the run proves little", total)
	}
	for _, r := range h.replicas {
		if b, err := os.ReadFile(r.LogPath); err == nil && bytes.Contains(b, []byte("panic")) {
			h.t.Errorf("a replica panicked; log in %s", r.LogPath)
		}
	}
}

func (h *chaos) checkHistories(ctx context.Context, conn *pgx.Conn) []string {
	rows, err := conn.Query(ctx, `
		SELECT e.sandbox_id, coalesce(e.from_state, ''), e.to_state, s.state
		FROM sandbox_events e JOIN sandboxes s ON s.id = e.sandbox_id
		ORDER BY e.sandbox_id, e.id`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var (
		illegal []string
		curID   string
		prev    sandbox.State
		final   sandbox.State
		bad     bool
	)
	finish := func() {
		if curID != "" && !bad && prev != final {
			illegal = append(illegal, curID+": history ends in "+string(prev)+" but the sandbox is "+string(final))
		}
	}
	for rows.Next() {
		var id string
		var from, to, st sandbox.State
		if err := rows.Scan(&id, &from, &to, &st); err != nil {
			h.t.Fatal(err)
		}
		if id != curID {
			finish()
			curID, prev, final, bad = id, "", st, false
			if from != "" || to != sandbox.StateRequested {
				illegal = append(illegal, id+": history does not start with the request")
				bad = true
			}
			prev = to
			continue
		}
		if bad {
			continue
		}
		if from != prev || !sandbox.CanTransition(from, to) {
			illegal = append(illegal, fmt.Sprintf("%s: %s after %s", id, from+">"+to, prev))
			bad = true
		}
		prev = to
	}
	finish()
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return illegal
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
