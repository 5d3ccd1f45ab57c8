// Package chaos is Tether's chaos harness: several real Tether processes
// over one Postgres, a storm of client traffic, kill -9 of replicas at
// random moments and a Postgres restart, then a check of Tether's invariants
// (README, "What Tether guarantees") against the registry and the
// providers' inventories.
//
// TestChaos runs its replicas on this machine over one sim provider.
// TestChaosNodes runs them on simulated hosts (harness.NewHosts: network,
// pid and mount namespaces of their own), one replica per host, with the
// host-bound local provider: real bubblewrap sandboxes that outlive their
// replica's kill -9, on the node that made them. Some kills keep a replica
// down past NODE_GRACE, so that its node is dead for a while. It needs root,
// iproute2, util-linux and bubblewrap, and skips without them.
// TestChaosOwners (owners_test.go) measures the owner bound under faults:
// owner processes SIGKILLed at random while one replica, on a simulated
// host, is cut off from Postgres by nftables for longer than a lease,
// Postgres restarts and the other replicas are killed; it needs nft too.
//
//	go test ./test/chaos -run TestChaos -chaos.duration=3m -v   # the long runs, both (make chaos)
//	go test ./test/chaos -run 'TestChaosNodes$' -chaos.duration=2m -count=10 -failfast -v   # nodes, 10 in a row
//	go test ./test/chaos -run 'TestChaosNodes$' -chaos.nodes=4 -chaos.seed=N -v   # replay a run's storm on 4 hosts
//
// The defaults (20s of storm each) run with the rest of the tests. They need
// scripts/postgres.sh, which starts clusters of their own (TestChaos:
// "chaos"; TestChaosNodes: "chaosnodes-…", TestChaosOwners:
// "chaosowners-…", one per run) so that restarting one disturbs nothing
// else.
package chaos

import (
	"bufio"
	"bytes"
	"cmp"
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

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/test/harness"
)

var (
	stormFor  = flag.Duration("chaos.duration", 20*time.Second, "how long the storm lasts")
	nReplicas = flag.Int("chaos.replicas", 3, "Tether replicas (TestChaos)")
	nClients  = flag.Int("chaos.clients", 6, "concurrent client loops (TestChaosNodes: half as many)")
	seedFlag  = flag.Int("chaos.seed", 0, "random seed (0: from the clock)")
	nNodes    = flag.Int("chaos.nodes", 3, "simulated hosts, one replica on each (TestChaosNodes; 0 skips it)")
	neighbour = flag.Bool("chaos.loops", true, "another program attaches, probes and detaches loop devices throughout (TestChaosNodes)")
	faults    = flag.Bool("chaos.faults", true, "kill replicas and crash Postgres (false: the same storm without faults, to measure the owner bound's figures alone)")
)

const (
	apiKey          = "chaos-key"
	janitorInterval = time.Second
	ownerTTL        = 3 * time.Second
	// overshootSlack is scheduling tolerance on a loaded two-core machine on
	// top of the one janitor interval the invariant allows.
	overshootSlack = 2 * time.Second
	// pauseTimeout is PAUSE_TIMEOUT in TestChaos: some sandboxes' pauses
	// (pause_delay_ms) take longer, and must fail at it.
	pauseTimeout = 5 * time.Second
	// nodeGrace is NODE_GRACE in TestChaosNodes: a replica killed for a
	// short pause (and its restart) stays within it, one kept down longer
	// does not. Heartbeats come every fifth of it.
	nodeGrace = 5 * time.Second
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
	h := newChaos(t, seed, 0)
	h.startReplicas()
	h.storm()
	h.endPools()
	h.quiesce()
	h.check()
	h.checkE2B()
}

// TestChaosNodes is the storm on simulated hosts with local sandboxes (see
// the package's comment). On top of TestChaos's invariants it checks that
// no sandbox process of an ended sandbox is left on any host, that no
// sandbox ever ran twice at once (on one host or two), and that no sandbox
// was marked lost while its node was alive.
func TestChaosNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	if *nNodes <= 0 {
		t.Skip("-chaos.nodes=0")
	}
	harness.RequireHosts(t)
	seed := uint64(*seedFlag)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	h := newChaos(t, seed, *nNodes)
	if *neighbour {
		stop := harness.LoopNeighbour(t)
		defer stop()
	}
	h.startReplicas()
	h.storm()
	h.quiesce()
	h.check()
}

