package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/store"
)

// The warm pools' phases (issue 26): time to interactive, from the POST of
// a create to the output of its first command, for a cold local sandbox, a
// local sandbox claimed from a pool and a sim sandbox, one at a time and
// in bursts; each sequential sample of Tether alternates with a bare
// bubblewrap start followed by an nsenter into it, the kernel's cost of the
// same. Then claims per second from sim pools, 16 clients.

// ttiParams are what the pools' phases measure: samples sequential TTIs
// and a burst of burst concurrent creates per kind, claims claims from
// claimPools sim pools of poolMembers members each.
type ttiParams struct {
	samples, burst          int
	claims, claimPools      int
	poolMembers, claimConns int
}

func ttiParamsOf(o options) ttiParams {
	if o.quick {
		return ttiParams{samples: 5, burst: 5, claims: 100, claimPools: 1, poolMembers: 150, claimConns: 4}
	}
	return ttiParams{samples: 100, burst: 100, claims: 4500, claimPools: 5, poolMembers: 1000, claimConns: 16}
}

// poolRefillInterval is the refiller's interval in the Tether of these
// phases: ten times the default, so that a pool drained by a burst fills
// again in seconds (a refill requests at most 32 members per look).
const poolRefillInterval = "100ms"

// measurePools starts a Tether on bench_pools (with the local provider
// beside sim where lb is not nil) and runs the pools' phases against it.
func (r *benchRun) measurePools(ctx context.Context, lb *localBench) error {
	pool, err := pgxpool.New(ctx, r.dbs["bench_pools"])
	if err != nil {
		return err
	}
	_, err = store.New(pool).Migrate(ctx)
	pool.Close()
	if err != nil {
		return err
	}
	env := []string{"PROVIDERS=sim", "POOL_REFILL_INTERVAL=" + poolRefillInterval}
	var tb *localBench
	if lb != nil {
		// A state folder and a bare mirror of their own: the local phases'
		// Tether is gone, its folders may not be. No workspace size limit
		// (a loop device each: a burst of 100 would need 100), 128 MiB and
		// 64 processes each, so that a pool of 100 and the sandboxes of a
		// burst fit in the host share (by default half the host's pids:
		// 64 sandboxes of 256 on a pid_max of 32768). The benchmark is one
		// tenant: its share is the host's (by default half of it).
		tb = &localBench{root: lb.root, state: filepath.Join(lb.root, "state-pools"), bare: filepath.Join(lb.root, "bare-pools"), nsenter: lb.nsenter}
		env = []string{"PROVIDERS=sim,local", "LOCAL_STATE_DIR=" + tb.state, "LOCAL_WORKSPACE_MB=0", "LOCAL_MEMORY_MB=128", "LOCAL_PIDS=64",
			"LOCAL_TENANT_PIDS=" + fmt.Sprint(math.MaxInt32), "LOCAL_TENANT_MEMORY_MB=" + fmt.Sprint(math.MaxInt32),
			"POOL_REFILL_INTERVAL=" + poolRefillInterval}
	}
	r.logf("building and starting a Tether for the warm pools' phases (%s)", strings.Join(env, " "))
	srv, err := startTether(ctx, r.root, r.dbs["bench_pools"], env, r.o)
	if err != nil {
		return err
	}
	defer srv.stop()
	p := ttiParamsOf(r.o)
	pb := &poolBench{a: newAPI(srv.base, "bench-key", p.burst+p.claimConns+4), lb: tb, p: p, logf: r.logf,
		pid: srv.cmd.Process.Pid, pprof: srv.pprof, profDir: filepath.Join(r.o.out, "profiles")}
	defer pb.a.wire.close()
	if pb.pprof != "" {
		_ = os.MkdirAll(pb.profDir, 0o755)
	}
	targets, notes, err := pb.run(ctx)
	if err != nil {
		return err
	}
	r.res.Targets = append(r.res.Targets, targets...)
	r.res.Notes = append(r.res.Notes, notes...)
	return nil
}

