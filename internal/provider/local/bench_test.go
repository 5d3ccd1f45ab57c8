package local

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/test/harness"
)

// BenchmarkExec measures an exec of `true` in one running sandbox, the
// provider's whole Exec (go test -run '^$' -bench Exec), and reports its
// median.
func BenchmarkExec(b *testing.B) {
	p, err := New(harness.ReachableTempDir(b))
	if err != nil || p.problem != "" {
		b.Fatalf("New: %v %s", err, p.problem)
	}
	id := sandbox.NewID()
	if _, err := p.Create(b.Context(), sandbox.CreateSpec{SandboxID: id}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := p.Exec(b.Context(), id, sandbox.ExecRequest{Command: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}
