package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/test/harness"
)

var nOwners = flag.Int("chaos.owners", 12, "owner processes alive at once (TestChaosOwners)")

const (
	// ownersTTL is the owners' lease in TestChaosOwners; they heartbeat
	// every sixth of it. It must exceed the outage credit's tolerance (two
	// intervals) plus a heartbeat period and slack: an outage shorter than
	// the tolerance is not credited.
	ownersTTL = 6 * time.Second
	// partitionFor is how long the partitioned replica is cut off from
	// Postgres: longer than a lease.
	partitionFor = 2 * ownersTTL
)

// TestChaosOwners measures the owner bound under faults. Owner processes
// (test/chaos/owner: real clients, each with a sandbox, heartbeating
// through any replica) are SIGKILLed at random and replaced; meanwhile one
// replica, on a simulated host of its own, is cut off from Postgres by
// nftables in its network namespace for longer than a lease (again every
// 45 s of a long storm), Postgres is crashed and restarted once, and the
// other replicas are killed and restarted at random. Then every owned
// sandbox is judged against the first lapse of its owner's lease after its
// create (from the owner processes' own record of every lease granted,
// credits included: lapses_test.go) and against its owner's kill:
//
//   - max_owner_overshoot: from the lapse to the sandbox's end (a lapse
//     while Postgres was down counts from its return);
//   - outlived: sandboxes that overshot by more than one janitor interval
//     plus slack (must be 0);
//   - ended_while_alive: sandboxes ended before their owner was killed,
//     while it heartbeated (must be 0);
//   - credits_outside_outage: outage credits not explained by the Postgres
//     restart, such as one replica's partition (must be 0).
func TestChaosOwners(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	harness.RequireHosts(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("the partition needs nft (nftables)")
	}
	seed := uint64(*seedFlag)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	o := newOwnerChaos(t, seed)
	o.storm()
	o.check()
}

type ownerChaos struct {
	t        *testing.T
	rng      *rand.Rand
	rngMu    sync.Mutex
	hosts    *harness.Hosts
	cluster  string
	dbURL    string
	pgPort   string
	ownerBin string
	logDir   string
	simDir   string
	local    []*harness.Replica // on this machine: killed at random
	cut      *harness.Replica   // on the host: partitioned from Postgres
	urls     []string

	mu          sync.Mutex
	owners      map[string]*ownerProc
	started     int
	killed      int
	replicaKill int
	partitions  []window
	pgDown      time.Time
	pgUp        time.Time
	procs       sync.WaitGroup
}

type ownerProc struct {
	cmd    *exec.Cmd
	killAt time.Time // zero while it runs
}

func newOwnerChaos(t *testing.T, seed uint64) *ownerChaos {
	o := &ownerChaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x0e4e)), owners: map[string]*ownerProc{}, logDir: keptLogDir(t)}
	o.hosts = harness.NewHosts(t, 1)
	o.cluster = o.hosts.StartPostgres("chaosowners")
	o.dbURL = harness.CreateDatabase(t, o.cluster, fmt.Sprintf("owners_%d", seed%1_000_000_000))
	u, err := url.Parse(o.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	o.pgPort = u.Port()
	bin := harness.Build(t)
	o.ownerBin = filepath.Join(t.TempDir(), "owner")
	o.simDir = harness.ReachableTempDir(t)
	build := exec.Command("go", "build", "-o", o.ownerBin, "./test/chaos/owner")
	build.Dir = harness.RepoRoot(t)
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build owner: %v\n%s", err, out)
	}
	env := []string{
		"BOOTSTRAP_API_KEY=" + apiKey,
		"PROVIDERS=sim",
		"SIM_STATE_DIR=" + o.simDir,
		"JANITOR_INTERVAL=" + janitorInterval.String(),
		"DEFAULT_OWNER_TTL=" + ownersTTL.String(),
		"EXECUTOR_LEASE=2s",
		"EXECUTOR_POLL_INTERVAL=250ms",
		"ORPHAN_GRACE=2s",
		"SHUTDOWN_TIMEOUT=2s",
		"DB_MAX_CONNS=8",
		"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
	}
	for i := range 2 {
		r := harness.NewReplica(t, bin, filepath.Join(o.logDir, fmt.Sprintf("replica-%d.log", i)), append(env, "DATABASE_URL="+o.dbURL)...)
		o.local = append(o.local, r)
		o.urls = append(o.urls, r.URL())
	}
	o.cut = o.hosts.List[0].NewReplica(t, bin, filepath.Join(o.logDir, "partitioned.log"), append(env, "DATABASE_URL="+o.hosts.URL(o.dbURL))...)
	o.urls = append(o.urls, o.cut.URL())
	for _, r := range append(slices.Clone(o.local), o.cut) {
		r.Start()
	}
	for _, r := range append(slices.Clone(o.local), o.cut) {
		r.WaitReady(60 * time.Second)
	}
	t.Cleanup(func() {
		o.heal()
		o.killOwners()
		o.procs.Wait()
	})
	return o
}