// poolBench runs the pools' phases against one Tether.
type poolBench struct {
	a    *api
	lb   *localBench // nil: no local provider here
	bare *bareBwrap
	p    ttiParams
	logf func(string, ...any)
	// pid is the Tether's process; pprof its PPROF_ADDR's base URL ("":
	// no profiles), profiles written to profDir.
	pid     int
	pprof   string
	profDir string
}

// ttiKind is one way of getting a sandbox to run a command: its create
// body, whether it is a claim (201 ready at once) and whether it can exec.
type ttiKind struct {
	name  string
	body  []byte
	claim bool
	exec  bool
	pool  string // the pool a claim names, refilled between samples
}

func (pb *poolBench) run(ctx context.Context) ([]target, []string, error) {
	var targets []target
	var notes []string
	local := pb.lb != nil
	if local {
		if reason, err := pb.a.providerProblem(ctx, "local"); err != nil {
			return nil, nil, err
		} else if reason != "" {
			notes = append(notes, "Warm pools: local phases skipped, Tether reports the provider unavailable: "+reason)
			local = false
		}
	}
	var kinds []ttiKind
	if local {
		kinds = append(kinds,
			ttiKind{name: "local cold", body: []byte(`{"provider":"local"}`), exec: true},
			ttiKind{name: "local from a pool", body: []byte(`{"pool":"tti-local","pool_only":true}`), claim: true, exec: true, pool: "tti-local"})
		if err := pb.makePool(ctx, "tti-local", "local", 4, 4); err != nil {
			return nil, nil, err
		}
	} else {
		notes = append(notes, "Warm pools: no local provider here (see the local phases' note); the sim rows only.")
	}
	kinds = append(kinds,
		ttiKind{name: "sim", body: createBody},
		ttiKind{name: "sim from a pool", body: []byte(`{"pool":"tti-sim","pool_only":true}`), claim: true, pool: "tti-sim"})
	if err := pb.makePool(ctx, "tti-sim", "sim", 4, 4); err != nil {
		return nil, nil, err
	}
	res := map[string]*ttiResult{}
	for _, k := range kinds {
		r, err := pb.measureKind(ctx, k, local)
		if err != nil {
			return nil, nil, err
		}
		res[k.name] = r
		notes = append(notes, r.note(k))
	}
	targets = append(targets, ttiTargets(res, local)...)
	if local {
		// Its last members are real sandboxes: ended through Tether, not
		// left to the Tether's stop (their control groups would stay).
		if err := pb.deletePool(ctx, "tti-local"); err != nil {
			return nil, nil, err
		}
	}
	rates, note, err := pb.claimThroughput(ctx)
	if err != nil {
		return nil, nil, err
	}
	for i, v := range claimVariants {
		t := atLeast(fmt.Sprintf("claims from sim pools, %d clients, %s", pb.p.claimConns, v.name), rates[i], "/s", 1000, "/s (the issue's floor)", 1)
		t.Info = i > 0
		targets = append(targets, t)
	}
	notes = append(notes, note)
	for _, t := range targets {
		pb.logf("%s: %.2f %s against %.2f %s, ratio %.2f (want %s)", t.Name, t.Measured, t.Unit, t.Baseline, t.Against, t.Ratio, t.Want)
	}
	return targets, notes, nil
}

// ttiResult is one kind's samples: sequential, each beside a bare start
// and exec (when local), and one burst, with its failures.
type ttiResult struct {
	seq, bare, burst latencies
	// bareBurst are as many bare nsenters at once into one bare sandbox
	// (claims from a pool), or as many bare starts, each with its nsenter,
	// at once (cold creates).
	bareBurst   latencies
	burstFailed int
	burstTook   time.Duration
	misses      int
	// split is where the burst's time went (claims from a pool); quiet
	// is the same burst with the pool's refill held off until it ended.
	split, quiet *burstSplit
}

// burstSplit is where a burst's time went: each sample's POST (the
// claim's answer) and the rest (the first exec, to its output), and the
// CPU the machine, Tether (its own, and its reaped children's: the execs'
// nsenter and sh, the creates' helpers) and Postgres used meanwhile.
type burstSplit struct {
	post, exec, total         latencies
	wall                      time.Duration
	tetherOwn, tetherChildren time.Duration
	postgres, machine         time.Duration
	profile                   string // Tether's CPU profile's top buckets, if taken
	label                     string // names its profile's file after the kind's
}

