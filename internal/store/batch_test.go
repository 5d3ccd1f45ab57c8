package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testBatcher returns a batcher whose flush doubles its inputs, records the
// batch sizes, counts the flights in the air, and first waits on gate.
func testBatcher(flights int, gate <-chan struct{}) (*batcher[int, int], *batchLog) {
	log := &batchLog{}
	b := &batcher[int, int]{maxFlights: flights, maxBatch: 1000, flushTimeout: time.Minute}
	b.flush = func(ctx context.Context, in []int) []result[int] {
		if n := log.inAir.Add(1); n > log.maxInAir.Load() {
			log.maxInAir.Store(n)
		}
		defer log.inAir.Add(-1)
		<-gate
		log.mu.Lock()
		log.sizes = append(log.sizes, len(in))
		log.mu.Unlock()
		out := make([]result[int], len(in))
		for i, v := range in {
			out[i].out = 2 * v
			if v < 0 {
				out[i].err = errors.New("negative")
			}
		}
		return out
	}
	return b, log
}

type batchLog struct {
	inAir, maxInAir atomic.Int64
	mu              sync.Mutex
	sizes           []int
}

func (l *batchLog) batches() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sizes...)
}

// TestBatcherGroupsConcurrentCalls checks that calls made while the flights
// are busy leave together, that each caller gets its own result, and that
// no more than maxFlights batches are ever in the air.
func TestBatcherGroupsConcurrentCalls(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b, log := testBatcher(2, gate)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			v := i
			if i%50 == 7 {
				v = -i
			}
			got, err := b.do(t.Context(), v)
			switch {
			case v < 0 && err == nil:
				errs <- errors.New("a failing input succeeded")
			case v >= 0 && (err != nil || got != 2*v):
				errs <- errors.New("a call got another call's result or an error")
			}
		})
	}
	// Both flights are held at the gate until every call has queued.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == n-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n-2)
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sizes := log.batches()
	total, largest := 0, 0
	for _, s := range sizes {
		total += s
		largest = max(largest, s)
	}
	if total != n {
		t.Errorf("batches wrote %d inputs, want %d", total, n)
	}
	if largest != n-2 {
		t.Errorf("largest batch = %d, want the %d queued calls together (batches %v)", largest, n-2, sizes)
	}
	if got := log.maxInAir.Load(); got > 2 {
		t.Errorf("%d flights in the air at once, want at most 2", got)
	}
	if b.flights != 0 || len(b.queue) != 0 {
		t.Errorf("after the calls: %d flights, %d queued, want none", b.flights, len(b.queue))
	}
}

// TestBatcherIdleCallFliesAlone checks that a call on an idle batcher does
// not wait for company.
func TestBatcherIdleCallFliesAlone(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	close(gate)
	b, log := testBatcher(1, gate)
	for i := range 3 {
		if got, err := b.do(t.Context(), i); err != nil || got != 2*i {
			t.Fatalf("do(%d) = %d, %v", i, got, err)
		}
	}
	if sizes := log.batches(); len(sizes) != 3 {
		t.Errorf("batches %v, want three of one", sizes)
	}
}

// TestBatcherCancelledWhileQueued checks that a call whose context ends
// while it waits in the queue returns at once and is never written.
func TestBatcherCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b, log := testBatcher(1, gate)
	first := make(chan error, 1)
	go func() { _, err := b.do(t.Context(), 1); first <- err }()
	for log.inAir.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	queued := make(chan error, 1)
	go func() { _, err := b.do(ctx, 2); queued <- err }()
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: err = %v, want context.Canceled", err)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
	if sizes := log.batches(); len(sizes) != 1 || sizes[0] != 1 {
		t.Errorf("batches %v, want only the first call's", sizes)
	}
}

// TestBatcherPanicReleasesCallers checks that a flush that panics fails the
// other calls of its batch instead of leaving them waiting, hands the panic
// to the call leading it, and frees its flight.
func TestBatcherPanicReleasesCallers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := &batcher[int, int]{maxFlights: 1, maxBatch: 10, flushTimeout: time.Minute}
	b.flush = func(ctx context.Context, in []int) []result[int] {
		if in[0] == 1 {
			<-release // the first flight holds the others in the queue
		}
		if len(in) > 1 {
			panic("boom")
		}
		return make([]result[int], len(in))
	}
	first := make(chan error, 1)
	go func() { _, err := b.do(t.Context(), 1); first <- err }()
	waitQueued := func(n int) {
		for {
			b.mu.Lock()
			q, f := len(b.queue), b.flights
			b.mu.Unlock()
			if q == n && f == 1 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitQueued(0)
	type outcome struct {
		err      error
		panicked bool
	}
	outcomes := make(chan outcome, 2)
	for _, v := range []int{2, 3} {
		go func() {
			o := outcome{}
			defer func() {
				o.panicked = recover() != nil
				outcomes <- o
			}()
			_, o.err = b.do(t.Context(), v)
		}()
		waitQueued(v - 1)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
	var panicked, lost int
	for range 2 {
		o := <-outcomes
		if o.panicked {
			panicked++
		} else if errors.Is(o.err, errFlightLost) {
			lost++
		}
	}
	if panicked != 1 || lost != 1 {
		t.Errorf("the batch of two: %d panicked, %d got errFlightLost; want one each", panicked, lost)
	}
	if _, err := b.do(t.Context(), 4); err != nil {
		t.Errorf("call after the panic: %v", err)
	}
}
