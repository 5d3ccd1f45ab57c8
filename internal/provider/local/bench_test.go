package local

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
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
	id := provider.NewSandboxID()
	if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := p.Exec(b.Context(), id, provider.ExecRequest{Command: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkStartProcess measures a background start of `true` in one
// running sandbox (StartProcess answers once it runs), to set beside
// BenchmarkExec's foreground round trip, and reports its median and the
// median of the start plus an attach until its end.
func BenchmarkStartProcess(b *testing.B) {
	p, err := New(harness.ReachableTempDir(b))
	if err != nil || p.problem != "" {
		b.Fatalf("New: %v %s", err, p.problem)
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
	var started, ended []time.Duration
	for b.Loop() {
		start := time.Now()
		info, err := p.StartProcess(b.Context(), id, provider.ProcessSpec{Argv: []string{"true"}})
		if err != nil {
			b.Fatalf("StartProcess: %v", err)
		}
		started = append(started, time.Since(start))
		err = p.AttachProcess(b.Context(), id, provider.ProcessSelector{PID: info.PID}, provider.AttachStart, func(provider.ProcessEvent) error { return nil })
		if err != nil {
			b.Fatalf("AttachProcess: %v", err)
		}
		ended = append(ended, time.Since(start))
	}
	for name, took := range map[string][]time.Duration{"start-p50-ms": started, "end-p50-ms": ended} {
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, name)
	}
}

// BenchmarkPTYEcho measures a keystroke's echo through a terminal: a
// byte written to the terminal of cat (raw, without the terminal's own
// echo) until cat's copy comes back on an attach that runs throughout,
// and reports the median and the 99th percentile.
func BenchmarkPTYEcho(b *testing.B) {
	p, err := New(harness.ReachableTempDir(b))
	if err != nil || p.problem != "" {
		b.Fatalf("New: %v %s", err, p.problem)
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Destroy(context.Background(), id) })
	info, err := p.StartProcess(b.Context(), id, provider.ProcessSpec{Argv: []string{"sh", "-c", "stty raw -echo && exec cat"}, PTY: &provider.PTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		b.Fatal(err)
	}
	sel := provider.ProcessSelector{PID: info.PID}
	echoed := make(chan struct{}, 1024)
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go func() {
		_ = p.AttachProcess(ctx, id, sel, provider.AttachNow, func(e provider.ProcessEvent) error {
			for range e.Data {
				echoed <- struct{}{}
			}
			return nil
		})
	}()
	time.Sleep(200 * time.Millisecond) // the attach is under way
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := p.WriteStdin(b.Context(), id, sel, []byte("x")); err != nil {
			b.Fatal(err)
		}
		<-echoed
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}