func (b *burstSplit) String() string {
	p := func(l latencies, q float64) float64 { return ms(l.percentile(q)) }
	s := fmt.Sprintf("POST → claimed p50 %.1f / p99 %.1f ms, claimed → exec output p50 %.1f / p99 %.1f ms, total p50 %.1f / p99 %.1f ms; "+
		"%s wall, CPU meanwhile: the machine %.2f s of %.2f s, Tether %.2f s itself + %.2f s its children (execs' nsenter and sh, creates' helpers), Postgres %.2f s",
		p(b.post, 50), p(b.post, 99), p(b.exec, 50), p(b.exec, 99), p(b.total, 50), p(b.total, 99),
		b.wall.Round(time.Millisecond), b.machine.Seconds(), 2*b.wall.Seconds(), b.tetherOwn.Seconds(), b.tetherChildren.Seconds(), b.postgres.Seconds())
	if b.profile != "" {
		s += "; Tether's own CPU by component: " + b.profile
	}
	return s
}

// tetherCPU is a process's own CPU time and its reaped children's.
func tetherCPU(pid int) (own, children time.Duration) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return 0, 0
	}
	v := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	return ticks(v(11) + v(12)), ticks(v(13) + v(14))
}

func (r *ttiResult) note(k ttiKind) string {
	p := func(l latencies, q float64) float64 { return ms(l.percentile(q)) }
	what := "POST → first exec's output (`printf ok`)"
	if !k.exec {
		what = "POST → ready (sim runs no commands)"
	}
	s := fmt.Sprintf("TTI, %s, %s: %d sequential p50 %.1f / p95 %.1f / p99 %.1f ms; a burst of %d at once p50 %.1f / p95 %.1f / p99 %.1f ms (%d failed, all released after, %s in all)",
		k.name, what, len(r.seq), p(r.seq, 50), p(r.seq, 95), p(r.seq, 99), len(r.burst)+r.burstFailed,
		p(r.burst, 50), p(r.burst, 95), p(r.burst, 99), r.burstFailed, r.burstTook.Round(time.Millisecond))
	if len(r.bare) > 0 {
		s += fmt.Sprintf("; bare bwrap start + nsenter `printf ok`, alternating with the sequential samples: p50 %.1f / p95 %.1f / p99 %.1f ms",
			p(r.bare, 50), p(r.bare, 95), p(r.bare, 99))
	}
	switch {
	case len(r.bareBurst) == 0:
	case k.claim:
		s += fmt.Sprintf("; %d bare nsenters of `printf ok` at once into one bare sandbox: p50 %.1f / p95 %.1f / p99 %.1f ms",
			len(r.bareBurst), p(r.bareBurst, 50), p(r.bareBurst, 95), p(r.bareBurst, 99))
	default:
		s += fmt.Sprintf("; %d bare bwrap starts at once, each with its nsenter `printf ok`: p50 %.1f / p95 %.1f / p99 %.1f ms",
			len(r.bareBurst), p(r.bareBurst, 50), p(r.bareBurst, 95), p(r.bareBurst, 99))
	}
	if r.misses > 0 {
		s += fmt.Sprintf("; %d claims found the pool empty", r.misses)
	}
	if r.split != nil {
		s += ". The burst's split: " + r.split.String()
	}
	if r.quiet != nil {
		s += ". The same burst with the pool's refill held off until it ended (min_ready 0 meanwhile): " + r.quiet.String()
	}
	return s + "."
}