func (o *ownerChaos) between(lo, hi time.Duration) time.Duration {
	o.rngMu.Lock()
	defer o.rngMu.Unlock()
	return lo + time.Duration(o.rng.Int64N(int64(hi-lo)+1))
}

// startOwner starts one more owner process.
func (o *ownerChaos) startOwner() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started++
	name := fmt.Sprintf("owner-%d", o.started)
	logf, err := os.Create(filepath.Join(o.logDir, name+".log"))
	if err != nil {
		o.t.Fatal(err)
	}
	//nolint:noctx // the test owns the process's lifetime: it is SIGKILLed, and waited for
	cmd := exec.Command(o.ownerBin, "-urls", strings.Join(o.urls, ","), "-key", apiKey, "-name", name, "-ttl", ownersTTL.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		o.t.Fatalf("start owner: %v", err)
	}
	o.owners[name] = &ownerProc{cmd: cmd}
	o.procs.Go(func() {
		_ = cmd.Wait() // reaps it
		_ = logf.Close()
	})
}

// killRandomOwner SIGKILLs one running owner, noting when.
func (o *ownerChaos) killRandomOwner() {
	o.mu.Lock()
	defer o.mu.Unlock()
	var running []string
	for name, p := range o.owners {
		if p.killAt.IsZero() {
			running = append(running, name)
		}
	}
	if len(running) == 0 {
		return
	}
	slices.Sort(running)
	o.rngMu.Lock()
	name := running[o.rng.IntN(len(running))]
	o.rngMu.Unlock()
	o.kill(o.owners[name])
}

// kill SIGKILLs p; o.mu is held.
func (o *ownerChaos) kill(p *ownerProc) {
	if !p.killAt.IsZero() {
		return
	}
	p.killAt = time.Now()
	_ = p.cmd.Process.Kill()
	o.killed++
}

func (o *ownerChaos) killOwners() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.owners {
		o.kill(p)
	}
}

// leaseBook reads the owner processes' records (test/chaos/owner): what
// each sent, and what was granted or accepted.
func (o *ownerChaos) leaseBook() *leaseBook {
	book := newLeaseBook()
	o.mu.Lock()
	names := make([]string, 0, len(o.owners))
	for name := range o.owners {
		names = append(names, name)
	}
	o.mu.Unlock()
	stamp := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			o.t.Fatalf("owner log: bad time %q", s)
		}
		return t
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(o.logDir, name+".log"))
		if err != nil {
			o.t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 4 && f[0] == "created":
				book.create(f[1], name, stamp(f[2]), stamp(f[3]))
			case len(f) == 3 && f[0] == "create-unanswered":
				book.unanswered(name, stamp(f[1]), stamp(f[2]))
			case len(f) == 4 && f[0] == "granted":
				book.heartbeat(name, stamp(f[1]), stamp(f[2]), stamp(f[3]))
			case len(f) == 3 && f[0] == "unanswered":
				book.heartbeat(name, stamp(f[1]), stamp(f[2]), time.Time{})
			}
		}
	}
	return book
}