type chaos struct {
	t       *testing.T
	rng     *rand.Rand
	rngMu   sync.Mutex
	root    string
	bin     string
	cluster string // the Postgres cluster's name
	dbURL   string // as this machine reaches it
	simDir  string
	logDir  string
	// hosts are the simulated hosts of TestChaosNodes (replicas[i] runs on
	// hosts.List[i], with the local provider); nil for TestChaos.
	hosts *harness.Hosts
	// clients is the number of client loops; each waits between pauseLo
	// and pauseHi between two calls.
	clients          int
	pauseLo, pauseHi time.Duration

	replicas []*harness.Replica

	// pools is what the pools' part of the storm saw (pools_test.go);
	// nil without it.
	pools *poolChaos
	// e2b counts the answers of the storm's E2B calls (e2b_test.go).
	e2b e2bOutcomes

	kills    atomic.Int64
	requests atomic.Int64
	created  sync.Map // sandbox id -> struct{}
	// leases is what the clients saw of owners' leases and of creates.
	leases *leaseBook
	// folders watches the hosts' state folders (TestChaosNodes).
	folders    *folderWatch
	snaps      sync.Map // snapshot id -> struct{} (snapshots_test.go)
	liveOwners sync.Map // owner name -> struct{}
	pgDown     time.Time
	pgUp       time.Time
	final      state // quiesce's last snapshot

	// With hosts: when each node's replica was down (from its kill until it
	// answered /readyz again), and the sandboxes seen running twice at once.
	mu           sync.Mutex
	downs        map[string][]window
	duplicates   map[string]string // sandbox id -> the bwrap processes seen at once
	peak         int               // the most sandboxes seen running at once
	stopSampling func()

	// Pauses and resumes (TestChaos): the sandboxes seen pausing or
	// resuming past their deadline by more than a janitor interval and
	// the slack, how far past, and the furthest seen.
	stuck       map[string]time.Duration
	maxOverdue  time.Duration
	stopWatch   func()
	transitions atomic.Int64 // pause and resume requests that answered
}

// window is a span of time.
type window struct{ from, to time.Time }

func newChaos(t *testing.T, seed uint64, nodes int) *chaos {
	h := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), simDir: t.TempDir(), logDir: keptLogDir(t),
		cluster: "chaos", clients: *nClients, pauseLo: 5 * time.Millisecond, pauseHi: 40 * time.Millisecond,
		downs: map[string][]window{}, duplicates: map[string]string{}, stuck: map[string]time.Duration{}, leases: newLeaseBook()}
	h.root = harness.RepoRoot(t)
	if nodes > 0 {
		// Real sandboxes cost a few processes each: a gentler storm.
		h.cluster, h.clients, h.pauseLo, h.pauseHi = "chaosnodes", max(1, *nClients/2), 20*time.Millisecond, 150*time.Millisecond
		h.hosts = harness.NewHosts(t, nodes)
	}
	h.bin = harness.Build(t)
	if h.hosts != nil {
		h.cluster = h.hosts.StartPostgres(h.cluster) // one of this run's own, destroyed at its end
	} else {
		harness.Postgres(t, "start", h.cluster)
		t.Cleanup(func() { harness.Postgres(t, "stop", h.cluster) }) // nothing of a test outlives it
	}
	h.dbURL = harness.CreateDatabase(t, h.cluster, fmt.Sprintf("chaos_%d", seed%1_000_000_000))
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range h.replicas {
				t.Logf("tail of %s:\n%s", r.LogPath, harness.Tail(r.LogPath, 30))
			}
		}
	})
	return h
}

