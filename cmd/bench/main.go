// Command bench measures Tether against the physical limit of its Postgres:
// it runs pgbench baselines and Tether workloads on the same server in the
// same run, and reports each performance target (BENCHMARKS.md) as a ratio.
//
//	go run ./cmd/bench [-quick] [-local=false] [-kubernetes=false] [-only kubernetes|pools|local] [-out bench-results] [-database-url URL [-admin-url URL]] [-profile=false] [-ab REV]
//
// Each Tether phase also records CPU per operation, a CPU profile of Tether
// and Postgres's statements (profile.go); -ab REV runs every Tether phase on
// the Tether of that git revision too, alternating, for an A/B (ab.go).
//
// As root on a host with bubblewrap and util-linux it also compares the
// local provider's sandboxes with bare bwrap and nsenter (local.go; -only
// local runs those phases alone); with
// KUBECONFIG set, the kubernetes provider's pods and execs with bare
// client-go calls on the same cluster (kube.go); -only kubernetes runs
// that phase alone. The warm pools' phases (pools.go) time a sandbox from
// its create to its first command's output, cold and claimed from a pool,
// and claims per second; -only pools runs them alone.
// Without -database-url it starts a Postgres cluster of its own ("bench",
// durable: fsync on) through scripts/postgres.sh. Tether runs as the role of
// -database-url; databases are made and seeded through -admin-url (default:
// -database-url), which must be a superuser. It writes results.md,
// results.json and latency.svg to -out, and prints the table.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	out         string
	quick       bool
	throughput  bool
	databaseURL string
	adminURL    string
	phase       time.Duration
	workers     int
	samples     int
	seedSmall   int
	seedBig     int
	seedFiller  int
	live        int
	scale       int
	// local runs the local provider's phases; localSandboxes and
	// localExecs are their sequential samples.
	local          bool
	localSandboxes int
	localExecs     int
	// kube runs the kubernetes provider's phases on the cluster of
	// kubeconfig; kubeSandboxes and kubeExecs are their sequential
	// samples. only, if set, is the one phase to run ("kubernetes").
	kube          bool
	kubeconfig    string
	kubeSandboxes int
	kubeExecs     int
	only          string
	// pools runs the warm pools' phases (with a Tether of their own)
	// when no phase is run alone.
	pools bool
	// profile takes a CPU profile of Tether in each of its phases and reads
	// Postgres's statements per phase; ab, if set, is a git revision whose
	// Tether runs the same phases in the same run (abRoot: its checkout).
	profile bool
	ab      string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "bench-results", "folder for results.md, results.json and latency.svg")
	fs.BoolVar(&o.quick, "quick", false, "a smoke run in seconds: tiny phases and seeds, numbers not meaningful")
	fs.BoolVar(&o.throughput, "throughput-only", false, "only the baselines and the throughput and latency phases (no 1M seed, no janitor)")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("BENCH_DATABASE_URL"), "Postgres server to use, as the role Tether runs as (default: start cluster \"bench\")")
	fs.StringVar(&o.adminURL, "admin-url", os.Getenv("BENCH_ADMIN_URL"), "a superuser on the same server, to make and seed databases (default: -database-url)")
	fs.DurationVar(&o.phase, "phase", 10*time.Second, "length of each throughput phase")
	fs.IntVar(&o.workers, "workers", 16, "concurrent clients in the throughput phases")
	fs.IntVar(&o.samples, "samples", 400, "sequential samples per latency measurement")
	fs.BoolVar(&o.local, "local", true, "the local provider's phases against bare bwrap and nsenter (as root, with bubblewrap and util-linux)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the cluster of the kubernetes provider's phases")
	fs.BoolVar(&o.kube, "kubernetes", os.Getenv("KUBECONFIG") != "", "the kubernetes provider's phases against bare client-go (default: when KUBECONFIG is set)")
	fs.BoolVar(&o.pools, "pools", true, "the warm pools' phases (time to interactive, claims) before the sim phases")
	fs.StringVar(&o.only, "only", "", "run only this phase: kubernetes, pools (the warm pools' time to interactive and claims) or local (the local provider's creates and execs)")
	fs.BoolVar(&o.profile, "profile", true, "CPU-profile Tether in each of its phases and read Postgres's statements (pg_stat_statements) per phase")
	fs.StringVar(&o.ab, "ab", os.Getenv("BENCH_AB"), "a git revision whose Tether runs the same phases in the same run, for an A/B of CPU per operation and throughput")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch o.only {
	case "":
	case "kubernetes":
		o.kube = true
	case "pools", "local":
		o.kube = false
	default:
		return o, fmt.Errorf("-only %q: the phases that run alone are kubernetes, pools and local", o.only)
	}
	if o.kube && o.kubeconfig == "" {
		return o, errors.New("the kubernetes phases need -kubeconfig (or KUBECONFIG)")
	}
	o.kubeSandboxes, o.kubeExecs = 30, 100
	o.seedSmall, o.seedBig, o.seedFiller, o.live, o.scale = 1000, 1_000_000, 250_000, 100_000, 10
	o.localSandboxes, o.localExecs = 20, 200
	if o.quick {
		o.phase, o.workers, o.samples = time.Second, 4, 20
		o.seedSmall, o.seedBig, o.seedFiller, o.live, o.scale = 100, 2000, 500, 1000, 1
		o.localSandboxes, o.localExecs = 3, 20
		o.kubeSandboxes, o.kubeExecs = 3, 10
	}
	return o, nil
}