// ttiTargets judges the results against the targets.
func ttiTargets(res map[string]*ttiResult, local bool) []target {
	p := func(l latencies, q float64) float64 { return ms(l.percentile(q)) }
	var out []target
	if local {
		cold, pooled := res["local cold"], res["local from a pool"]
		bareP50 := p(pooled.bare, 50)
		out = append(out,
			atMost("TTI local from a pool p50 (POST → first exec output)", p(pooled.seq, 50), "ms", bareP50, "ms bare bwrap + nsenter p50", 0.5),
			atMost("TTI local from a pool p99", p(pooled.seq, 99), "ms", bareP50, "ms bare bwrap + nsenter p50", 1.5),
			atMost("TTI local from a pool, burst of 100 claims p99", p(pooled.burst, 99), "ms", p(pooled.seq, 50), "ms sequential p50", 2),
			atMost("TTI local cold p50", p(cold.seq, 50), "ms", p(cold.bare, 50), "ms bare bwrap + nsenter p50", 2),
			atMost("TTI local cold, burst of 100 creates p99", p(cold.burst, 99), "ms", p(cold.seq, 50), "ms sequential p50", 10),
		)
		if len(pooled.bareBurst) > 0 {
			t := atMost(fmt.Sprintf("TTI local from a pool, burst of %d claims p99, against as many bare nsenters at once", len(pooled.burst)),
				p(pooled.burst, 99), "ms", p(pooled.bareBurst, 99), "ms bare burst p99", 2)
			t.Info = true
			out = append(out, t)
		}
		if len(cold.bareBurst) > 0 {
			t := atMost(fmt.Sprintf("TTI local cold, burst of %d creates p99, against as many bare starts + nsenters at once", len(cold.burst)),
				p(cold.burst, 99), "ms", p(cold.bareBurst, 99), "ms bare burst p99", 2)
			t.Info = true
			out = append(out, t)
		}
		if q := pooled.quiet; q != nil {
			t := atMost(fmt.Sprintf("TTI local from a pool, burst of %d claims p99, the refill held off until it ended", len(q.total)),
				p(q.total, 99), "ms", p(pooled.seq, 50), "ms sequential p50", 2)
			t.Info = true
			out = append(out, t)
		}
		if n := len(pooled.burst); n != 100 {
			out[2].Name = fmt.Sprintf("TTI local from a pool, burst of %d claims p99", n)
		}
		if n := len(cold.burst); n != 100 {
			out[4].Name = fmt.Sprintf("TTI local cold, burst of %d creates p99", n)
		}
	}
	sim, simPool := res["sim"], res["sim from a pool"]
	info := []target{
		atMost(fmt.Sprintf("TTI sim from a pool, burst of %d claims p99", len(simPool.burst)), p(simPool.burst, 99), "ms", p(simPool.seq, 50), "ms sequential p50", 2),
		atMost(fmt.Sprintf("TTI sim, burst of %d creates p99 (POST → ready)", len(sim.burst)), p(sim.burst, 99), "ms", p(sim.seq, 50), "ms sequential p50", 10),
	}
	for i := range info {
		info[i].Info = true
	}
	return append(out, info...)
}

// makePool creates a pool and waits until it is full.
func (pb *poolBench) makePool(ctx context.Context, name, provider string, minReady, maxSize int) error {
	body := fmt.Sprintf(`{"name":%q,"provider":%q,"min_ready":%d,"max_size":%d}`, name, provider, minReady, maxSize)
	code, err := pb.a.do(ctx, http.MethodPost, "/v1/pools", []byte(body), nil)
	if err == nil && code != http.StatusCreated {
		err = fmt.Errorf("status %d", code)
	}
	if err != nil {
		return fmt.Errorf("create pool %s: %w", name, err)
	}
	return pb.waitFull(ctx, name)
}

// resizePool sets a pool's min_ready and max_size and waits until it is
// full.
func (pb *poolBench) resizePool(ctx context.Context, name string, size int) error {
	body := fmt.Sprintf(`{"min_ready":%d,"max_size":%d}`, size, size)
	code, err := pb.a.do(ctx, http.MethodPatch, "/v1/pools/"+name, []byte(body), nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d", code)
	}
	if err != nil {
		return fmt.Errorf("resize pool %s: %w", name, err)
	}
	return pb.waitFull(ctx, name)
}

