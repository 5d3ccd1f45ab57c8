package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tetherhq/tether/internal/domain"
)

// batcher groups concurrent calls of the same write into one statement and
// one commit, the way a database groups commits: a call that finds fewer
// than maxFlights writes in flight runs its own at once, alone, so an idle
// system pays no waiting; a call that finds them all busy queues, and when a
// flight lands the whole queue leaves together as the next one. Under load
// that turns a round trip and a WAL flush per call into one per batch,
// without a timer and without a goroutine of its own: the flight runs on
// the goroutine of the first call in it.
type batcher[In, Out any] struct {
	maxFlights int
	maxBatch   int
	// flushTimeout bounds one flight. A flight of many callers runs under
	// none of their contexts.
	flushTimeout time.Duration
	// flush runs one batch and returns one result per input, in order.
	flush func(ctx context.Context, in []In) []result[Out]

	mu      sync.Mutex
	flights int
	queue   []*call[In, Out]

	// shared counts the calls that flew with company, for tests.
	shared atomic.Int64
}

type result[Out any] struct {
	out Out
	err error
}

type call[In, Out any] struct {
	in  In
	res result[Out]
	// lead receives the batch this call must fly; done is closed when the
	// call's result is in.
	lead chan []*call[In, Out]
	done chan struct{}
}

// do runs in as part of some batch and returns its result. A call whose
// context ends while it is still queued is taken out and never written; once
// its batch has left, it waits for the result.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (Out, error) {
	c := &call[In, Out]{in: in, lead: make(chan []*call[In, Out], 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.flights < b.maxFlights {
		b.flights++
		b.mu.Unlock()
		b.fly(ctx, []*call[In, Out]{c})
		return c.res.out, c.res.err
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	cancelled := ctx.Done()
	for {
		select {
		case batch := <-c.lead:
			b.fly(ctx, batch)
			return c.res.out, c.res.err
		case <-c.done:
			return c.res.out, c.res.err
		case <-cancelled:
			if b.unqueue(c) {
				var zero Out
				return zero, ctx.Err()
			}
			cancelled = nil // it left with a batch, perhaps leading it: wait
		}
	}
}

// unqueue takes c out of the queue, and reports whether it was still there.
func (b *batcher[In, Out]) unqueue(c *call[In, Out]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// fly writes a batch, hands each call its result, and then passes the flight
// to the queue: its first call leads the next batch, or the flight ends.
func (b *batcher[In, Out]) fly(ctx context.Context, batch []*call[In, Out]) {
	delivered := false
	defer func() {
		if !delivered { // flush panicked: the callers must not wait forever
			for _, c := range batch {
				c.res.err = errFlightLost
				close(c.done)
			}
		}
		b.land()
	}()
	// A flight of one serves its caller alone and keeps the caller's
	// context; a flight of many runs under none of theirs.
	if len(batch) > 1 {
		ctx = context.WithoutCancel(ctx)
		b.shared.Add(int64(len(batch)))
	}
	ctx, cancel := context.WithTimeout(ctx, b.flushTimeout)
	defer cancel()
	in := make([]In, len(batch))
	for i, c := range batch {
		in[i] = c.in
	}
	results := b.flush(ctx, in)
	if len(results) != len(batch) {
		panic(fmt.Sprintf("store: batch of %d writes got %d results", len(batch), len(results)))
	}
	for i, c := range batch {
		c.res = results[i]
		close(c.done)
	}
	delivered = true
}

var errFlightLost = errors.New("batched write did not complete")

// land ends a flight: the queue, if any, leaves as the next one, led by its
// first call.
func (b *batcher[In, Out]) land() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.flights--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), b.maxBatch)
	next := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()
	next[0].lead <- next
}

// newBatcher returns a batcher of at most flights statements in flight at
// once that writes through w.
func newBatcher[In, Out any](flights int, w batchWrite[In, Out]) *batcher[In, Out] {
	return &batcher[In, Out]{maxFlights: flights, maxBatch: maxBatch, flushTimeout: 30 * time.Second, flush: w.flush}
}

// maxBatch bounds the rows of one batched statement.
const maxBatch = 256

// batchWrite is the flush of a batcher over rows with a key (a sandbox's
// id, and for client requests its tenant too). A single row goes through
// one, its own statement; more go through many, which returns what it wrote
// by key, and a key it did not write gets missing's error. A row whose key
// repeats one earlier in the batch goes through one after it, so that it
// sees the first one's effect as it would have without batching. When
// Postgres refuses many's statement — one row may be at fault, or it lost a
// deadlock — each row is written alone, so that only a faulty one fails.
type batchWrite[In, Out any] struct {
	key     func(In) string
	one     func(ctx context.Context, in In) (Out, error)
	many    func(ctx context.Context, in []In) (map[string]Out, error)
	missing func(In) error
}

func (w batchWrite[In, Out]) flush(ctx context.Context, in []In) []result[Out] {
	out := make([]result[Out], len(in))
	if len(in) == 1 {
		out[0].out, out[0].err = w.one(ctx, in[0])
		return out
	}
	seen := make(map[string]bool, len(in))
	repeat := make([]bool, len(in))
	var unique []In
	for i, v := range in {
		if k := w.key(v); seen[k] {
			repeat[i] = true
		} else {
			seen[k] = true
			unique = append(unique, v)
		}
	}
	got, err := w.many(ctx, unique)
	if err != nil {
		// Only an error Postgres reported rolled the statement back; any
		// other (the connection, or reading rows after the commit) leaves
		// it unknown whether the rows were written: writing them again
		// could do twice what was done once.
		var pgErr *pgconn.PgError
		retry := errors.As(err, &pgErr) && !errors.Is(interpret(err), domain.ErrUnavailable)
		for i, v := range in {
			if retry {
				out[i].out, out[i].err = w.one(ctx, v)
			} else {
				out[i].err = err
			}
		}
		return out
	}
	for i, v := range in {
		if o, ok := got[w.key(v)]; !repeat[i] && ok {
			out[i].out = o
		} else if !repeat[i] {
			out[i].err = w.missing(v)
		}
	}
	for i, v := range in {
		if repeat[i] {
			out[i].out, out[i].err = w.one(ctx, v)
		}
	}
	return out
}