// databases are the databases the phases that o runs need, but for the
// kubernetes and local ones; skip, if set, is why the local phases do not
// run.
func (o options) databases() (names []string, skip string) {
	switch o.only {
	case "":
		names = []string{"bench_pgbench", floorDB, "bench_main", "bench_janitor", "bench_pools"}
		if o.ab != "" {
			names = append(names, "bench_ab")
		}
		return names, ""
	case "pools":
		return []string{"bench_pools"}, ""
	case "local":
		return nil, ""
	}
	return nil, "-only " + o.only
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	r := &benchRun{o: o, start: time.Now(), stderr: stderr}
	defer r.close()
	if r.root, err = repoRoot(); err != nil {
		return err
	}
	lb, err := r.prepare(ctx)
	if err != nil {
		return err
	}
	if o.only == "pools" {
		if err := r.measurePools(ctx, lb); err != nil {
			return err
		}
		return r.finish(stdout)
	}
	// 0. The local provider against bare bubblewrap and nsenter, with a
	// Tether of its own that is gone before the other phases begin: with
	// a second provider enabled, each wake-up of the executor claims for
	// both, which the sim phases would pay for.
	if lb != nil {
		lt, notes, err := measureLocal(ctx, r.root, r.dbs["bench_local"], lb, o, r.logf)
		if err != nil {
			return err
		}
		r.res.Targets = append(r.res.Targets, lt...)
		r.res.Notes = append(r.res.Notes, notes...)
	}
	if o.only == "local" {
		return r.finish(stdout)
	}
	// 0b. The warm pools' time to interactive and claims, with a Tether
	// of their own.
	if o.only == "" && o.pools {
		if err := r.measurePools(ctx, lb); err != nil {
			return err
		}
	}
	// 0c. The kubernetes provider against bare client-go, with a Tether
	// of its own too.
	if err := r.measureKube(ctx); err != nil || o.only != "" {
		if err == nil {
			err = r.finish(stdout)
		}
		return err
	}
	// 1 and 2. The baselines and Tether with the sim provider.
	s, err := r.startSim(ctx)
	if err != nil {
		return err
	}
	if err := s.measureThroughput(ctx); err != nil {
		return err
	}
	if o.throughput {
		return r.finish(stdout)
	}
	// 3. Listing and history, at 1k and at 1M sandboxes.
	if err := s.measureListing(ctx); err != nil {
		return err
	}
	// 4. The janitor's reconciliation of 100k live sandboxes.
	if err := r.measureJanitor(ctx); err != nil {
		return err
	}
	return r.finish(stdout)
}

// benchRun is one run of the benchmark: its options, the results it
// gathers and what it closes at the end, the last opened first.
type benchRun struct {
	o      options
	start  time.Time
	root   string
	stderr io.Writer
	res    *results
	// dbs are the databases for the role Tether runs as; seeds, the same
	// databases for the admin, which may switch triggers off for bulk loads.
	dbs, seeds map[string]string
	closers    []func()
	// prof measures each Tether phase's cost; nil without -profile.
	prof *profiler
}

