package lifecycle

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// RefillerConfig tunes the pool refiller. Zero fields take the defaults
// noted.
type RefillerConfig struct {
	// WorkerID names this replica in the members' first events.
	WorkerID string
	// Interval is how often the refiller looks at every pool
	// (POOL_REFILL_INTERVAL): a claimed member is replaced within about
	// this long. Default 1s.
	Interval time.Duration
	// Lease is the owner lease of each pool's unclaimed members
	// (POOL_LEASE), renewed every Lease/3 while the pool exists: members
	// outlive a Tether that is down for good by at most this long plus a
	// janitor interval. Default 1m.
	Lease time.Duration
	// Batch bounds the members one refill of a pool requests. Default 32.
	Batch int
	// Concurrency bounds the pools refilled at once. Default 4.
	Concurrency int
	// MaxLifetime and CreateTimeout are every member's, as for a create
	// (MAX_LIFETIME, CREATE_TIMEOUT); TenantMaxLive is the server's quota
	// on a tenant's live sandboxes (TENANT_MAX_LIVE; 0 or less: none).
	MaxLifetime, CreateTimeout time.Duration
	TenantMaxLive              int
	// Backoff is how long a pool whose last refill round failed (its
	// members all failed, none ready) waits before its next member is
	// requested (POOL_REFILL_BACKOFF); it doubles with each further failed
	// round up to MaxBackoff (POOL_REFILL_MAX_BACKOFF), and a member ready
	// again ends it. Defaults 1s and 5m.
	Backoff, MaxBackoff time.Duration
}

// Refiller defaults, for zero RefillerConfig fields.
const (
	DefaultRefillInterval    = time.Second
	DefaultPoolLease         = time.Minute
	DefaultRefillBatch       = 32
	DefaultRefillConcurrency = 4
)

func (c RefillerConfig) withDefaults() RefillerConfig {
	if c.WorkerID == "" {
		c.WorkerID = "refiller-" + randomSuffix()
	}
	c.Interval = cmp.Or(c.Interval, DefaultRefillInterval)
	c.Lease = cmp.Or(c.Lease, DefaultPoolLease)
	c.Batch = cmp.Or(c.Batch, DefaultRefillBatch)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultRefillConcurrency)
	c.MaxLifetime = cmp.Or(c.MaxLifetime, 24*time.Hour)
	c.CreateTimeout = cmp.Or(c.CreateTimeout, 5*time.Minute)
	c.Backoff = cmp.Or(c.Backoff, store.DefaultRefillBackoff)
	c.MaxBackoff = max(cmp.Or(c.MaxBackoff, store.DefaultRefillMaxBackoff), c.Backoff)
	return c
}

// refillStore is what the refiller needs from the registry.
type refillStore interface {
	Now() time.Time
	ListPools(ctx context.Context, tenant string) ([]domain.Pool, error)
	RefillPool(ctx context.Context, tenant, name string, l store.RefillLimits) (store.Refill, error)
}

// Refiller keeps every warm pool at its min_ready members. Every replica
// runs one: each refill holds its pool's row lock (store.RefillPool), and
// a pool another replica is refilling is skipped, so replicas share the
// work without over-creating. It only records members as requested; the
// executors create them like any sandbox, and a member that fails or is
// lost stops counting and is replaced at the next look.
type Refiller struct {
	cfg   RefillerConfig
	store refillStore
	log   *slog.Logger

	requested prometheus.Counter
	failed    prometheus.Counter
	deferred  prometheus.Counter
	ended     *prometheus.CounterVec
	runs      prometheus.Histogram

	// renewed is when the refiller last renewed every pool's lease; only
	// the loop goroutine uses it.
	renewed time.Time

	lifetime
}

// NewRefiller returns a refiller; reg, if not nil, receives its metrics.
func NewRefiller(cfg RefillerConfig, st refillStore, log *slog.Logger, reg prometheus.Registerer) *Refiller {
	r := &Refiller{
		cfg:   cfg.withDefaults(),
		store: st,
		log:   log.With("component", "refiller"),
		requested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_pool_refills_total",
			Help: "Warm pool members this replica's refiller requested.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_pool_members_failed_total",
			Help: "Warm pool members whose create failed, as this replica's refiller found them (each failed round backs its pool off).",
		}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tether_pool_refills_deferred_total",
			Help: "Refills of a pool below min_ready that requested nothing because the pool was backing off after failed members.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_pool_members_ended_total",
			Help: "Unclaimed warm pool members this replica's refiller ended, by reason (pool_shrunk, owner_expired).",
		}, []string{"reason"}),
		runs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tether_pool_refill_run_duration_seconds",
			Help:    "Duration of the refiller's looks at every pool.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
	if reg != nil {
		reg.MustRegister(r.requested, r.failed, r.deferred, r.ended, r.runs)
	}
	return r
}

// Start runs the refiller in the background until Stop or ctx ends. Stop
// (lifetime's) waits, until its context is done, for the refill in
// progress, which the stop cuts short (a refill is one transaction: it
// commits or not).
func (r *Refiller) Start(ctx context.Context) {
	_ = r.start(ctx, func(ctx context.Context) (func(), error) {
		return func() { r.run(ctx) }, nil
	})
}