// keptLogDir makes a folder for the replicas' logs that outlives the test
// when it fails (and says where), and is removed when it passes.
func keptLogDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tether-chaos-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
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
	env := []string{
		"DATABASE_URL=" + h.dbURL,
		"BOOTSTRAP_API_KEY=" + apiKey,
		"PROVIDERS=sim",
		"SIM_STATE_DIR=" + h.simDir,
		"JANITOR_INTERVAL=" + janitorInterval.String(),
		"DEFAULT_OWNER_TTL=" + ownerTTL.String(),
		"DEFAULT_TTL=20s",
		"CREATE_TIMEOUT=15s",
		"EXECUTOR_LEASE=2s",
		"EXECUTOR_POLL_INTERVAL=250ms",
		// A destroy_once sandbox fails its first destroy in every
		// process that tries it; after a long storm its backoff
		// would otherwise reach 30s per replica, past the quiesce.
		"EXECUTOR_MAX_BACKOFF=3s",
		"PAUSE_TIMEOUT=" + pauseTimeout.String(),
		"ORPHAN_GRACE=2s",
		"SNAPSHOT_TIMEOUT=15s", "EXIT_SNAPSHOT_TIMEOUT=5s", "SNAPSHOT_MAX_PER_TENANT=0",
		"SHUTDOWN_TIMEOUT=2s",
		"DB_MAX_CONNS=8",
		// The storm is one tenant and one key: quotas would only get
		// in its way.
		"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
	}
	env = append(env, poolEnv()...)
	if h.hosts == nil {
		for i := range *nReplicas {
			r := harness.NewReplica(h.t, h.bin, filepath.Join(h.logDir, fmt.Sprintf("replica-%d.log", i)), env...)
			h.replicas = append(h.replicas, r)
			r.Start()
		}
	} else {
		env = append(env,
			"DATABASE_URL="+h.hosts.URL(h.dbURL),
			"PROVIDERS=local",
			"NODE_GRACE="+nodeGrace.String(),
			// Unowned local sandboxes end soon: what runs at once stays
			// within what two cores can hold.
			"DEFAULT_TTL=10s",
			// Small sandboxes: what runs at once of the storm's one tenant
			// fits in its share of a node (by default half of it).
			"LOCAL_MEMORY_MB=128", "LOCAL_WORKSPACE_MB=64",
		)
		for _, host := range h.hosts.List {
			r := host.NewReplica(h.t, h.bin, filepath.Join(h.logDir, host.Name+".log"), env...)
			h.replicas = append(h.replicas, r)
			r.Start()
		}
	}
	for _, r := range h.replicas {
		r.WaitReady(60 * time.Second)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// call sends a request to a random live replica, trying others when one
// is down. It returns the status (0 if no replica answered) and the body.
func (h *chaos) call(method, path string, body any) (int, map[string]any) {
	return h.callWith(method, path, body, nil)
}

// callWith is call with header on top of the key's.
func (h *chaos) callWith(method, path string, body any, header http.Header) (int, map[string]any) {
	h.requests.Add(1)
	c := harness.Client{Key: apiKey, HTTP: client, Header: header}
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

// randomIn returns a random one of the storm's sandboxes in state, or "".
func (h *chaos) randomIn(state string) string {
	code, page := h.call(http.MethodGet, "/v1/sandboxes?limit=50&state="+state, nil)
	items, _ := page["items"].([]any)
	if code != http.StatusOK || len(items) == 0 {
		return ""
	}
	id, _ := items[h.intn(len(items))].(map[string]any)["id"].(string)
	return id
}

// randomOwner returns an owner of the storm whose lease the clients know
// to be live for a while yet (so that a create naming it starts no lease
// they cannot see), or "".
func (h *chaos) randomOwner() string {
	var owners []string
	soon := time.Now().Add(time.Second)
	h.liveOwners.Range(func(k, _ any) bool {
		if h.leases.live(k.(string), soon) {
			owners = append(owners, k.(string))
		}
		return true
	})
	if len(owners) == 0 {
		return ""
	}
	return owners[h.intn(len(owners))]
}

func (h *chaos) createBody() map[string]any {
	if h.hosts != nil {
		return h.localCreateBody()
	}
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
	case n < 8:
		params["fail"] = "pause_once"
	case n < 9:
		params["fail"] = "resume_once"
	case n < 10:
		params["fail"] = "pause"
	}
	switch n := h.intn(20); {
	case n < 1:
		params["pause_delay_ms"] = int(pauseTimeout/time.Millisecond) + 1000 // never done in time
	case n < 12:
		params["pause_delay_ms"] = h.intn(1200)
	}
	body := map[string]any{"params": params, "labels": map[string]string{"chaos": "yes"}}
	h.snapshotCreate(params, body)
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

// localCreateBody is a create of a local sandbox: some with a slow setup,
// some with one that fails.
func (h *chaos) localCreateBody() map[string]any {
	body := map[string]any{"provider": "local", "labels": map[string]string{"chaos": "yes"}}
	switch n := h.intn(20); {
	case n < 2:
		body["setup"] = "exit 3"
	case n < 8:
		body["setup"] = fmt.Sprintf("sleep 0.%d", h.intn(8))
	}
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
			body := h.createBody()
			sent := time.Now()
			code, sb := h.call(http.MethodPost, "/v1/sandboxes", body)
			h.unanswered(code, body, sent)
			if code == http.StatusAccepted {
				id := sb["id"].(string)
				h.accept(id, body, sent)
				if h.intn(4) == 0 { // cancel while requested or creating
					time.Sleep(h.between(0, 300*time.Millisecond))
					h.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
				}
			}
		case n < 60:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
			}
		case n < 66:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodPost, "/v1/sandboxes/"+id+"/renew", map[string]any{"ttl_seconds": 5 + h.intn(15)})
			}
		case n < 74 && h.hosts == nil:
			// Pauses and resumes, some waiting for the outcome: they mix
			// with kills, the Postgres crash, deletes and TTLs.
			// Mostly of a sandbox in the state the call wants (most
			// created ones have ended), sometimes of any.
			op, from := "pause", "ready"
			if h.intn(2) == 0 {
				op, from = "resume", "paused"
			}
			id := h.randomCreated()
			if h.intn(4) != 0 {
				id = h.randomIn(from)
			}
			if id != "" {
				wait := ""
				if h.intn(3) == 0 {
					wait = "?wait=2s"
				}
				if code, _ := h.call(http.MethodPost, "/v1/sandboxes/"+id+"/"+op+wait, nil); code == http.StatusAccepted || code == http.StatusOK {
					h.transitions.Add(1)
				}
			}
		case n < 78 && h.hosts == nil:
			h.snapshotCall()
		case n < 85:
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodGet, "/v1/sandboxes/"+id+"?wait=2s", nil)
			}
		case n < 92 && h.hosts != nil:
			// On hosts, the data plane too: any replica forwards to the
			// sandbox's node (a dead node's answer is a 503).
			if id := h.randomCreated(); id != "" {
				h.call(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "echo hi", "timeout_seconds": 10})
			}
		case n < 92:
			h.e2bCall() // E2B's face, over the same sandboxes (e2b_test.go)
		default:
			h.call(http.MethodGet, "/v1/sandboxes?limit=20&state=ready", nil)
		}
		time.Sleep(h.between(h.pauseLo, h.pauseHi))
	}
}

