package lifecycle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// untilCancelled is a setup whose run waits for its context, counting the
// setups and the runs that ended.
type untilCancelled struct {
	setups, ended atomic.Int32
}

func (u *untilCancelled) setup(ctx context.Context) (func(), error) {
	u.setups.Add(1)
	return func() {
		<-ctx.Done()
		u.ended.Add(1)
	}, nil
}

// TestLifetimeStartStop: Start runs the work until Stop cancels it; Stop
// returns once it ended; a second Start does nothing, a second Stop
// returns at once, and a Start after Stop does not run again.
func TestLifetimeStartStop(t *testing.T) {
	t.Parallel()
	var l lifetime
	var u untilCancelled
	if closed(l.Started()) || closed(l.Stopped()) {
		t.Fatal("a new lifetime is started or stopped")
	}
	if err := l.start(t.Context(), u.setup); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Started()) || closed(l.Stopped()) {
		t.Fatalf("after Start: started %v, stopped %v; want started only", closed(l.Started()), closed(l.Stopped()))
	}
	if err := l.start(t.Context(), u.setup); err != nil || u.setups.Load() != 1 {
		t.Fatalf("a second Start = %v with %d setups; want a no-op", err, u.setups.Load())
	}
	l.Stop(context.Background())
	if !closed(l.Stopped()) || u.ended.Load() != 1 {
		t.Fatalf("after Stop: stopped %v, runs ended %d; want the run ended", closed(l.Stopped()), u.ended.Load())
	}
	l.Stop(context.Background()) // a second Stop returns at once
	if err := l.start(t.Context(), u.setup); err != nil || u.setups.Load() != 1 {
		t.Fatalf("Start after Stop = %v with %d setups; want a no-op", err, u.setups.Load())
	}
}

// TestLifetimeStopBeforeStart: a Stop before any Start returns at once
// and keeps the worker from ever running.
func TestLifetimeStopBeforeStart(t *testing.T) {
	t.Parallel()
	var l lifetime
	var u untilCancelled
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Were Stop to wait for a start that never comes, only its context
	// would end it: a context that never ends hangs the test instead.
	l.Stop(ctx)
	if !closed(l.Stopped()) {
		t.Error("Stop before Start: Stopped is open")
	}
	if err := l.start(t.Context(), u.setup); err != nil || u.setups.Load() != 0 || closed(l.Started()) {
		t.Errorf("Start after an early Stop = %v, %d setups, started %v; want nothing run", err, u.setups.Load(), closed(l.Started()))
	}
}

// TestLifetimeStopContextEnds: Stop returns when its context ends before
// the work does; the work, its context cancelled, ends by itself later,
// and Stopped says when.
func TestLifetimeStopContextEnds(t *testing.T) {
	t.Parallel()
	var l lifetime
	release := make(chan struct{})
	var cancelled atomic.Bool
	if err := l.start(t.Context(), func(ctx context.Context) (func(), error) {
		return func() {
			<-release // work that does not heed its context at once
			cancelled.Store(ctx.Err() != nil)
		}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Stop(ctx)
	if closed(l.Stopped()) {
		t.Fatal("Stop waited for the work past its context")
	}
	close(release)
	<-l.Stopped()
	if !cancelled.Load() {
		t.Error("the work's context was not cancelled by Stop")
	}
}

// TestLifetimeSetupFails: a setup that fails is Start's error; the worker
// then never runs, and Stop returns at once.
func TestLifetimeSetupFails(t *testing.T) {
	t.Parallel()
	var l lifetime
	var u untilCancelled
	boom := errors.New("boom")
	if err := l.start(t.Context(), func(context.Context) (func(), error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("start = %v, want the setup's error", err)
	}
	if closed(l.Started()) || !closed(l.Stopped()) {
		t.Errorf("after a failed setup: started %v, stopped %v; want stopped only", closed(l.Started()), closed(l.Stopped()))
	}
	if err := l.start(t.Context(), u.setup); err != nil || u.setups.Load() != 0 {
		t.Errorf("Start after a failed one = %v with %d setups; want a no-op", err, u.setups.Load())
	}
	l.Stop(context.Background())
}

// TestLifetimeConcurrentStartStop: Starts and Stops racing each other run
// the work at most once, and once every Stop returned it has ended.
func TestLifetimeConcurrentStartStop(t *testing.T) {
	t.Parallel()
	for range 50 {
		var l lifetime
		var u untilCancelled
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { _ = l.start(t.Context(), u.setup) })
			wg.Go(func() { l.Stop(context.Background()) })
		}
		wg.Wait()
		l.Stop(context.Background())
		if n, ended := u.setups.Load(), u.ended.Load(); n > 1 || ended != n {
			t.Fatalf("%d setups, %d runs ended; want at most one, ended", n, ended)
		}
	}
}