// nft runs nft in the partitioned replica's network namespace.
func (o *ownerChaos) nft(args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", o.hosts.List[0].NetNS, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// partition drops every packet from the host's replica to Postgres: its
// connections hang and new ones never open, as when a network path dies.
// Its clients still reach it.
func (o *ownerChaos) partition() {
	for _, args := range [][]string{
		{"add", "table", "inet", "tetherchaos"},
		{"add", "chain", "inet", "tetherchaos", "out", "{ type filter hook output priority 0 ; }"},
		{"add", "rule", "inet", "tetherchaos", "out", "ip", "daddr", o.hosts.Gateway.String(), "tcp", "dport", o.pgPort, "drop"},
	} {
		if err := o.nft(args...); err != nil {
			o.t.Fatal(err)
		}
	}
}

// heal undoes partition (if it is in place).
func (o *ownerChaos) heal() {
	_ = o.nft("delete", "table", "inet", "tetherchaos")
}

func (o *ownerChaos) storm() {
	ctx, cancel := context.WithTimeout(o.t.Context(), *stormFor)
	defer cancel()
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for range *nOwners {
		o.startOwner()
	}
	var wg sync.WaitGroup
	// Owners die at random, and new ones take their place.
	wg.Go(func() {
		for sleep(o.between(300*time.Millisecond, 1500*time.Millisecond)) {
			o.killRandomOwner()
			o.startOwner()
		}
	})
	// The replicas on this machine are killed at random, one at a time.
	wg.Go(func() {
		for sleep(o.between(3*time.Second, 8*time.Second)) {
			o.rngMu.Lock()
			r := o.local[o.rng.IntN(len(o.local))]
			o.rngMu.Unlock()
			r.Kill()
			o.mu.Lock()
			o.replicaKill++
			o.mu.Unlock()
			time.Sleep(o.between(500*time.Millisecond, 2*time.Second))
			r.Start()
			waitReady(o.t, r, time.Minute)
		}
	})
	// One partition of the host's replica, a Postgres crash, and another
	// partition every 45 s while the storm lasts, never two at once.
	wg.Go(func() {
		cutOff := func() bool {
			if !sleep(0) {
				return false
			}
			from := time.Now()
			o.partition()
			time.Sleep(partitionFor) // the whole span, even past the storm's end
			o.heal()
			o.mu.Lock()
			o.partitions = append(o.partitions, window{from, time.Now()})
			o.mu.Unlock()
			return true
		}
		if !sleep(*stormFor*15/100) || !cutOff() || !sleep(2*time.Second) {
			return
		}
		o.mu.Lock()
		o.pgDown = time.Now()
		o.mu.Unlock()
		harness.Postgres(o.t, "stop", o.cluster, "TETHER_PG_STOP_MODE=immediate")
		time.Sleep(time.Second)
		harness.Postgres(o.t, "start", o.cluster, o.hosts.PostgresEnv()...)
		o.mu.Lock()
		o.pgUp = time.Now()
		o.mu.Unlock()
		for sleep(45*time.Second - partitionFor) {
			if deadline, _ := ctx.Deadline(); time.Until(deadline) < partitionFor {
				return
			}
			if !cutOff() {
				return
			}
		}
	})
	wg.Wait()
	o.killOwners()
	for _, r := range o.local {
		if !r.Alive() {
			r.Start()
		}
		waitReady(o.t, r, time.Minute)
	}
}

func (o *ownerChaos) check() {
	ctx := o.t.Context()
	conn, err := pgx.Connect(ctx, o.dbURL)
	if err != nil {
		o.t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	// Every owner is dead now: within a lease and an interval (and slack),
	// every owned sandbox must have ended.
	var stillLive int
	for deadline := time.Now().Add(ownersTTL + janitorInterval + 20*time.Second); ; time.Sleep(250 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE owner IS NOT NULL AND state IN ('requested', 'creating', 'ready')`).Scan(&stillLive); err != nil {
			o.t.Fatal(err)
		}
		if stillLive == 0 || time.Now().After(deadline) {
			break
		}
	}

	// The owner bound from every lapse: the owner processes' own record
	// of what they sent and were granted (lapses_test.go).
	book := o.leaseBook()
	recorded, err := readCredits(ctx, conn)
	if err != nil {
		o.t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var released map[string]time.Time
	if f, err := os.Open(filepath.Join(o.simDir, "calls.log")); err == nil {
		calls, err := parseCalls(f)
		_ = f.Close()
		if err != nil {
			o.t.Error(err)
		}
		released = removals(calls)
	}
	rows, err := conn.Query(ctx, `SELECT id, owner, created_at, ended_at FROM sandboxes WHERE owner IS NOT NULL`)
	if err != nil {
		o.t.Fatal(err)
	}
	var (
		sandboxes = map[string]ended{}
		alive     []string
	)
	for rows.Next() {
		var id, owner string
		var created time.Time
		var endedAt *time.Time
		if err := rows.Scan(&id, &owner, &created, &endedAt); err != nil {
			o.t.Fatal(err)
		}
		sb := ended{owner: owner, createdAt: created, released: released[id]}
		if endedAt != nil {
			sb.endedAt = *endedAt
			if p := o.owners[owner]; p != nil && endedAt.Before(p.killAt) {
				alive = append(alive, fmt.Sprintf("%s of %s ended %s before its owner's kill", id, owner, p.killAt.Sub(*endedAt).Round(time.Millisecond)))
			}
		}
		sandboxes[id] = sb
	}
	if err := rows.Err(); err != nil {
		o.t.Fatal(err)
	}
	bounds := book.bounds(sandboxes, recorded, ownersTTL, o.pgDown, o.pgUp)
	outlived := overshoots(bounds, janitorInterval+overshootSlack)
	finalOver, maxOvershoot, err := finalOvershoots(ctx, conn, o.pgDown, o.pgUp)
	if err != nil {
		o.t.Fatal(err)
	}
	outlived = append(outlived, finalOver...)
	for _, b := range bounds {
		maxOvershoot = max(maxOvershoot, b.toEnd)
	}
	lapseFigs := figures(bounds)

	// Credits: only the Postgres restart may explain one.
	rows, err = conn.Query(ctx, `SELECT replica, unreached_from, unreached_to, owners FROM outage_credits ORDER BY id`)
	if err != nil {
		o.t.Fatal(err)
	}
	var (
		credits         int
		credited        time.Duration
		outsideOutages  []string
		creditsReported []string
	)
	for rows.Next() {
		var replica string
		var from, to time.Time
		var owners int64
		if err := rows.Scan(&replica, &from, &to, &owners); err != nil {
			o.t.Fatal(err)
		}
		credits++
		credited += to.Sub(from)
		c := fmt.Sprintf("%s..%s (%s, %d owners, by %s)", from.Format("15:04:05.000"), to.Format("15:04:05.000"),
			to.Sub(from).Round(time.Millisecond), owners, replica)
		creditsReported = append(creditsReported, c)
		if o.pgDown.IsZero() || to.Before(o.pgDown) || from.After(o.pgUp.Add(3*janitorInterval)) {
			outsideOutages = append(outsideOutages, c)
		}
	}
	if err := rows.Err(); err != nil {
		o.t.Fatal(err)
	}
	var cutFor time.Duration
	for _, w := range o.partitions {
		cutFor += w.to.Sub(w.from)
	}
	summary := fmt.Sprintf("chaos-owners: owners=%d owner_kills=%d sandboxes=%d replica_kills=%d partitions=%d partitioned_for=%s "+
		"pg_restarts=%d pg_down=%s credits=%d credited=%s max_owner_overshoot=%s outlived=%d ended_while_alive=%d "+
		"credits_outside_outage=%d still_live=%d owner_bounds=%d %s",
		o.started, o.killed, len(sandboxes), o.replicaKill, len(o.partitions), cutFor.Round(time.Millisecond),
		boolInt(!o.pgUp.IsZero()), o.pgUp.Sub(o.pgDown).Round(time.Millisecond), credits, credited.Round(time.Millisecond),
		maxOvershoot.Round(time.Millisecond), len(outlived), len(alive), len(outsideOutages), stillLive, len(bounds), lapseFigs)
	fmt.Println(summary)
	o.t.Log(summary)
	for _, c := range creditsReported {
		o.t.Logf("credit %s", c)
	}
	fail := func(what string, items []string) {
		if len(items) > 0 {
			slices.Sort(items)
			o.t.Errorf("%s (%d): %v", what, len(items), items[:min(len(items), 10)])
		}
	}
	fail("owned sandboxes that outlived their owner's lease by more than one interval", outlived)
	fail("sandboxes ended while their owner was alive and heartbeating", alive)
	fail("outage credits not explained by the Postgres restart", outsideOutages)
	if stillLive > 0 {
		o.t.Errorf("%d owned sandboxes still live after every owner died", stillLive)
	}
	if len(sandboxes) < 20 || len(bounds) < 10 {
		o.t.Errorf("the storm made %d owned sandboxes and judged only %d against a lapse; the run proves little", len(sandboxes), len(bounds))
	}
	if len(o.partitions) == 0 || o.pgUp.IsZero() {
		o.t.Errorf("the storm was too short for its faults: %d partitions, Postgres restarted: %v", len(o.partitions), !o.pgUp.IsZero())
	}
}