// ownerLoop plays owners one after another: each heartbeats for a while,
// then either stops silently (a crashed client) or ends itself.
func (h *chaos) ownerLoop(ctx context.Context, n int) {
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("owner-%d-%d", n, i)
		// The owner comes into being with its first sandbox.
		first := map[string]any{"owner": name, "params": map[string]any{"create_delay_ms": h.intn(300)}}
		if h.hosts != nil {
			first = map[string]any{"owner": name, "provider": "local"}
		}
		sent := time.Now()
		code, sb := h.call(http.MethodPost, "/v1/sandboxes", first)
		h.unanswered(code, first, sent)
		if code != http.StatusAccepted {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		h.accept(sb["id"].(string), first, sent)
		h.liveOwners.Store(name, struct{}{})
		lifetime := time.Now().Add(h.between(2*time.Second, 8*time.Second))
		for time.Now().Before(lifetime) && ctx.Err() == nil {
			h.heartbeat(name)
			time.Sleep(700 * time.Millisecond)
		}
		h.liveOwners.Delete(name)
		if h.intn(10) < 3 {
			h.leases.release(name, time.Now())
			h.call(http.MethodDelete, "/v1/owners/"+name, nil)
		}
	}
}

// accept records a create the API accepted (sent at sent, answered now).
func (h *chaos) accept(id string, body map[string]any, sent time.Time) {
	h.created.Store(id, struct{}{})
	owner, _ := body["owner"].(string)
	h.leases.create(id, owner, sent, time.Now())
}

// unanswered records a create that got no answer (code 0) or a server
// error: it may have been accepted, and started its owner's lease.
func (h *chaos) unanswered(code int, body map[string]any, sent time.Time) {
	if code == 0 || code >= 500 {
		owner, _ := body["owner"].(string)
		h.leases.unanswered(owner, sent, time.Now())
	}
}

// heartbeat renews owner's lease and records what the API granted.
func (h *chaos) heartbeat(owner string) {
	sent := time.Now()
	code, out := h.call(http.MethodPut, "/v1/owners/"+owner+"/lease", map[string]any{"ttl_seconds": int(ownerTTL / time.Second)})
	recv := time.Now()
	switch {
	case code == http.StatusOK:
		expires, err := time.Parse(time.RFC3339Nano, fmt.Sprint(out["expires_at"]))
		if err != nil {
			h.t.Errorf("heartbeat of %s: expires_at %v: %v", owner, out["expires_at"], err)
			return
		}
		h.leases.heartbeat(owner, sent, recv, expires)
	case code == 0 || code >= 500:
		// No answer, or one that does not say: it may have been granted.
		h.leases.heartbeat(owner, sent, recv, time.Time{})
	}
}

// killLoop kill -9s a random replica every few seconds and restarts it.
// On hosts, the second kill and one in four after it keep the replica down
// past NODE_GRACE: its node is dead until it returns.
func (h *chaos) killLoop(ctx context.Context) {
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(1500*time.Millisecond, 4*time.Second)):
		}
		r := h.replicas[h.intn(len(h.replicas))]
		if !r.Alive() {
			continue
		}
		pause := h.between(200*time.Millisecond, 1500*time.Millisecond)
		if h.hosts != nil && (n == 1 || h.intn(4) == 0) {
			pause = h.between(nodeGrace+time.Second, nodeGrace+3*time.Second)
		}
		from := time.Now()
		r.Kill()
		h.kills.Add(1)
		time.Sleep(pause)
		r.Start()
		if h.hosts != nil {
			// The node is down until its replica answers again.
			waitReady(h.t, r, 60*time.Second)
			h.mu.Lock()
			h.downs[r.Host().Name] = append(h.downs[r.Host().Name], window{from, time.Now()})
			h.mu.Unlock()
		}
	}
}

