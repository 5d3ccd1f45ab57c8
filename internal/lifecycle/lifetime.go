package lifecycle

import (
	"context"
	"sync"
)

// lifetime is what every background worker of the package embeds for its
// Start and Stop, so that all of them live the same way:
//
//   - A worker starts once. A Start after the first, or after a Stop, does
//     nothing: a worker is not restarted, and a Stop that came first (a
//     start that failed half-way, then shutdown) keeps it from ever
//     running.
//   - Stop(ctx) cancels the context the worker's work runs under and waits
//     until the work has ended or ctx is done, whichever comes first. When
//     ctx ends first, Stop returns and the work goes on ending by itself,
//     its context cancelled; Stopped tells when.
//   - Stop of a worker never started returns at once; so does a Stop
//     after the work ended. Stop may be called any number of times, and
//     concurrently with Start.
//   - Started and Stopped are closed when the worker started and when its
//     work ended, for tests (and for a Stop that does more).
//
// It carries the lifetime only: a worker's own shutdown (the executor's
// soft stop, the janitor's resignation) wraps Stop. The zero lifetime is
// ready to use.
type lifetime struct {
	mu     sync.Mutex
	begun  bool // a Start or a Stop came: no Start may run after it
	cancel context.CancelFunc
	// started is closed once the worker's setup succeeded; stopped once
	// its run returned (or its setup failed, or a Stop came first).
	started, stopped chan struct{}
}

// chans makes the channels; l.mu is held.
func (l *lifetime) chans() {
	if l.started == nil {
		l.started, l.stopped = make(chan struct{}), make(chan struct{})
	}
}

// start starts the worker, once: setup runs at once, under the worker's
// context (a child of ctx that Stop cancels), and the run it returns then
// runs in a goroutine that the lifetime owns, until it returns. A setup
// that fails ends the worker for good, and start returns its error. A
// worker that started or stopped before does not run again, and start
// returns nil.
func (l *lifetime) start(ctx context.Context, setup func(ctx context.Context) (run func(), err error)) error {
	l.mu.Lock()
	if l.begun {
		l.mu.Unlock()
		return nil
	}
	l.begun = true
	l.chans()
	ctx, l.cancel = context.WithCancel(ctx)
	l.mu.Unlock()

	run, err := setup(ctx)
	if err != nil {
		l.cancel()
		close(l.stopped)
		return err
	}
	close(l.started)
	go func() {
		defer close(l.stopped)
		defer l.cancel()
		run()
	}()
	return nil
}

// Stop cancels the worker's work and waits until it has ended or ctx is
// done (see lifetime). A worker never started will not start any more.
func (l *lifetime) Stop(ctx context.Context) {
	l.mu.Lock()
	l.chans()
	switch {
	case !l.begun:
		l.begun = true
		close(l.stopped)
	case l.cancel != nil: // else a Stop came first: it is stopped
		l.cancel()
	}
	stopped := l.stopped
	l.mu.Unlock()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
}

// Started is closed when the worker has started: its setup succeeded and
// its run began. It stays open for a worker that never ran.
func (l *lifetime) Started() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chans()
	return l.started
}

// Stopped is closed when the worker's work has ended, its setup failed,
// or a Stop came before any Start.
func (l *lifetime) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chans()
	return l.stopped
}
