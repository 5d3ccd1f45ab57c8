package egresspolicy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/egressproxy"
)

// ActivityWriter appends records to sandboxes' activity in one write (a
// *store.Store).
type ActivityWriter interface {
	RecordEgress(ctx context.Context, records []domain.Activity) error
}

// Batching of Recorder's writes.
const (
	recordQueue  = 8192
	recordBatch  = 512
	recordLinger = 200 * time.Millisecond
	writeTimeout = 5 * time.Second
)

// Recorder is an egressproxy.Recorder that writes the proxy's records
// into the sandboxes' activity (kind egress) and counts them in metrics.
// Record never blocks the proxy: records wait in a queue that Run writes
// in batches (one statement each, at most every 200 ms); when Postgres
// cannot keep up and the queue is full, records are dropped and counted
// (tether_egress_records_dropped_total), as are those of a sandbox past
// 100 a second. Every connection is recorded;
// of DNS questions, the refused ones only (an allowed name is followed by
// its connection, which is).
type Recorder struct {
	w     ActivityWriter
	log   *slog.Logger
	queue chan domain.Activity

	dropped atomic.Int64
	// rates counts each sandbox's records in the current second: a
	// sandbox past perSandboxRate has the rest of its second dropped, so
	// that one sandbox cannot fill the activity table or crowd others'
	// records out of the queue.
	mu     sync.Mutex
	second time.Time
	rates  map[string]int
	conns  *prometheus.CounterVec
	bytes  *prometheus.CounterVec
	drops  prometheus.Counter
}

// NewRecorder returns a Recorder writing to w, its metrics registered
// with reg (nil: none).
func NewRecorder(w ActivityWriter, log *slog.Logger, reg prometheus.Registerer) *Recorder {
	r := &Recorder{w: w, log: log, queue: make(chan domain.Activity, recordQueue),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_egress_connections_total",
			Help: "Connections and DNS questions of allow-list sandboxes that the egress proxy decided, by protocol and verdict."},
			[]string{"proto", "verdict"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_egress_bytes_total",
			Help: "Bytes through the egress proxy: out (from sandboxes) and in (back to them)."}, []string{"direction"}),
		drops: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_egress_records_dropped_total",
			Help: "Egress records not written to the sandboxes' activity because the queue to Postgres was full."}),
	}
	if reg != nil {
		reg.MustRegister(r.Collectors()...)
	}
	return r
}

// Collectors are the recorder's metrics, to register.
func (r *Recorder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.conns, r.bytes, r.drops}
}

// Record implements egressproxy.Recorder.
func (r *Recorder) Record(c egressproxy.ConnRecord) {
	verdict := "refused"
	if c.Allowed {
		verdict = "allowed"
	}
	r.conns.WithLabelValues(c.Proto, verdict).Inc()
	r.bytes.WithLabelValues("out").Add(float64(c.BytesOut))
	r.bytes.WithLabelValues("in").Add(float64(c.BytesIn))
	if c.Proto == egressproxy.ProtoDNS && c.Allowed {
		return
	}
	if !r.admit(c.SandboxID, c.End) {
		r.drops.Inc()
		return
	}
	select {
	case r.queue <- activityOf(c):
	default:
		r.drops.Inc()
		if r.dropped.Add(1)%1000 == 1 {
			r.log.Warn("egress records dropped: the activity queue is full", "dropped", r.dropped.Load())
		}
	}
}

// perSandboxRate is the most records a sandbox has written a second.
const perSandboxRate = 100

// admit reports whether a record of sandbox id at may be written.
func (r *Recorder) admit(id string, at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sec := at.Truncate(time.Second); !sec.Equal(r.second) || r.rates == nil {
		r.second, r.rates = sec, map[string]int{}
	}
	r.rates[id]++
	return r.rates[id] <= perSandboxRate
}

// activityOf is c as an activity record.
func activityOf(c egressproxy.ConnRecord) domain.Activity {
	host := c.Host
	if host == "" && c.Addr.IsValid() {
		host = c.Addr.Addr().String()
	}
	allowed := c.Allowed
	a := domain.Activity{SandboxID: c.SandboxID, At: c.Start, Kind: domain.ActivityEgress, Target: host,
		Port: int(c.Addr.Port()), Allowed: &allowed, Rule: c.Rule, Error: c.Reason, Duration: c.End.Sub(c.Start)}
	if c.Proto == egressproxy.ProtoDNS {
		a.Port = 53
	} else {
		out, in := c.BytesOut, c.BytesIn
		a.Bytes, a.BytesIn = &out, &in
	}
	return a
}

// Run writes the queued records until ctx is done, then what is left
// within a moment.
func (r *Recorder) Run(ctx context.Context) {
	batch := make([]domain.Activity, 0, recordBatch)
	timer := time.NewTimer(recordLinger)
	defer timer.Stop()
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		if err := r.w.RecordEgress(wctx, batch); err != nil {
			r.log.Error("egress records not written", "records", len(batch), "err", err)
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case a := <-r.queue:
					batch = append(batch, a)
					if len(batch) == recordBatch {
						flush(context.WithoutCancel(ctx))
					}
				default:
					flush(context.WithoutCancel(ctx))
					return
				}
			}
		case a := <-r.queue:
			batch = append(batch, a)
			if len(batch) == recordBatch {
				flush(ctx)
			}
		case <-timer.C:
			flush(ctx)
			timer.Reset(recordLinger)
		}
	}
}