// deletePool deletes a pool and waits until the members it ended are
// released.
func (pb *poolBench) deletePool(ctx context.Context, name string) error {
	var members struct {
		Items []sandboxView `json:"items"`
	}
	if _, err := pb.a.do(ctx, http.MethodGet, "/v1/sandboxes?owner=pool:"+name+"&limit=200", nil, &members); err != nil {
		return fmt.Errorf("pool %s members: %w", name, err)
	}
	code, err := pb.a.do(ctx, http.MethodDelete, "/v1/pools/"+name, nil, nil)
	if err == nil && code != http.StatusAccepted {
		err = fmt.Errorf("status %d", code)
	}
	if err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	for _, sb := range members.Items {
		if err := pb.a.waitReleased(ctx, sb.ID); err != nil {
			return fmt.Errorf("pool %s: %w", name, err)
		}
	}
	return nil
}

// setMinReady sets a pool's min_ready alone.
func (pb *poolBench) setMinReady(ctx context.Context, name string, minReady int) error {
	code, err := pb.a.do(ctx, http.MethodPatch, "/v1/pools/"+name, fmt.Appendf(nil, `{"min_ready":%d}`, minReady), nil)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d", code)
	}
	if err != nil {
		return fmt.Errorf("pool %s min_ready %d: %w", name, minReady, err)
	}
	return nil
}