// waitReady waits for the replica's /readyz to answer 200 (from any
// goroutine: a replica that never does fails the test). A replica that
// exits meanwhile (one that starts while Postgres restarts gives up) is
// started again, as a host's service manager would.
func waitReady(t *testing.T, r *harness.Replica, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !r.Alive() {
			time.Sleep(200 * time.Millisecond)
			r.Start()
		}
		resp, err := client.Get(r.URL() + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Errorf("replica %s not ready %s after its restart; log:\n%s", r.URL(), limit, harness.Tail(r.LogPath, 20))
}

// sampleLoop looks at every host's sandbox processes a few times a second
// until ctx ends, recording sandboxes that run twice at once: two bwrap
// processes of one sandbox alive together, on one host or on two. (A create
// that retries after its replica's kill first destroys what the interrupted
// one left: one after the other is fine.)
func (h *chaos) sampleLoop(ctx context.Context) {
	for {
		h.sample()
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (h *chaos) sample() {
	seen := map[string][]string{}
	for _, host := range h.hosts.List {
		ps, err := host.SandboxProcesses()
		if err != nil {
			h.t.Errorf("sample: %v", err)
			return
		}
		for _, p := range ps {
			if p.Monitor && p.SandboxID != "" {
				seen[p.SandboxID] = append(seen[p.SandboxID], fmt.Sprintf("%s:%d", host.Name, p.PID))
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peak = max(h.peak, len(seen))
	for id, at := range seen {
		if _, known := h.duplicates[id]; len(at) > 1 && !known {
			h.duplicates[id] = strings.Join(at, ",") + "@" + time.Now().UTC().Format("15:04:05.000")
		}
	}
}

func (h *chaos) storm() {
	if h.hosts != nil {
		dirs := map[string]string{}
		for _, host := range h.hosts.List {
			dirs[host.Name] = host.StateDir
		}
		w, err := watchFolders(dirs)
		if err != nil {
			h.t.Fatal(err)
		}
		h.folders = w
		h.t.Cleanup(w.stop)
		// Through the quiet phase too, until check.
		ctx, cancel := context.WithCancel(h.t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.sampleLoop(ctx)
		}()
		h.stopSampling = func() { cancel(); <-done }
		h.t.Cleanup(h.stopSampling)
	}
	if h.hosts == nil {
		// Through the quiet phase too, until check.
		ctx, cancel := context.WithCancel(h.t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.watchTransitions(ctx)
		}()
		h.stopWatch = func() { cancel(); <-done }
		h.t.Cleanup(h.stopWatch)
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), *stormFor)
	defer cancel()
	var wg sync.WaitGroup
	for range h.clients {
		wg.Go(func() { h.clientLoop(ctx) })
	}
	for i := range 3 {
		wg.Go(func() { h.ownerLoop(ctx, i) })
	}
	h.poolStorm(ctx, &wg)
	if !*faults {
		wg.Wait()
		return
	}
	wg.Go(func() { h.killLoop(ctx) })
	wg.Go(func() {
		// Crash and restart Postgres once, 40% into the storm.
		select {
		case <-ctx.Done():
			return
		case <-time.After(*stormFor * 4 / 10):
		}
		// The transition watcher reads these under h.mu while the storm runs.
		h.mu.Lock()
		h.pgDown = time.Now()
		h.mu.Unlock()
		// A crash, not a clean shutdown: the server replays its WAL, and
		// the workers' asynchronous commits of the last moments are lost.
		harness.Postgres(h.t, "stop", h.cluster, "TETHER_PG_STOP_MODE=immediate")
		time.Sleep(time.Second)
		var env []string
		if h.hosts != nil {
			env = h.hosts.PostgresEnv()
		}
		harness.Postgres(h.t, "start", h.cluster, env...)
		h.mu.Lock()
		h.pgUp = time.Now()
		h.mu.Unlock()
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

// watchTransitions looks, every quarter second until ctx ends, for
// sandboxes still pausing or resuming past their pause deadline: the
// janitor must fail each within an interval (and the slack) of it. While
// Postgres was down nothing could be failed: a deadline in that window
// is measured from Postgres's return.
func (h *chaos) watchTransitions(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, h.dbURL)
			if err != nil {
				continue // Postgres is down
			}
			conn = c
		}
		rows, err := conn.Query(ctx, `SELECT id, pause_deadline, now() FROM sandboxes
			WHERE state IN ('pausing', 'resuming') AND pause_deadline < now()`)
		if err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			continue
		}
		for rows.Next() {
			var id string
			var deadline, now time.Time
			if rows.Scan(&id, &deadline, &now) != nil {
				break
			}
			h.mu.Lock()
			from := deadline
			if !h.pgDown.IsZero() && deadline.After(h.pgDown.Add(-janitorInterval)) && (h.pgUp.IsZero() || deadline.Before(h.pgUp)) {
				from = h.pgUp
			}
			if !from.IsZero() {
				over := now.Sub(from)
				h.maxOverdue = max(h.maxOverdue, over)
				if over > janitorInterval+overshootSlack {
					h.stuck[id] = max(h.stuck[id], over)
				}
			}
			h.mu.Unlock()
		}
		rows.Close()
	}
}

// state is what the registry and the providers hold.
type state struct {
	unsettled  []string
	unreleased []string
	// ready maps each ready sandbox to where its resource must be: "sim",
	// or on hosts its node.
	ready map[string]string
	// held maps each sandbox the providers hold something of to where:
	// "sim", or the hosts running its processes ("?" for processes of no
	// sandbox that could be told).
	held map[string][]string
	// paused are the paused sandboxes (in ready too: live, held by the
	// provider), pauseMarks those the sim holds paused.
	paused, pauseMarks []string
	// owned counts live sandboxes with an owner. Every owner stopped
	// heartbeating with the storm, so each of them is still to be ended.
	owned int
}

func (h *chaos) snapshot(ctx context.Context, conn *pgx.Conn) (state, error) {
	s := state{ready: map[string]string{}, held: map[string][]string{}}
	query := `SELECT id, state, released, owner IS NOT NULL, 'sim' FROM sandboxes`
	if h.hosts != nil {
		query = `SELECT id, state, released, owner IS NOT NULL, coalesce(node, '') FROM sandboxes`
	}
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var id, where string
		var st domain.State
		var released, owned bool
		if err := rows.Scan(&id, &st, &released, &owned, &where); err != nil {
			return s, err
		}
		if owned && !st.Terminal() {
			s.owned++
		}
		switch {
		case !st.Settled():
			s.unsettled = append(s.unsettled, id)
		case st == domain.StateReady || st == domain.StatePaused:
			s.ready[id] = where
			if st == domain.StatePaused {
				s.paused = append(s.paused, id)
			}
		case !released:
			s.unreleased = append(s.unreleased, id)
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if h.hosts != nil {
		for _, host := range h.hosts.List {
			ps, err := host.SandboxProcesses()
			if err != nil {
				return s, err
			}
			for _, p := range ps {
				id := cmp.Or(p.SandboxID, "?")
				if !slices.Contains(s.held[id], host.Name) {
					s.held[id] = append(s.held[id], host.Name)
				}
			}
		}
		return s, nil
	}
	entries, err := os.ReadDir(h.simDir)
	if err != nil {
		return s, err
	}
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), ".paused-"); ok {
			s.pauseMarks = append(s.pauseMarks, id)
		}
		if e.Name() != "creates.log" && e.Name() != "calls.log" && !strings.HasPrefix(e.Name(), ".") {
			s.held[e.Name()] = []string{"sim"}
		}
	}
	return s, nil
}

// leaks returns what the providers hold that no ready sandbox accounts
// for, or holds somewhere else than the sandbox's place, as "id@where".
func (s state) leaks() []string {
	var out []string
	for id, at := range s.held {
		for _, where := range at {
			if s.ready[id] != where {
				out = append(out, id+"@"+where)
			}
		}
	}
	return out
}

// missing returns the ready sandboxes whose resource is not in its place.
func (s state) missing() []string {
	var out []string
	for id, where := range s.ready {
		if !slices.Contains(s.held[id], where) {
			out = append(out, id+"@"+where)
		}
	}
	return out
}

// pauseMismatches returns the sandboxes paused in the registry but not
// at the sim, or the other way round (sim only: its marks).
func (s state) pauseMismatches(sim bool) []string {
	if !sim {
		return nil
	}
	var out []string
	for _, id := range s.paused {
		if !slices.Contains(s.pauseMarks, id) {
			out = append(out, id+" paused, running at the sim")
		}
	}
	for _, id := range s.pauseMarks {
		if !slices.Contains(s.paused, id) {
			out = append(out, id+" paused at the sim, not in the registry")
		}
	}
	return out
}

func (s state) quiet() bool {
	return len(s.unsettled) == 0 && len(s.unreleased) == 0 && s.owned == 0 && len(s.leaks()) == 0 && len(s.missing()) == 0
}

// quiesce waits for every sandbox to settle and be released, the providers'
// inventories to match the live sandboxes, and every owned sandbox to end:
// owners stopped heartbeating with the storm, so their leases lapse too, and
// until the janitor has ended their sandboxes the registry is not quiet yet
// (a moment between two ends could look quiet). It keeps the quiet snapshot
// (or the last one, if none was) for check: sandboxes go on ending as their
// TTLs run out, and a new snapshot could catch one between its end and its
// release.
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
			h.final = s
			return
		}
		if time.Now().After(deadline) {
			h.t.Logf("not quiet after 90s: %d unsettled, %d unreleased, %d leaked, %d missing, %d owned and live",
				len(s.unsettled), len(s.unreleased), len(s.leaks()), len(s.missing()), s.owned)
			h.final = s
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
	if h.stopSampling != nil {
		h.stopSampling()
		h.sample()
	}
	if h.stopWatch != nil {
		h.stopWatch()
	}
	s := h.final
	var total int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sandboxes`).Scan(&total); err != nil {
		h.t.Fatal(err)
	}

	// Leaks: resources no live sandbox accounts for (on hosts: a sandbox
	// process of an ended sandbox, or on another host than the sandbox's
	// node); and live sandboxes the provider lacks.
	leaks, missing := s.leaks(), s.missing()

	// Duplicates: more than one create call made a resource for a sandbox
	// (sim: its log of creates; hosts: two of a sandbox's bwrap processes
	// seen alive at once).
	var duplicates []string
	remade := 0
	if h.hosts != nil {
		h.mu.Lock()
		for id, at := range h.duplicates {
			duplicates = append(duplicates, id+"×"+at)
		}
		h.mu.Unlock()
		lives, overflowed := h.folders.record()
		if overflowed {
			h.t.Error("the kernel dropped some of the hosts' folder events: the record of what was made is incomplete")
		}
		var twice []string
		twice, remade = madeTwice(lives)
		duplicates = append(duplicates, twice...)
	} else {
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
		for id, n := range creates {
			if n > 1 {
				duplicates = append(duplicates, fmt.Sprintf("%s×%d", id, n))
			}
		}
		duplicates = append(duplicates, overlappingCreates(h.calls(), h.died, time.Now())...)
	}

	// On hosts, every kind of resource, now and after a grace period.
	var heldNow, heldAfter []string
	if h.hosts != nil {
		heldNow, heldAfter = h.checkHoldings(ctx, conn)
	}

	// Lost: on hosts, a sandbox may end lost only while its node is dead.
	var lost int
	var wronglyLost []string
	if h.hosts != nil {
		lost, wronglyLost = h.checkLost(ctx, conn)
	}

	// The owner bound, from every lapse (lapses_test.go): how long after
	// it each owned sandbox ended, and how long until its provider no
	// longer held it.
	bounds, unaccountedCreates := h.judgeBounds(ctx, conn)
	overshot := overshoots(bounds, janitorInterval+overshootSlack)
	h.mu.Lock()
	pgDown, pgUp := h.pgDown, h.pgUp
	h.mu.Unlock()
	finalOver, maxOvershoot, err := finalOvershoots(ctx, conn, pgDown, pgUp)
	if err != nil {
		h.t.Fatal(err)
	}
	overshot = append(overshot, finalOver...)
	for _, b := range bounds {
		maxOvershoot = max(maxOvershoot, b.toEnd)
	}
	lapseFigs := figures(bounds)
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

	// Pauses: none stuck past its deadline, and each paused sandbox paused
	// at the sim (and no other).
	var stuck []string
	h.mu.Lock()
	for id, over := range h.stuck {
		stuck = append(stuck, fmt.Sprintf("%s +%s", id, over.Round(time.Millisecond)))
	}
	maxOverdue := h.maxOverdue
	h.mu.Unlock()
	mismatched := s.pauseMismatches(h.hosts == nil)
	var paused, pauseFailed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'paused'),
		count(*) FILTER (WHERE reason IN ('pause_failed', 'resume_failed')) FROM sandboxes`).Scan(&paused, &pauseFailed); err != nil {
		h.t.Fatal(err)
	}

	summary := fmt.Sprintf("chaos: sandboxes=%d requests=%d kills=%d pg_restarts=%d leaks=%d missing=%d duplicates=%d unsettled=%d unreleased=%d max_owner_overshoot=%s illegal_histories=%d",
		total, h.requests.Load(), h.kills.Load(), boolInt(!h.pgUp.IsZero()), len(leaks), len(missing), len(duplicates),
		len(s.unsettled), len(s.unreleased), maxOvershoot.Round(time.Millisecond), len(illegal))
	if h.hosts == nil {
		summary += fmt.Sprintf(" transitions=%d paused_at_end=%d pause_failed=%d stuck_transitions=%d max_transition_overdue=%s pause_mismatches=%d",
			h.transitions.Load(), paused, pauseFailed, len(stuck), maxOverdue.Round(time.Millisecond), len(mismatched))
	}
	if h.hosts != nil {
		h.mu.Lock()
		deaths, peak := 0, h.peak
		for _, ws := range h.downs {
			for _, w := range ws {
				if w.to.Sub(w.from) > nodeGrace {
					deaths++
				}
			}
		}
		h.mu.Unlock()
		summary = strings.Replace(summary, "chaos:", fmt.Sprintf("chaos: nodes=%d node_deaths=%d", len(h.hosts.List), deaths), 1) +
			fmt.Sprintf(" lost=%d wrongly_lost=%d peak_running=%d ready_at_end=%d remade_after_interrupt=%d", lost, len(wronglyLost), peak, len(s.ready), remade)
	}
	summary += fmt.Sprintf(" owner_bounds=%d %s unaccounted=%d", len(bounds), lapseFigs, len(unaccountedCreates))
	if h.hosts != nil {
		summary += fmt.Sprintf(" held_after_storm=%d held_after_grace=%d", len(heldNow), len(heldAfter))
	}
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
	if len(heldNow) > 0 {
		h.t.Logf("held right after the storm (%d): %v", len(heldNow), heldNow[:min(len(heldNow), 10)])
	}
	fail("resources the hosts still held a grace period after the storm, of sandboxes released, unknown or placed elsewhere", heldAfter)
	fail("ready sandboxes missing at the provider", missing)
	fail("sandboxes created more than once", duplicates)
	for _, d := range duplicates[:min(len(duplicates), 3)] {
		id, _, _ := strings.Cut(d, "×")
		h.t.Logf("history of %s:\n%s", id, h.history(conn, id))
	}
	fail("sandboxes marked lost while their node was alive", wronglyLost)
	if h.hosts == nil {
		h.checkSnapshots(ctx, conn)
	}
	fail("owned sandboxes that outlived their owner's lease by more than one interval", overshot)
	fail("accepted creates the registry lost or never settled", unaccountedCreates)
	fail("illegal histories", illegal)
	fail("sandboxes pausing or resuming past their deadline by more than one interval", stuck)
	fail("sandboxes paused in the registry but not at the provider, or the other way round", mismatched)
	h.checkPools(ctx, conn)
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

// checkLost counts the sandboxes that ended lost, and returns those whose
// node was alive then. A node's heartbeat, every fifth of NODE_GRACE, can
// lapse no sooner than 4/5 of NODE_GRACE after its replica's kill, and the
// node is alive again once its restarted replica answers: a sandbox may be
// lost only within that span. The check allows from half a grace after the
// kill (a heartbeat a little late before it) until 2s after the return (a
// judgement made just before it).
// history is a sandbox's events, one per line, to explain a failure.
func (h *chaos) history(conn *pgx.Conn, id string) string {
	rows, err := conn.Query(h.t.Context(), `
		SELECT at, coalesce(from_state, '-'), to_state, actor, coalesce(message, '') FROM sandbox_events WHERE sandbox_id = $1 ORDER BY id`, id)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var (
			at                       time.Time
			from, to, actor, message string
		)
		if err := rows.Scan(&at, &from, &to, &actor, &message); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s %s>%s %s: %s\n", at.Format("15:04:05.000"), from, to, actor, message)
	}
	return b.String()
}

