package lifecycle_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/store"
)

// worker is what every background worker of the package offers.
type worker interface {
	Stop(ctx context.Context)
	Started() <-chan struct{}
	Stopped() <-chan struct{}
}

// workers are one of each background worker, not started, and how to
// start each.
func (e *env) workers() map[string]struct {
	w     worker
	start func(context.Context) error
} {
	ex := lifecycle.NewExecutor(lifecycle.ExecutorConfig{PollInterval: 50 * time.Millisecond}, e.st, e.notifier,
		[]domain.Provider{e.sim}, e.log, lifecycle.NewMetrics(nil))
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Holder: "a", Interval: time.Second}, e.st, []domain.Provider{e.sim}, e.log, nil)
	h := lifecycle.NewHeartbeat(e.st, store.Node{ID: "node-a", URL: "http://127.0.0.1:1", Providers: []string{"sim"}},
		nil, nil, time.Minute, e.log)
	wh := lifecycle.NewWebhooks(lifecycle.WebhookConfig{}, e.st, e.notifier, e.log, nil)
	r := lifecycle.NewRefiller(lifecycle.RefillerConfig{}, e.st, e.log, nil)
	noErr := func(start func(context.Context)) func(context.Context) error {
		return func(ctx context.Context) error { start(ctx); return nil }
	}
	return map[string]struct {
		w     worker
		start func(context.Context) error
	}{
		"executor":  {ex, noErr(ex.Start)},
		"janitor":   {j, noErr(j.Start)},
		"heartbeat": {h, h.Start},
		"webhooks":  {wh, noErr(wh.Start)},
		"refiller":  {r, noErr(r.Start)},
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestStopBeforeStart: a worker that was made but never started (a start
// that failed half-way) stops at once, whatever its context, and a Start
// after that runs nothing (TestMain checks that no goroutine is left).
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, c := range e.workers() {
		start := time.Now()
		c.w.Stop(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: Stop before Start took %s", name, took)
		}
		if !isClosed(c.w.Stopped()) {
			t.Errorf("%s: not stopped after Stop", name)
		}
		if err := c.start(e.ctx); err != nil {
			t.Errorf("%s: Start after Stop: %v", name, err)
		}
		if isClosed(c.w.Started()) {
			t.Errorf("%s: Start after Stop started it", name)
		}
		c.w.Stop(context.Background())
	}
}

// TestWorkersStartOnceStopTwice: every worker starts once (a second Start
// changes nothing), stops when asked, and stops again at once.
func TestWorkersStartOnceStopTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, c := range e.workers() {
		if err := c.start(e.ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.start(e.ctx); err != nil {
			t.Errorf("%s: second Start: %v", name, err)
		}
		if !isClosed(c.w.Started()) || isClosed(c.w.Stopped()) {
			t.Errorf("%s: after Start: started %v, stopped %v", name, isClosed(c.w.Started()), isClosed(c.w.Stopped()))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.w.Stop(ctx)
		cancel()
		if !isClosed(c.w.Stopped()) {
			t.Errorf("%s: Stop returned before its work ended", name)
		}
		start := time.Now()
		c.w.Stop(context.Background())
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: a second Stop took %s", name, took)
		}
	}
}

// stuckPools is a refiller's store whose ListPools hangs, whatever its
// context, until released: a call stuck on a dead connection.
type stuckPools struct {
	entered, release chan struct{}
	once             sync.Once
}

func (s *stuckPools) Now() time.Time { return time.Now() }

func (s *stuckPools) ListPools(context.Context, string) ([]domain.Pool, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return nil, nil
}

func (s *stuckPools) RefillPool(context.Context, string, string, store.RefillLimits) (store.Refill, error) {
	return store.Refill{}, nil
}

// TestRefillerStopHonoursItsContext: the refiller's Stop returns when its
// context ends, even while a refill is stuck (it used to wait for the
// refill, past any shutdown deadline); the stuck refill ends by itself.
func TestRefillerStopHonoursItsContext(t *testing.T) {
	t.Parallel()
	st := &stuckPools{entered: make(chan struct{}), release: make(chan struct{})}
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(st.release) }) })
	r := lifecycle.NewRefiller(lifecycle.RefillerConfig{}, st, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	r.Start(t.Context())
	<-st.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.Stop(ctx)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		release.Do(func() { close(st.release) })
		<-returned
		t.Fatal("Stop waited for a stuck refill past its context")
	}
	release.Do(func() { close(st.release) })
	r.Stop(context.Background()) // the refill ends now: Stop waits for it
}

// TestJanitorStopResigns: Stop gives the leadership up within its
// context, so another replica leads at once; a heartbeat's Stop returns.
func TestJanitorStopResigns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Holder: "a", Interval: time.Second}, e.st, []domain.Provider{e.sim}, e.log, nil)
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
