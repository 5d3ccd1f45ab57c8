package microvm_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/provider/microvm/microvmtest"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// median of the durations, in milliseconds.
func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// execs times n execs of `true` in the sandbox.
func execs(b *testing.B, e provider.Execer, id string, n int) []time.Duration {
	b.Helper()
	took := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		res, err := e.Exec(b.Context(), id, provider.ExecRequest{Command: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
		took = append(took, time.Since(start))
	}
	return took
}

// BenchmarkExecVsLocal measures an exec of `true` in a running microvm
// sandbox and in a running local one, alternating, in one run (go test
// -run '^$' -bench ExecVsLocal ./internal/provider/microvm), and reports
// both medians and their ratio (the target: ≤ 2).
func BenchmarkExecVsLocal(b *testing.B) {
	vm := microvmtest.New(b, b.TempDir())
	lp, err := local.New(harness.ReachableTempDir(b))
	if err != nil {
		b.Fatal(err)
	}
	if info := lp.Info(b.Context()); !info.Available {
		b.Fatalf("local unavailable: %s", info.Reason)
	}
	ids := map[provider.Provider]string{}
	for _, p := range []provider.Provider{vm, lp} {
		id := provider.NewSandboxID()
		if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
		ids[p] = id
	}
	var onVM, onLocal []time.Duration
	for b.Loop() {
		onVM = append(onVM, execs(b, vm, ids[vm], 10)...)
		onLocal = append(onLocal, execs(b, lp, ids[lp], 10)...)
	}
	v, l := median(onVM), median(onLocal)
	b.ReportMetric(v, "microvm-p50-ms")
	b.ReportMetric(l, "local-p50-ms")
	b.ReportMetric(v/l, "ratio")
}

// BenchmarkFork measures what a fork costs: a memory snapshot of a
// running sandbox (how long the original is stopped, at most: the call's
// time) and a create from it until its first exec answers, against a cold
// create until its first exec answers, in one run.
func BenchmarkFork(b *testing.B) {
	p := microvmtest.New(b, b.TempDir())
	ready := func(from string) time.Duration {
		id := provider.NewSandboxID()
		start := time.Now()
		if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id, FromSnapshot: from}); err != nil {
			b.Fatal(err)
		}
		execs(b, p, id, 1)
		took := time.Since(start)
		b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
		return took
	}
	var cold, snap, fork []time.Duration
	for b.Loop() {
		cold = append(cold, ready(""))
		id := provider.NewSandboxID()
		if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
			b.Fatal(err)
		}
		sid := provider.NewSnapshotID()
		start := time.Now()
		if _, err := p.SnapshotMemory(b.Context(), id, sid); err != nil {
			b.Fatal(err)
		}
		snap = append(snap, time.Since(start))
		fork = append(fork, ready(sid))
		_ = p.Destroy(b.Context(), id)
	}
	b.ReportMetric(median(cold), "cold-to-interactive-ms")
	b.ReportMetric(median(snap), "snapshot-ms")
	b.ReportMetric(median(fork), "fork-to-interactive-ms")
	b.ReportMetric(median(fork)/median(cold), "fork/cold")
}