func (h *chaos) checkLost(ctx context.Context, conn *pgx.Conn) (int, []string) {
	rows, err := conn.Query(ctx, `SELECT id, coalesce(node, ''), ended_at FROM sandboxes WHERE reason = 'lost'`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	var lost int
	var wrong []string
	for rows.Next() {
		var id, node string
		var ended time.Time
		if err := rows.Scan(&id, &node, &ended); err != nil {
			h.t.Fatal(err)
		}
		lost++
		dead := false
		for _, w := range h.downs[node] {
			if !ended.Before(w.from.Add(nodeGrace/2)) && !ended.After(w.to.Add(2*time.Second)) {
				dead = true
				break
			}
		}
		if !dead {
			wrong = append(wrong, fmt.Sprintf("%s on %q at %s", id, node, ended.Format("15:04:05.000")))
		}
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return lost, wrong
}

func (h *chaos) checkHistories(ctx context.Context, conn *pgx.Conn) []string {
	rows, err := conn.Query(ctx, `
		SELECT e.sandbox_id, coalesce(e.from_state, ''), e.to_state, coalesce(e.reason, ''), s.state
		FROM sandbox_events e JOIN sandboxes s ON s.id = e.sandbox_id
		ORDER BY e.sandbox_id, e.id`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var (
		illegal []string
		curID   string
		prev    domain.State
		final   domain.State
		bad     bool
	)
	finish := func() {
		if curID != "" && !bad && prev != final {
			illegal = append(illegal, curID+": history ends in "+string(prev)+" but the sandbox is "+string(final))
		}
	}
	for rows.Next() {
		var id string
		var from, to, st domain.State
		var reason domain.Reason
		if err := rows.Scan(&id, &from, &to, &reason, &st); err != nil {
			h.t.Fatal(err)
		}
		if id != curID {
			finish()
			curID, prev, final, bad = id, "", st, false
			if from != "" || to != domain.StateRequested {
				illegal = append(illegal, id+": history does not start with the request")
				bad = true
			}
			prev = to
			continue
		}
		if bad {
			continue
		}
		if from == prev && to == prev && (reason == domain.ReasonOwnerTransferred || reason == domain.ReasonOutageCredited ||
			slices.Contains(domain.SnapshotReasons, reason)) {
			continue // a record in the history, not a transition
		}
		if from != prev || !domain.CanTransition(from, to) {
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