// waitFull waits until the pool has min_ready members ready.
func (pb *poolBench) waitFull(ctx context.Context, name string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var v struct {
			MinReady int `json:"min_ready"`
			Ready    int `json:"ready"`
		}
		code, err := pb.a.do(ctx, http.MethodGet, "/v1/pools/"+name, nil, &v)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		if err != nil {
			return fmt.Errorf("pool %s: %w", name, err)
		}
		if v.Ready >= v.MinReady {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s: %d of %d ready after 3 minutes", name, v.Ready, v.MinReady)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// measureKind takes a kind's sequential samples (each followed by a bare
// one, with withBare) and its burst.
func (pb *poolBench) measureKind(ctx context.Context, k ttiKind, withBare bool) (*ttiResult, error) {
	r := &ttiResult{}
	pb.logf("TTI %s: %d sequential", k.name, pb.p.samples)
	for range pb.p.samples {
		if err := pb.sample(ctx, k, withBare, r); err != nil {
			return nil, err
		}
	}
	if k.pool != "" {
		if err := pb.resizePool(ctx, k.pool, pb.p.burst); err != nil {
			return nil, err
		}
	}
	pb.logf("TTI %s: a burst of %d at once", k.name, pb.p.burst)
	split := k.claim && k.exec
	if split {
		r.split = &burstSplit{}
	}
	if err := pb.burst(ctx, k, r, r.split); err != nil {
		return nil, err
	}
	if split {
		// The same burst with the refill held off (min_ready 0) until the
		// burst's last exec: what the refill's creates take from the
		// claims. The pool refills to the burst's size first (nothing is
		// shrunk, so no release runs meanwhile either).
		if err := pb.waitFull(ctx, k.pool); err != nil {
			return nil, err
		}
		if err := pb.setMinReady(ctx, k.pool, 0); err != nil {
			return nil, err
		}
		pb.logf("TTI %s: a burst of %d at once, the refill held off", k.name, pb.p.burst)
		q := &ttiResult{}
		r.quiet = &burstSplit{label: " refill held off"}
		if err := pb.burst(ctx, k, q, r.quiet); err != nil {
			return nil, err
		}
		if q.burstFailed > 0 {
			return nil, fmt.Errorf("%s: %d of the burst with the refill held off failed", k.name, q.burstFailed)
		}
	}
	if k.pool != "" {
		if err := pb.resizePool(ctx, k.pool, 4); err != nil {
			return nil, err
		}
	}
	if withBare && pb.bare != nil && k.exec {
		var err error
		if r.bareBurst, err = pb.bareBurstOf(ctx, k); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// bareBurstOf is the bare counterpart of kind k's burst: for claims from
// a pool, as many nsenters at once into one bare sandbox, each running
// `printf ok` (the kernel's part of the burst); for cold creates, as many
// bare sandboxes started at once, each entered once.
func (pb *poolBench) bareBurstOf(ctx context.Context, k ttiKind) (latencies, error) {
	if !k.claim {
		return bareStartBurst(ctx, pb.bare, pb.lb.nsenter, pb.p.burst)
	}
	var out latencies
	_, err := pb.bare.run(func(initPID int) error {
		var err error
		out, err = bareExecBurst(ctx, pb.lb.nsenter, initPID, pb.p.burst)
		return err
	})
	return out, err
}

// sample takes one sequential sample of kind k into r, with the pool (if
// any) full before it, and with withBare a bare start and exec after it,
// once the pool is full again.
func (pb *poolBench) sample(ctx context.Context, k ttiKind, withBare bool, r *ttiResult) error {
	if k.pool != "" {
		if err := pb.waitFull(ctx, k.pool); err != nil {
			return err
		}
	}
	d, _, id, err := pb.tti(ctx, k)
	if errors.Is(err, errPoolEmpty) {
		r.misses++
		return nil
	}
	if err != nil {
		return err
	}
	r.seq = append(r.seq, d)
	if withBare && pb.bare == nil && k.exec {
		// The baseline is a local sandbox's own command line.
		if pb.bare, err = pb.lb.bareFrom(id); err != nil {
			return err
		}
	}
	if err := pb.a.end(ctx, id); err != nil {
		return err
	}
	if !withBare || pb.bare == nil {
		return nil
	}
	if k.pool != "" {
		if err := pb.waitFull(ctx, k.pool); err != nil {
			return err
		}
	}
	if d, err = pb.bare.startAndExec(ctx, pb.lb.nsenter); err != nil {
		return err
	}
	r.bare = append(r.bare, d)
	return nil
}

// bareExecBurst runs n nsenters of `printf ok` at once into the sandbox
// whose init is pid, and returns each one's time from the start of all.
func bareExecBurst(ctx context.Context, nsenter string, pid, n int) (latencies, error) {
	return atOnce(n, func() (time.Time, error) {
		err := bareExecOK(ctx, nsenter, pid, bareUID)
		return time.Now(), err
	})
}

// bareStartBurst starts n bare sandboxes at once, each running `printf
// ok` through nsenter as soon as it is up, and returns the time from the
// burst's start to each output. Every sandbox stays up until the last
// output came, as a burst's sandboxes through Tether do, so that no
// teardown runs during the burst nor counts in it.
func bareStartBurst(ctx context.Context, b *bareBwrap, nsenter string, n int) (latencies, error) {
	var arrived sync.WaitGroup
	arrived.Add(n)
	return atOnce(n, func() (time.Time, error) {
		var at time.Time
		arrive := sync.OnceFunc(func() { at = time.Now(); arrived.Done() })
		_, err := b.run(func(initPID int) error {
			err := bareExecOK(ctx, nsenter, initPID, bareUID)
			arrive()
			arrived.Wait()
			return err
		})
		arrive() // a start that failed before its exec counts too
		return at, err
	})
}

// atOnce runs one n times at once and returns the time from the start of
// all to each one's output (the time one returns), and the first error.
func atOnce(n int, one func() (time.Time, error)) (latencies, error) {
	var (
		mu    sync.Mutex
		out   latencies
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range n {
		wg.Go(func() {
			at, err := one()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			out = append(out, at.Sub(start))
		})
	}
	wg.Wait()
	return out, first
}

var errPoolEmpty = errors.New("pool empty")

// endPatiently ends the sandbox and waits up to three minutes for its
// release: a hundred local sandboxes destroyed at once on a loaded
// two-core machine may take longer than one wait of 30 s.
func (pb *poolBench) endPatiently(ctx context.Context, id string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := pb.a.end(ctx, id)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
	}
}

// tti gets one sandbox of kind k and, if it can, runs `printf ok` in it;
// it returns the time from the POST to the command's output (or to
// ready), and from the POST to its answer.
func (pb *poolBench) tti(ctx context.Context, k ttiKind) (total, post time.Duration, id string, err error) {
	start := time.Now()
	var sb sandboxView
	code, err := pb.a.do(ctx, http.MethodPost, "/v1/sandboxes", k.body, &sb)
	post = time.Since(start)
	switch {
	case err != nil:
		return 0, 0, "", fmt.Errorf("%s create: %w", k.name, err)
	case k.claim && code == http.StatusConflict:
		return 0, 0, "", errPoolEmpty
	case k.claim && (code != http.StatusCreated || sb.State != "ready"):
		return 0, 0, sb.ID, fmt.Errorf("%s claim: status %d, state %s", k.name, code, sb.State)
	case !k.claim && code != http.StatusAccepted:
		return 0, 0, sb.ID, fmt.Errorf("%s create: status %d", k.name, code)
	}
	if !k.claim {
		if err := pb.a.waitReady(ctx, sb.ID); err != nil {
			return 0, 0, sb.ID, fmt.Errorf("%s: %w", k.name, err)
		}
	}
	if k.exec {
		if err := pb.a.execPrintf(ctx, sb.ID); err != nil {
			return 0, 0, sb.ID, fmt.Errorf("%s: %w", k.name, err)
		}
	}
	return time.Since(start), post, sb.ID, nil
}

// burst runs pb.p.burst TTIs of kind k at once, then ends every sandbox
// they got and waits until each is released; failures are counted. With
// split, it also records where the burst's time went (and a CPU profile
// of Tether during it, with pprof).
func (pb *poolBench) burst(ctx context.Context, k ttiKind, r *ttiResult, split *burstSplit) error {
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	profile := make(chan []byte, 1)
	if split != nil && pb.pprof != "" {
		// A second from the burst's start: the claims and most execs.
		go func() { profile <- fetchProfile(ctx, pb.pprof, time.Second) }()
	} else {
		profile <- nil
	}
	before := sampleCPU(pb.pid)
	own0, children0 := tetherCPU(pb.pid)
	start := time.Now()
	for range pb.p.burst {
		wg.Go(func() {
			d, post, id, err := pb.tti(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil {
				r.burstFailed++
				pb.logf("TTI %s burst: %v", k.name, err)
				return
			}
			r.burst = append(r.burst, d)
			if split != nil {
				split.post, split.exec, split.total = append(split.post, post), append(split.exec, d-post), append(split.total, d)
			}
		})
	}
	wg.Wait()
	if split != nil {
		after := sampleCPU(pb.pid)
		own1, children1 := tetherCPU(pb.pid)
		split.wall = time.Since(start)
		split.tetherOwn, split.tetherChildren = own1-own0, children1-children0
		split.postgres, split.machine = after.postgres-before.postgres, after.busy-before.busy
		if raw := <-profile; len(raw) > 0 {
			file := filepath.Join(pb.profDir, slug("pools-burst-"+k.name+split.label)+".pprof")
			if err := os.WriteFile(file, raw, 0o644); err == nil {
				if buckets, _, err := bucketProfile(ctx, file); err == nil {
					split.profile = joinShares(buckets, 8) + " (" + file + ")"
				}
			}
		}
	}
	var endFailed atomic.Int64
	for _, id := range ids {
		wg.Go(func() {
			if err := pb.endPatiently(ctx, id); err != nil {
				endFailed.Add(1)
				pb.logf("TTI %s burst: %v", k.name, err)
			}
		})
	}
	wg.Wait()
	r.burstTook = time.Since(start)
	if n := endFailed.Load(); n > 0 {
		return fmt.Errorf("%s burst: %d of %d sandboxes not released", k.name, n, len(ids))
	}
	return nil
}

// startAndExec starts a bare sandbox, enters it with nsenter as the
// provider's commands do, runs `printf ok` there and reads its output: the
// kernel's part of a TTI. The sandbox is then killed, untimed.
func (b *bareBwrap) startAndExec(ctx context.Context, nsenter string) (time.Duration, error) {
	return b.run(func(initPID int) error { return bareExecOK(ctx, nsenter, initPID, bareUID) })
}

// bareExecOK runs `printf ok` through nsenter into the sandbox whose init
// is pid, with the provider's nsenter options, and checks its output.
func bareExecOK(ctx context.Context, nsenter string, pid, uid int) error {
	id := strconv.Itoa(uid)
	cmd := exec.CommandContext(ctx, nsenter, "--target", strconv.Itoa(pid), "--user", "--pid", "--mount", "--ipc", "--uts", "--net", "--cgroup",
		"--root", "-w", "--setuid", id, "--setgid", id, "--", "printf", "ok")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil && string(out) != "ok" {
		err = fmt.Errorf("output %q", out)
	}
	if err != nil {
		return fmt.Errorf("bare nsenter printf ok: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// claimVariant is one kind of claim in the throughput phase: the body
// of the i-th claim from the pool named.
type claimVariant struct {
	name string
	body func(pool string, i int64) []byte
}

var claimVariants = []claimVariant{
	{"no owner", func(pool string, _ int64) []byte { return fmt.Appendf(nil, `{"pool":%q,"pool_only":true}`, pool) }},
	{"an owner each", func(pool string, i int64) []byte {
		return fmt.Appendf(nil, `{"pool":%q,"pool_only":true,"owner":"agent-%d"}`, pool, i)
	}},
	{"one owner for all", func(pool string, _ int64) []byte {
		return fmt.Appendf(nil, `{"pool":%q,"pool_only":true,"owner":"bench-claimer"}`, pool)
	}},
}

// claimThroughput fills claimPools sim pools, then, for each claim
// variant, has claimConns clients claim from them (pool_only, round
// robin) until claims have succeeded, the pools full again between
// variants; it returns each variant's claims per second.
func (pb *poolBench) claimThroughput(ctx context.Context) ([]float64, string, error) {
	p := pb.p
	pb.logf("claims: filling %d sim pools of %d", p.claimPools, p.poolMembers)
	fillStart := time.Now()
	names := make([]string, p.claimPools)
	for i := range p.claimPools {
		names[i] = fmt.Sprintf("claims-%d", i)
		body := fmt.Sprintf(`{"name":%q,"provider":"sim","min_ready":%d,"max_size":%d}`, names[i], p.poolMembers, p.poolMembers)
		code, err := pb.a.do(ctx, http.MethodPost, "/v1/pools", []byte(body), nil)
		if err == nil && code != http.StatusCreated {
			err = fmt.Errorf("status %d", code)
		}
		if err != nil {
			return nil, "", fmt.Errorf("create pool %s: %w", names[i], err)
		}
	}
	var parts []string
	var rates []float64
	for vi, v := range claimVariants {
		for _, name := range names {
			if err := pb.waitFull(ctx, name); err != nil {
				return nil, "", err
			}
		}
		if vi == 0 {
			parts = append(parts, fmt.Sprintf("%d sim pools of %d members (filled in %s)", p.claimPools, p.poolMembers, time.Since(fillStart).Round(100*time.Millisecond)))
		}
		n := int64(p.claims / len(claimVariants))
		pb.logf("claims, %s: %d clients claim %d", v.name, p.claimConns, n)
		h, e, f, d := pb.claimRun(ctx, names, v, n)
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		rates = append(rates, float64(h)/d.Seconds())
		parts = append(parts, fmt.Sprintf("%s: %d claims in %s, %.0f/s (%d found their pool empty, %d failed)",
			v.name, h, d.Round(time.Millisecond), float64(h)/d.Seconds(), e, f))
	}
	note := fmt.Sprintf("Claims (201), %d clients, the pools refilling meanwhile (POOL_REFILL_INTERVAL=%s), from %s. "+
		"The target is the claim alone (no owner: one statement); a claim for an owner is a transaction that also takes the owner's row to check its lease, "+
		"so claims for one owner serialize on it, as creates for one owner do.",
		p.claimConns, poolRefillInterval, strings.Join(parts, "; "))
	return rates, note, nil
}

// claimRun has the clients claim until n claims succeeded; it returns
// the claims, the claims that found their pool empty, the failures and
// how long it took.
func (pb *poolBench) claimRun(ctx context.Context, pools []string, v claimVariant, n int64) (hits, empty, failed int64, took time.Duration) {
	var next, h, e, f atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range pb.p.claimConns {
		wg.Go(func() {
			for h.Load() < n && ctx.Err() == nil {
				i := next.Add(1)
				code, err := pb.a.do(ctx, http.MethodPost, "/v1/sandboxes", v.body(pools[int(i)%len(pools)], i), nil)
				switch {
				case err != nil || (code != http.StatusCreated && code != http.StatusConflict):
					f.Add(1)
				case code == http.StatusConflict:
					e.Add(1)
				default:
					h.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return h.Load(), e.Load(), f.Load(), time.Since(start)
}