func (r *benchRun) logf(format string, a ...any) {
	_, _ = fmt.Fprintf(r.stderr, "[%5.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, a...))
}

// onClose has close call fn.
func (r *benchRun) onClose(fn func()) { r.closers = append(r.closers, fn) }

// close closes what the run opened, in reverse order.
func (r *benchRun) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// prepare finds the Postgres server (or starts one), makes a fresh database
// for each phase, and returns the local phases' bench, nil when they do
// not run here.
func (r *benchRun) prepare(ctx context.Context) (*localBench, error) {
	// Databases are made through adminURL and used through serverURL, as
	// the role Tether runs as; a server given by URL is used as both.
	serverURL, adminURL := r.o.databaseURL, cmp.Or(r.o.adminURL, r.o.databaseURL)
	if serverURL == "" {
		r.logf("starting Postgres cluster \"bench\"")
		var err error
		if serverURL, err = postgresScript(ctx, r.root, "start"); err != nil {
			return nil, err
		}
		if adminURL, err = postgresScript(ctx, r.root, "admin-url"); err != nil {
			return nil, err
		}
	}
	r.res = &results{When: time.Now().UTC(), Machine: machine(), Quick: r.o.quick, Extra: map[string]string{}}
	admin, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	r.onClose(admin.Close)
	if postmasterPID = findPostmaster(ctx, admin); postmasterPID == 0 {
		r.logf("the server's postmaster is not known here: Postgres CPU counts every postgres process on this machine")
	}
	// The local provider's phases need root, bubblewrap and util-linux;
	// elsewhere the rest of the benchmark runs without them.
	lb, localSkip, err := newLocalBench(r.o.local && (r.o.only == "" || r.o.only == "pools" || r.o.only == "local"))
	if err != nil {
		return nil, err
	}
	names, skip := r.o.databases()
	if skip != "" {
		localSkip = skip
	}
	if r.o.kube {
		names = append(names, "bench_kube")
	}
	if lb != nil {
		r.onClose(lb.close)
		if r.o.only == "" || r.o.only == "local" {
			names = append(names, "bench_local")
		}
	} else {
		localSkip = "Local provider phases skipped: " + localSkip
		r.logf("%s", localSkip)
		r.res.Notes = append(r.res.Notes, localSkip)
	}
	if r.o.profile {
		r.prof = newProfiler(ctx, admin, r.o.out, r.logf)
	}
	r.dbs, r.seeds = map[string]string{}, map[string]string{}
	for _, name := range names {
		if r.dbs[name], err = recreateDB(ctx, admin, serverURL, name); err != nil {
			return nil, err
		}
		if r.seeds[name], err = withPath(adminURL, name); err != nil {
			return nil, err
		}
	}
	return lb, nil
}

// cpu runs fn and records where the CPU time went meanwhile, with pid as
// Tether's process.
func (r *benchRun) cpu(name string, pid int, fn func()) {
	before := sampleCPU(pid)
	fn()
	r.res.CPU = append(r.res.CPU, name+": "+cpuSplit(before, sampleCPU(pid)))
}

// simBench is Tether with the instant sim provider and auth on, beside the
// pgbench baselines its phases are compared with.
type simBench struct {
	*benchRun
	pb *pgbench
	// pool is bench_main as the role Tether runs as; seedPool, as the admin.
	pool, seedPool *pgxpool.Pool
	keys           map[string]string
	srv            *tether
	api            *api
	// subjects are the Tethers each phase runs on, in turn: this working
	// tree's, then the -ab baseline's, if any (see abSlices for the order).
	subjects []*subject
	// floorPool is the floor's database (floor.go), and floors what its
	// runs measured.
	floorPool *pgxpool.Pool
	floors    []floorResult
}

// subject is one Tether under test, with its own database.
type subject struct {
	name string // "this", or the -ab revision
	srv  *tether
	api  *api
	pool *pgxpool.Pool
	db   string
}

// startSim prepares the baselines' tables (each baseline runs just before
// the Tether phase it is compared with, see pgbench.tpcb), then builds and
// starts Tether on bench_main.
func (r *benchRun) startSim(ctx context.Context) (*simBench, error) {
	pb, err := newPgbench(r.dbs["bench_pgbench"])
	if err != nil {
		return nil, err
	}
	pbPool, err := pgxpool.New(ctx, r.dbs["bench_pgbench"])
	if err != nil {
		return nil, err
	}
	r.onClose(pbPool.Close)
	pb.execSQL = func(ctx context.Context, sql string) error { _, err := pbPool.Exec(ctx, sql); return err }
	r.logf("pgbench: initialising scale %d", r.o.scale)
	cleanup, err := pb.prepare(ctx, r.o.phase, r.o.scale, r.o.workers)
	if err != nil {
		return nil, err
	}
	r.onClose(cleanup)

	s := &simBench{benchRun: r, pb: pb, keys: map[string]string{"small": "bench-small-key", "big": "bench-big-key"}}
	if s.floorPool, err = prepareFloor(ctx, r.dbs[floorDB]); err != nil {
		return nil, err
	}
	r.onClose(s.floorPool.Close)
	if s.pool, err = pgxpool.New(ctx, r.dbs["bench_main"]); err != nil {
		return nil, err
	}
	r.onClose(s.pool.Close)
	if s.seedPool, err = pgxpool.New(ctx, r.seeds["bench_main"]); err != nil {
		return nil, err
	}
	r.onClose(s.seedPool.Close)
	st := store.New(s.pool)
	if _, err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	for tenant, key := range s.keys {
		if _, err := st.RegisterAPIKey(ctx, tenant, "bench", key); err != nil {
			return nil, err
		}
	}
	r.logf("building and starting Tether")
	if s.srv, err = startTether(ctx, r.root, r.dbs["bench_main"], nil, r.o); err != nil {
		return nil, err
	}
	r.onClose(s.srv.stop)
	s.api = newAPI(s.srv.base, "bench-key", r.o.workers*2)
	r.onClose(s.api.wire.close)
	s.subjects = []*subject{{name: "this", srv: s.srv, api: s.api, pool: s.pool, db: "bench_main"}}
	if r.o.ab != "" {
		ab, err := r.startBaseline(ctx)
		if err != nil {
			return nil, err
		}
		s.subjects = append(s.subjects, ab)
	}
	return s, nil
}

// pid is the Tether process's.
func (s *simBench) pid() int { return s.srv.cmd.Process.Pid }

// settle waits until Tether has no work left from the last phase.
func (s *simBench) settle(ctx context.Context) error { return waitSettled(ctx, s.pool, s.logf) }

// baseline runs one pgbench baseline into dst, once Tether has settled.
func (s *simBench) baseline(ctx context.Context, name string, dst *float64, fn func(context.Context) (float64, error)) error {
	if err := s.settle(ctx); err != nil {
		return err
	}
	s.logf("pgbench: %s", name)
	var err error
	run := func() int64 {
		s.cpu("pgbench "+name, s.pid(), func() { *dst, err = fn(ctx) })
		if err != nil || *dst <= 0 {
			return 0
		}
		if strings.Contains(name, "1 client") { // ms per transaction
			return int64(s.o.phase.Seconds() * 1000 / *dst)
		}
		return int64(*dst * s.o.phase.Seconds()) // transactions per second
	}
	if s.prof == nil {
		run()
		return err
	}
	pc, perr := s.prof.measure(ctx, "pgbench "+name, "pgbench", s.pid(), "", "bench_pgbench", s.o.phase, run,
		func() error { return nil })
	if err == nil && perr == nil {
		pc.Rate = float64(pc.Ops) / s.o.phase.Seconds()
		s.res.Costs = append(s.res.Costs, pc)
	}
	return cmp.Or(err, perr)
}

// measureThroughput runs the throughput and latency phases, each after
// the baseline it is compared with, and adds their targets.
func (s *simBench) measureThroughput(ctx context.Context) error {
	unloaded, err := s.unloadedLatency(ctx)
	if err != nil {
		return err
	}
	createRate, err := s.createThroughput(ctx)
	if err != nil {
		return err
	}
	getRate, err := s.getThroughput(ctx)
	if err != nil {
		return err
	}
	lifeRate, err := s.lifecycleThroughput(ctx)
	if err != nil {
		return err
	}
	loaded, err := s.loadedLatency(ctx, lifeRate)
	if err != nil {
		return err
	}
	b, res := &s.res.Baselines, s.res
	single := b.SingleLatencyMS
	res.Targets = append(res.Targets,
		atLeast("create throughput (POST → 202, durable)", createRate, "req/s", b.InsertTPS, "insert tps", 0.40),
		atLeast("full lifecycles (create, ready, delete, released)", lifeRate, "/s", b.TPCBTPS, "TPC-B tps", 0.25),
		atMost("request → ready p50, unloaded", ms(unloaded.percentile(50)), "ms", single, "ms/tx (1 client)", 4),
		atMost("request → ready p99, unloaded", ms(unloaded.percentile(99)), "ms", single, "ms/tx (1 client)", 20),
	)
	loadedP50 := atMost("request → ready p50, at 50% of max throughput", ms(loaded.percentile(50)), "ms", single, "ms/tx (1 client)", 4)
	loadedP99 := atMost("request → ready p99, at 50% of max throughput", ms(loaded.percentile(99)), "ms", single, "ms/tx (1 client)", 20)
	loadedP50.Info, loadedP99.Info = true, true
	res.Targets = append(res.Targets, loadedP50, loadedP99,
		atLeast("GET /v1/sandboxes/{id}", getRate, "req/s", b.SelectOnlyTPS, "select-only tps", 0.30))
	res.Targets = append(res.Targets, floorTargets(s.floors, *b)...)
	return nil
}

// abSlices is how many slices a phase is cut into when it runs on two
// Tethers: the slices alternate between them, so that a change in the
// machine's load (shared, noisy) lands on both alike, and which of the two
// goes first alternates too (this, the other; the other, this; …), so that
// going first costs neither more than the other: with the working tree's
// always first, an A/A run of one revision against itself put the first
// one's CPU per unloaded request → ready at 1.12× the second's.
const abSlices = 4

// phase runs a Tether phase on each subject, in the order abSlices says,
// and records what each cost (CPU per operation over all its slices; the
// profile and Postgres's statements of its first slice, which the working
// tree's runs first, so those two keep some of the first's cost); fn runs slice
// `slice` of `slices` and returns the operations it completed. It returns
// each subject's operations per second.
func (s *simBench) phase(ctx context.Context, name string, fn func(ctx context.Context, sub *subject, slice, slices int) (int64, error)) (map[string]float64, error) {
	slices := 1
	if len(s.subjects) > 1 {
		slices = abSlices
	}
	type total struct {
		pc         phaseCost
		ops        int64
		took       time.Duration
		tether, pg float64 // CPU µs
	}
	totals := make([]total, len(s.subjects))
	for slice := range slices {
		for k := range s.subjects {
			i := k
			if slice%2 == 1 {
				i = len(s.subjects) - 1 - k
			}
			sub := s.subjects[i]
			pc, ops, took, err := s.slice(ctx, name, sub, slice, slices, fn)
			if err != nil {
				return nil, err
			}
			t := &totals[i]
			if slice == 0 {
				t.pc = pc
			}
			t.tether += pc.TetherUS * float64(pc.Ops)
			t.pg += pc.PostgresUS * float64(pc.Ops)
			t.ops += ops
			t.took += took
		}
	}
	rates := map[string]float64{}
	for i, sub := range s.subjects {
		t := totals[i]
		rates[sub.name] = float64(t.ops) / t.took.Seconds()
		if s.prof == nil {
			continue
		}
		pc := t.pc
		pc.Ops, pc.Rate = t.ops, rates[sub.name]
		if t.ops > 0 {
			pc.TetherUS, pc.PostgresUS = t.tether/float64(t.ops), t.pg/float64(t.ops)
		}
		s.res.Costs = append(s.res.Costs, pc)
		s.logf("%s (%s): %.0f /s; Tether %.0f µs, Postgres %.0f µs CPU per operation", name, sub.name, pc.Rate, pc.TetherUS, pc.PostgresUS)
	}
	return rates, nil
}

// slice runs one slice of a phase on sub, once the last one's work has
// settled, and measures it (with -profile; the profile only in the first
// slice).
func (s *simBench) slice(ctx context.Context, name string, sub *subject, slice, slices int,
	fn func(ctx context.Context, sub *subject, slice, slices int) (int64, error),
) (pc phaseCost, ops int64, took time.Duration, err error) {
	if err := s.settle(ctx); err != nil {
		return pc, 0, 0, err
	}
	var ferr error
	run := func() int64 {
		call := func() {
			start := time.Now()
			ops, ferr = fn(ctx, sub, slice, slices)
			took = time.Since(start)
		}
		if slice > 0 {
			call()
			return ops
		}
		label := name
		if len(s.subjects) > 1 {
			label += " (" + sub.name + ")"
		}
		s.cpu(label, sub.srv.cmd.Process.Pid, call)
		return ops
	}
	settle := func() error { return waitSettled(ctx, sub.pool, s.logf) }
	if s.prof == nil {
		run()
		err = settle()
	} else {
		pprofURL := sub.srv.pprof
		if slice > 0 {
			pprofURL = "" // one profile per phase: its first slice's
		}
		pc, err = s.prof.measure(ctx, name, sub.name, sub.srv.cmd.Process.Pid, pprofURL, sub.db, s.o.phase/time.Duration(slices), run, settle)
	}
	if err == nil && ferr != nil {
		err = fmt.Errorf("%s (%s): %w", name, sub.name, ferr)
	}
	return pc, ops, took, err
}

// unloadedLatency measures request → ready one create at a time, after
// pgbench's one-client latency.
func (s *simBench) unloadedLatency(ctx context.Context) (latencies, error) {
	if err := s.baseline(ctx, "simple-update, 1 client", &s.res.Baselines.SingleLatencyMS, s.pb.singleLatency); err != nil {
		return nil, err
	}
	s.res.CPU = s.res.CPU[:len(s.res.CPU)-1] // one client: its CPU split says nothing
	s.logf("request → ready, unloaded: %d sequential samples", s.o.samples)
	var unloaded latencies
	lines := len(s.res.CPU)
	_, err := s.phase(ctx, "request → ready, unloaded", func(ctx context.Context, sub *subject, _, slices int) (int64, error) {
		l, err := sub.api.requestToReady(ctx, max(1, s.o.samples/slices))
		if sub.name == "this" {
			unloaded = append(unloaded, l...)
		}
		if err != nil {
			return int64(len(l)), fmt.Errorf("request to ready: %w", err)
		}
		return int64(len(l)), nil
	})
	s.res.CPU = s.res.CPU[:lines] // one client: its CPU split says nothing
	s.res.Unloaded = toMS(unloaded)
	return unloaded, err
}

// closedPhase runs a closed loop of s.o.workers clients of fn on each
// subject and returns the working tree's rate.
func (s *simBench) closedPhase(ctx context.Context, name, failures string, fn func(ctx context.Context, sub *subject) error) (float64, error) {
	var fails int64
	rates, err := s.phase(ctx, name, func(ctx context.Context, sub *subject, _, slices int) (int64, error) {
		_, ok, f := closedLoop(ctx, s.o.workers, s.o.phase/time.Duration(slices), func(ctx context.Context) error { return fn(ctx, sub) })
		if sub.name == "this" {
			fails += f
		}
		return ok, nil
	})
	s.res.Extra[failures] = strconv.FormatInt(fails, 10)
	return rates["this"], err
}

// createThroughput measures creates per second, after pgbench's inserts.
func (s *simBench) createThroughput(ctx context.Context) (float64, error) {
	if err := s.baseline(ctx, fmt.Sprintf("single-row insert, %d clients", s.o.workers), &s.res.Baselines.InsertTPS, s.pb.insert); err != nil {
		return 0, err
	}
	// The create writes alone: one sandbox a statement, Tether's usual
	// batch in this phase (about 8), and the most 16 clients can share.
	if err := s.floor(ctx, floorCreate, 1, 8, 16); err != nil {
		return 0, err
	}
	s.logf("create throughput: %d clients, %s", s.o.workers, s.o.phase)
	return s.closedPhase(ctx, "Tether creates", "create_failures", func(ctx context.Context, sub *subject) error {
		_, err := sub.api.create(ctx)
		return err
	})
}

// getThroughput measures reads of one ready sandbox per second, after
// pgbench's select-only.
func (s *simBench) getThroughput(ctx context.Context) (float64, error) {
	ready := map[*subject]string{}
	for _, sub := range s.subjects {
		sb, err := sub.api.create(ctx)
		if err == nil {
			err = sub.api.waitReady(ctx, sb.ID)
		}
		if err != nil {
			return 0, err
		}
		ready[sub] = sb.ID
	}
	if err := s.baseline(ctx, fmt.Sprintf("select-only, %d clients", s.o.workers), &s.res.Baselines.SelectOnlyTPS, s.pb.selectOnly); err != nil {
		return 0, err
	}
	s.logf("GET /v1/sandboxes/{id} throughput: %d clients, %s", s.o.workers, s.o.phase)
	return s.closedPhase(ctx, "Tether GETs", "get_failures", func(ctx context.Context, sub *subject) error {
		code, err := sub.api.do(ctx, http.MethodGet, "/v1/sandboxes/"+ready[sub], nil, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
}

// lifecycleThroughput measures full lifecycles per second, after pgbench's
// TPC-B.
func (s *simBench) lifecycleThroughput(ctx context.Context) (float64, error) {
	if err := s.baseline(ctx, fmt.Sprintf("TPC-B, %d clients", s.o.workers), &s.res.Baselines.TPCBTPS, s.pb.tpcb); err != nil {
		return 0, err
	}
	if err := s.floor(ctx, floorLifecycle, 1, 8); err != nil {
		return 0, err
	}
	s.logf("full lifecycles: %d clients, %s", s.o.workers, s.o.phase)
	return s.closedPhase(ctx, "Tether lifecycles", "lifecycle_failures", func(ctx context.Context, sub *subject) error {
		return sub.api.lifecycle(ctx)
	})
}

// loadedLatency measures request → ready in an open loop at half the
// lifecycle throughput lifeRate.
func (s *simBench) loadedLatency(ctx context.Context, lifeRate float64) (latencies, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	rate := max(lifeRate/2, 1)
	s.logf("request → ready at %.0f creates/s (50%% of max lifecycle throughput), open loop, %s", rate, s.o.phase)
	loaded, fails := s.api.openLoop(ctx, rate, s.o.phase)
	s.res.Loaded = toMS(loaded)
	s.res.Extra["loaded_failures"] = strconv.FormatInt(fails, 10)
	s.res.Extra["loaded_rate_per_s"] = fmt.Sprintf("%.0f", rate)
	return loaded, nil
}

// measureListing seeds the small and the big tenant with COPY and compares
// their list and history latencies.
func (s *simBench) measureListing(ctx context.Context) error {
	o := s.o
	s.logf("seeding %d sandboxes (tenant small), %d (tenant big) and %d more to reach %d events, with COPY",
		o.seedSmall, o.seedBig, o.seedFiller, 4*(o.seedSmall+o.seedBig+o.seedFiller))
	seedStart := time.Now()
	small, err := seedSandboxes(ctx, s.seedPool, "small", o.seedSmall, "seeded")
	if err != nil {
		return err
	}
	big, err := seedSandboxes(ctx, s.seedPool, "big", o.seedBig, "seeded")
	if err != nil {
		return err
	}
	if _, err := seedSandboxes(ctx, s.seedPool, "big", o.seedFiller, "filler"); err != nil {
		return err
	}
	s.res.Extra["seed_seconds"] = fmt.Sprintf("%.0f", time.Since(seedStart).Seconds())
	s.logf("seeded in %s", time.Since(seedStart).Round(time.Second))
	listTargets, err := measureListing(ctx, s.srv.base, s.keys, small, big, o.samples, s.logf)
	if err != nil {
		return err
	}
	s.res.Targets = append(s.res.Targets, listTargets...)
	return nil
}

// measureKube runs the kubernetes phases, or notes why they do not run.
func (r *benchRun) measureKube(ctx context.Context) error {
	if !r.o.kube {
		note := "Kubernetes provider phases skipped: KUBECONFIG is unset (or -kubernetes=false)"
		r.logf("%s", note)
		r.res.Notes = append(r.res.Notes, note)
		return nil
	}
	kt, notes, raw, err := measureKube(ctx, r.root, r.dbs["bench_kube"], r.o, r.logf)
	if err != nil {
		return err
	}
	r.res.Targets = append(r.res.Targets, kt...)
	r.res.Notes = append(r.res.Notes, notes...)
	r.res.Kube = raw
	return nil
}

// measureJanitor times the janitor's reconciliation of o.live sandboxes.
func (r *benchRun) measureJanitor(ctx context.Context) error {
	r.logf("janitor: reconciling %d live sandboxes", r.o.live)
	jt, note, err := measureJanitor(ctx, r.dbs["bench_janitor"], r.seeds["bench_janitor"], r.o.live)
	if err != nil {
		return err
	}
	r.res.Targets = append(r.res.Targets, jt...)
	r.res.Notes = append(r.res.Notes, note,
		"Tether ran as one process with LOG_LEVEL=warn, the sim provider instant, auth on; Postgres and Tether share the machine's cores.")
	return nil
}

// waitSettled waits until Tether has no work left from the last phase (no
// sandbox waiting to be created or released), so that none of it runs into
// the next measurement.
func waitSettled(ctx context.Context, pool *pgxpool.Pool, logf func(string, ...any)) error {
	start := time.Now()
	for {
		var pending int64
		err := pool.QueryRow(ctx, `SELECT count(*) FROM sandboxes
			WHERE state IN ('requested', 'creating') OR (state IN ('cancelled', 'terminated', 'failed') AND NOT released)`).Scan(&pending)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if pending == 0 {
			if d := time.Since(start); d > time.Second {
				logf("Tether settled the last phase's work in %s", d.Round(100*time.Millisecond))
			}
			return nil
		}
		if time.Since(start) > 2*time.Minute {
			return fmt.Errorf("settle: %d sandboxes still pending after 2 minutes", pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// finish writes the results and prints them.
func (r *benchRun) finish(stdout io.Writer) error {
	if err := r.res.write(r.o.out); err != nil {
		return err
	}
	_, _ = fmt.Fprint(stdout, r.res.markdown())
	_, _ = fmt.Fprintf(stdout, "\nresults in %s (results.md, results.json, latency.svg); took %s\n", r.o.out, time.Since(r.start).Round(time.Second))
	return nil
}

// measureListing compares list and history latencies of the 1k and the 1M
// tenant: each query's p99 at 1M must be within 2x of its p99 at 1k.
func measureListing(ctx context.Context, base string, keys map[string]string, small, big []string, n int, logf func(string, ...any)) ([]target, error) {
	type query struct {
		name string
		path func(ids []string, i int) string
	}
	queries := []query{
		{"list, first page", func([]string, int) string { return "/v1/sandboxes?limit=50" }},
		{"list, state filter", func([]string, int) string { return "/v1/sandboxes?limit=50&state=terminated" }},
		{"list, label filter", func([]string, int) string { return "/v1/sandboxes?limit=50&label=team=bench" }},
		{"list, deep page (created_before the middle)", func(ids []string, _ int) string {
			return "/v1/sandboxes?limit=50&created_before=" + url.QueryEscape(middle(len(ids)))
		}},
		{"history of one sandbox", func(ids []string, i int) string { return "/v1/sandboxes/" + ids[(i*7919)%len(ids)] + "/events" }},
		{"tenant event feed page", func([]string, int) string { return "/v1/events?limit=50" }},
	}
	smallAPI, bigAPI := newAPI(base, keys["small"], 1), newAPI(base, keys["big"], 1)
	defer smallAPI.wire.close()
	defer bigAPI.wire.close()
	get := func(ctx context.Context, a *api, path string) (time.Duration, error) {
		start := time.Now()
		code, err := a.do(ctx, http.MethodGet, path, nil, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s: status %d", path, code)
		}
		return time.Since(start), err
	}
	var out []target
	for _, q := range queries {
		// The two tenants' requests alternate, so that a burst of noise on
		// this shared machine lands on both samples alike.
		var atSmall, atBig latencies
		for i := range n {
			d, err := get(ctx, smallAPI, q.path(small, i))
			if err != nil {
				return nil, err
			}
			atSmall = append(atSmall, d)
			if d, err = get(ctx, bigAPI, q.path(big, i)); err != nil {
				return nil, err
			}
			atBig = append(atBig, d)
		}
		p99 := map[string]float64{"small": ms(atSmall.percentile(99)), "big": ms(atBig.percentile(99))}
		logf("%s: p99 %.2f ms at %d, %.2f ms at %d", q.name, p99["small"], len(small), p99["big"], len(big))
		out = append(out, atMost(fmt.Sprintf("%s p99 at %s vs %s", q.name, count(len(big)), count(len(small))),
			p99["big"], "ms", p99["small"], "ms", 2))
	}
	return out, nil
}

// middle is the creation time of the middle one of n seeded sandboxes
// (seedSandboxes spaces them a second apart, ending about now).
func middle(n int) string {
	return time.Now().Add(-time.Duration(n/2) * time.Second).UTC().Format(time.RFC3339)
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// measureJanitor times one reconciliation of live sandboxes against the sim
// inventory, in process, and samples the heap meanwhile.
func measureJanitor(ctx context.Context, dbURL, seedURL string, n int) ([]target, string, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, "", err
	}
	defer pool.Close()
	seedPool, err := pgxpool.New(ctx, seedURL)
	if err != nil {
		return nil, "", err
	}
	defer seedPool.Close()
	// The janitor judges on a clock an hour ahead, so every orphan is past
	// its grace period.
	st := store.New(pool, store.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	if _, err := st.Migrate(ctx); err != nil {
		return nil, "", err
	}
	if _, err := st.RegisterAPIKey(ctx, "live", "bench", "bench-live-key"); err != nil {
		return nil, "", err
	}
	simDir, err := os.MkdirTemp("", "tether-bench-sim-")
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = os.RemoveAll(simDir) }()
	orphans, err := seedJanitor(ctx, seedPool, n, simDir)
	if err != nil {
		return nil, "", err
	}
	p, err := sim.New(simDir)
	if err != nil {
		return nil, "", err
	}
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{OrphanGrace: time.Minute, DestroyConcurrency: 16}, st,
		[]domain.Provider{p}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)

	var rep lifecycle.Report
	took, peakMB := withPeakHeap(func() { rep, err = j.RunOnce(ctx) })
	if err != nil {
		return nil, "", err
	}
	if rep.OrphansDestroyed != orphans || rep.Lost != 0 {
		return nil, "", fmt.Errorf("janitor: destroyed %d orphans (want %d), marked %d lost (want 0)", rep.OrphansDestroyed, orphans, rep.Lost)
	}
	note := fmt.Sprintf("Janitor: one RunOnce over %d ready sim sandboxes and %d orphan files took %s; its memory is O(inventory) (a map of ids), streamed from Postgres in chunks of 5000.", n, orphans, took.Round(time.Millisecond))
	return janitorTargets(n, orphans, took, peakMB), note, nil
}

// seedJanitor seeds n ready sim sandboxes of tenant live, their files in
// simDir, and an orphan file (a sandbox the registry does not know) for
// every hundred of them, at least one; it returns the orphans' number.
func seedJanitor(ctx context.Context, seedPool *pgxpool.Pool, n int, simDir string) (int, error) {
	if err := seedLive(ctx, seedPool, "live", n, simDir); err != nil {
		return 0, err
	}
	orphans := max(n/100, 1)
	for range orphans {
		if err := os.WriteFile(filepath.Join(simDir, domain.NewID()), nil, 0o644); err != nil {
			return 0, err
		}
	}
	return orphans, nil
}

// withPeakHeap runs fn and returns how long it took and the peak of the
// heap in use meanwhile above where it stood before, in MiB, sampled every
// 2 ms.
func withPeakHeap(fn func()) (took time.Duration, peakMB float64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(2 * time.Millisecond)
		defer ticker.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	})
	start := time.Now()
	fn()
	took = time.Since(start)
	close(stop)
	wg.Wait()
	return took, float64(peak-min(peak, before.HeapInuse)) / (1 << 20)
}

// janitorTargets judges one reconciliation of n live sandboxes and the
// orphans it destroyed against its budgets: 30 s and 256 MiB of heap.
func janitorTargets(n, orphans int, took time.Duration, peakMB float64) []target {
	limitSeconds := 30.0
	return []target{
		{Name: fmt.Sprintf("janitor reconcile of %s live sandboxes (+%d orphans destroyed)", count(n), orphans),
			Measured: took.Seconds(), Unit: "s", Baseline: limitSeconds, Against: "s budget",
			Ratio: took.Seconds() / limitSeconds, Want: "<= 1", Pass: took.Seconds() <= limitSeconds},
		{Name: "janitor reconcile: peak extra heap", Measured: peakMB, Unit: "MiB", Baseline: 256, Against: "MiB budget",
			Ratio: peakMB / 256, Want: "<= 1", Pass: peakMB <= 256},
	}
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run bench from inside the Tether repository")
		}
		dir = parent
	}
}

// postgresScript runs `scripts/postgres.sh action bench` and returns the
// URL it prints.
func postgresScript(ctx context.Context, root, action string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "scripts/postgres.sh", action, "bench")
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/postgres.sh %s bench: %w", action, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func recreateDB(ctx context.Context, admin *pgxpool.Pool, serverURL, name string) (string, error) {
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		return "", fmt.Errorf("drop %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+` OWNER `+pgx.Identifier{u.User.Username()}.Sanitize()); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	return withPath(serverURL, name)
}

// withPath returns serverURL pointing at database name.
func withPath(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// tether is the Tether process under test.
type tether struct {
	base   string
	cmd    *exec.Cmd
	done   chan struct{}
	simDir string
	// pprof is the base URL of its PPROF_ADDR, "" without -profile.
	pprof string
}

// startTether builds and starts Tether, with the sim provider unless env
// (its providers' settings, PROVIDERS first) says otherwise.
func startTether(ctx context.Context, root, dbURL string, env []string, o options) (*tether, error) {
	dir, err := os.MkdirTemp("", "tether-bench-")
	if err != nil {
		return nil, err
	}
	// The sim's inventory goes on tmpfs where there is one: "instant" should
	// measure Tether, not the file system's metadata journal.
	simDir := filepath.Join(dir, "sim")
	if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
		if simDir, err = os.MkdirTemp("/dev/shm", "tether-bench-sim-"); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "tether")
	build := exec.CommandContext(ctx, "go", "build", "-tags="+buildTags(), "-trimpath", "-buildvcs=false", "-o", bin, "./cmd/api")
	build.Dir = root
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %w\n%s", err, out)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var pprofAddr string
	if o.profile {
		if pprofAddr, err = freeAddr(ctx); err != nil {
			return nil, err
		}
		env = append(slices.Clone(env), "PPROF_ADDR="+pprofAddr)
	}
	logf, err := os.Create(filepath.Join(dir, "tether.log"))
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PROVIDERS=") }) {
		env = append(env, "PROVIDERS=sim")
	}
	//nolint:noctx // stopped explicitly by stop, gracefully
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env,
		"DATABASE_URL="+dbURL, "LISTEN_ADDR="+addr, "BOOTSTRAP_API_KEY=bench-key",
		"SIM_STATE_DIR="+simDir, "LOG_LEVEL=warn",
		"EXECUTOR_CONCURRENCY="+strconv.Itoa(max(16, o.workers*2)), "DB_MAX_CONNS=40",
		// The benchmark is one tenant and one key at full speed: no quotas.
		"TENANT_MAX_LIVE=100000000", "TENANT_CREATES_PER_MINUTE=100000000", "KEY_REQUESTS_PER_SECOND=100000000",
		"TENANT_REQUESTS_PER_SECOND=100000000")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &tether{base: "http://" + addr, cmd: cmd, done: make(chan struct{}), simDir: simDir}
	if pprofAddr != "" {
		t.pprof = "http://" + pprofAddr
	}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(t.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return t, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.stop()
	return nil, fmt.Errorf("tether did not become ready; see %s", logf.Name())
}

// freeAddr is a loopback address with a port free just now.
func freeAddr(ctx context.Context) (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

func (t *tether) stop() {
	_ = t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	_ = os.RemoveAll(t.simDir)
}

// buildTags returns the build tags the bench was built with, which it
// builds Tether with too: with the kubernetes provider for the kubernetes
// phases (make bench sets TAGS).
func buildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" {
				return s.Value
			}
		}
	}
	return ""
}