// run looks at every pool now and then every interval until ctx is done.
func (r *Refiller) run(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		r.RunOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// RunOnce looks at every pool once: those below min_ready or above
// max_size are refilled or trimmed, and every Lease/3 all are, which
// renews their owner leases. Errors are logged per pool; the others go on.
func (r *Refiller) RunOnce(ctx context.Context) {
	start := time.Now()
	defer func() { r.runs.Observe(time.Since(start).Seconds()) }()
	pools, err := r.store.ListPools(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("refiller: list pools", "err", err)
		}
		return
	}
	renew := time.Since(r.renewed) >= r.cfg.Lease/3
	limits := store.RefillLimits{Lease: r.cfg.Lease, MaxLifetime: r.cfg.MaxLifetime, CreateTimeout: r.cfg.CreateTimeout,
		TenantMaxLive: r.cfg.TenantMaxLive, Batch: r.cfg.Batch, Worker: r.cfg.WorkerID,
		Backoff: r.cfg.Backoff, MaxBackoff: r.cfg.MaxBackoff}
	now := r.store.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Concurrency)
	failed := make(chan struct{}, len(pools))
	for _, p := range pools {
		if !renew && p.Size <= p.MaxSize && (p.Size >= p.MinReady || backingOff(p, now)) {
			continue
		}
		g.Go(func() error {
			if !r.refill(gctx, p, limits) {
				failed <- struct{}{}
			}
			return nil
		})
	}
	_ = g.Wait()
	if renew && len(failed) == 0 {
		r.renewed = start
	}
}

// backingOff reports whether a refill of p would request nothing and has
// no outcome to look for: p waits for its backoff's next step and no
// member requested earlier is on its way.
func backingOff(p domain.Pool, now time.Time) bool {
	return p.Refill.NextAt.After(now) && p.Refill.Pending == 0
}

// refill refills one pool and reports whether it succeeded.
func (r *Refiller) refill(ctx context.Context, p domain.Pool, limits store.RefillLimits) bool {
	res, err := r.store.RefillPool(ctx, p.Tenant, p.Name, limits)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("refiller: refill pool", "tenant", p.Tenant, "pool", p.Name, "err", err)
		}
		return false
	}
	r.requested.Add(float64(len(res.Created)))
	r.failed.Add(float64(res.Failed))
	if res.Deferred {
		r.deferred.Inc()
	}
	if res.Failed > 0 && !res.Readied {
		r.log.Warn("refiller: pool members failed; backing off", "tenant", p.Tenant, "pool", p.Name, "failed", res.Failed,
			"failures", res.Pool.Refill.Failures, "next_at", res.Pool.Refill.NextAt, "err", res.Pool.Refill.Error)
	}
	for _, sb := range res.Ended {
		r.ended.WithLabelValues(string(sb.Reason)).Inc()
	}
	if len(res.Created) > 0 || len(res.Ended) > 0 {
		r.log.Debug("refiller: pool refilled", "tenant", p.Tenant, "pool", p.Name,
			"requested", len(res.Created), "ended", len(res.Ended), "size", res.Pool.Size)
	}
	return true
}

// poolReader is what the pool collector needs.
type poolReader interface {
	ListPools(ctx context.Context, tenant string) ([]domain.Pool, error)
}

// PoolCollector exports every warm pool's size, ready members and
// min_ready, by tenant and pool, by querying Postgres when scraped.
type PoolCollector struct {
	store                 poolReader
	size, ready, minReady *prometheus.Desc
	failures, backoff     *prometheus.Desc
}

// NewPoolCollector returns a collector over st.
func NewPoolCollector(st poolReader) *PoolCollector {
	labels := []string{"tenant", "pool"}
	return &PoolCollector{
		store:    st,
		size:     prometheus.NewDesc("tether_pool_size", "Live unclaimed members of the warm pool, by tenant and pool.", labels, nil),
		ready:    prometheus.NewDesc("tether_pool_ready", "Members of the warm pool ready to claim, by tenant and pool.", labels, nil),
		minReady: prometheus.NewDesc("tether_pool_min_ready", "The warm pool's min_ready, by tenant and pool.", labels, nil),
		failures: prometheus.NewDesc("tether_pool_refill_failures",
			"Consecutive refill rounds of the warm pool whose members all failed (0: not backing off), by tenant and pool.", labels, nil),
		backoff: prometheus.NewDesc("tether_pool_refill_backoff_seconds",
			"Seconds until the backing-off warm pool's next member is requested (0: not backing off), by tenant and pool.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.ready
	ch <- c.minReady
	ch <- c.failures
	ch <- c.backoff
}

// Collect implements prometheus.Collector. A failed query reports
// nothing (tether_registry_up says whether the registry answers).
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pools, err := c.store.ListPools(ctx, "")
	if err != nil {
		return
	}
	now := time.Now()
	for _, p := range pools {
		wait := max(0, p.Refill.NextAt.Sub(now).Seconds()) // 0 for a zero NextAt
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, float64(p.Refill.Failures), p.Tenant, p.Name)
		ch <- prometheus.MustNewConstMetric(c.backoff, prometheus.GaugeValue, wait, p.Tenant, p.Name)
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(p.Size), p.Tenant, p.Name)
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(p.Ready), p.Tenant, p.Name)
		ch <- prometheus.MustNewConstMetric(c.minReady, prometheus.GaugeValue, float64(p.MinReady), p.Tenant, p.Name)
	}
}
