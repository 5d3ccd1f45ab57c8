package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/internal/store"
)

// TestStopBeforeStart: a component that was made but never started (a
// start that failed half-way) stops at once, whatever its context.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{}, e.st, e.notifier, []sandbox.Provider{e.sim}, e.log, lifecycle.NewMetrics(nil))
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{}, e.st, []sandbox.Provider{e.sim}, e.log, nil)
	h := lifecycle.NewHeartbeat(e.st, store.Node{ID: "node-a"}, nil, nil, time.Minute, e.log)
	for name, stop := range map[string]func(context.Context){"executor": ex.Stop, "janitor": j.Stop, "heartbeat": h.Stop} {
		start := time.Now()
		stop(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: Stop before Start took %s", name, took)
		}
	}
}

// TestJanitorStopResigns: Stop gives the leadership up within its
// context, so another replica leads at once; a heartbeat's Stop returns.
func TestJanitorStopResigns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Holder: "a", Interval: time.Second}, e.st, []sandbox.Provider{e.sim}, e.log, nil)
	j.Start(e.ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := e.st.TryLead(e.ctx, "janitor", "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break // a leads
		}
		// b took it before a's first run: give it back and look again.
		if err := e.st.Resign(e.ctx, "janitor", "b"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the janitor never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	j.Stop(ctx)
	if ok, err := e.st.TryLead(e.ctx, "janitor", "b", time.Minute); err != nil || !ok {
		t.Fatalf("after Stop, another holder leads = %v, %v; want the leadership free", ok, err)
	}

	h := lifecycle.NewHeartbeat(e.st, store.Node{ID: "node-a", URL: "http://127.0.0.1:1", Providers: []string{"sim"}}, nil, nil, 600*time.Millisecond, e.log)
	if err := h.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	h.Stop(ctx)
	h.Stop(ctx) // a second Stop is harmless
}
