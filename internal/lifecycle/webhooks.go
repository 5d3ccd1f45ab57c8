package lifecycle

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/webhook"
)

// WebhookConfig tunes webhook delivery. Zero fields take the defaults
// noted.
type WebhookConfig struct {
	// WorkerID names this replica in delivery leases. Default: a random id.
	WorkerID string
	// AllowPrivate lets deliveries go to loopback, private, link-local and
	// other internal addresses (WEBHOOK_ALLOW_PRIVATE). Default false.
	AllowPrivate bool
	// Timeout bounds each attempt, from dialling to the answer's headers
	// (WEBHOOK_TIMEOUT). Default 5s; a receiver slower than that fails its
	// attempts and backs off rather than hold a slot.
	Timeout time.Duration
	// RetryFor is how long a delivery is retried from when it was recorded;
	// the first failed attempt after it ends the delivery failed and the
	// endpoint failing (WEBHOOK_RETRY_FOR). Default 24h.
	RetryFor time.Duration
	// MinBackoff and MaxBackoff shape the wait before a retry: a random
	// time up to MinBackoff doubled once per attempt so far, at most
	// MaxBackoff ("full jitter"; WEBHOOK_MAX_BACKOFF). Defaults 1s, 10m.
	MinBackoff, MaxBackoff time.Duration
	// BatchSize caps the events of one delivery (WEBHOOK_BATCH_SIZE).
	// Default 100.
	BatchSize int
	// Concurrency bounds the deliveries this replica sends at once
	// (WEBHOOK_CONCURRENCY). Default 8.
	Concurrency int
	// TenantConcurrency bounds the deliveries of one tenant this replica
	// sends at once, so that one tenant's slow receivers never hold every
	// slot (WEBHOOK_TENANT_CONCURRENCY). Default a quarter of Concurrency,
	// at least 1. An endpoint has one delivery in flight at most.
	TenantConcurrency int
	// PollInterval is how often the worker looks for events and due
	// retries when nothing wakes it. Default 1s.
	PollInterval time.Duration
}

// Webhook defaults, for zero WebhookConfig fields.
const (
	DefaultWebhookTimeout      = 5 * time.Second
	DefaultWebhookRetryFor     = 24 * time.Hour
	DefaultWebhookMinBackoff   = time.Second
	DefaultWebhookMaxBackoff   = 10 * time.Minute
	DefaultWebhookBatchSize    = 100
	DefaultWebhookConcurrency  = 8
	DefaultWebhookPollInterval = time.Second
)

func (c WebhookConfig) withDefaults() WebhookConfig {
	if c.WorkerID == "" {
		c.WorkerID = "webhooks-" + randomSuffix()
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultWebhookTimeout)
	c.RetryFor = cmp.Or(c.RetryFor, DefaultWebhookRetryFor)
	c.MinBackoff = cmp.Or(c.MinBackoff, DefaultWebhookMinBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, DefaultWebhookMaxBackoff)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultWebhookBatchSize)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultWebhookConcurrency)
	c.TenantConcurrency = min(c.Concurrency, cmp.Or(c.TenantConcurrency, max(1, c.Concurrency/4)))
	c.PollInterval = cmp.Or(c.PollInterval, DefaultWebhookPollInterval)
	return c
}

// webhookStore is what delivery needs from the registry.
type webhookStore interface {
	Now() time.Time
	PlanWebhookDeliveries(ctx context.Context, limit, batch, scan int) (int, error)
	ClaimWebhookDeliveries(ctx context.Context, worker string, limits store.ClaimLimits, lease time.Duration) ([]store.DeliveryClaim, error)
	RecordWebhookAttempt(ctx context.Context, a store.Attempt) (bool, error)
}

// changeSource wakes the worker when sandboxes change (the notifier).
type changeSource interface {
	Subscribe() (<-chan domain.Change, func())
}

// Webhooks sends the tenants' events to their webhook endpoints. Each
// round it plans the next delivery of every endpoint that has new events
// and none pending (the store records it before it is sent), claims due
// deliveries under a lease (replicas never hold one together) for its free
// slots, starts sending them, and records each attempt: a 2xx moves the
// endpoint's cursor past the batch; anything else retries the same batch,
// under the same id, with backoff, until RetryFor has passed, when the
// endpoint becomes failing. A round does not wait for the attempts it
// started: a slot is claimed again as soon as it is free, and a tenant
// holds at most TenantConcurrency slots, so one tenant's slow receivers
// delay no other tenant's deliveries.
type Webhooks struct {
	cfg     WebhookConfig
	store   webhookStore
	changes changeSource
	client  *http.Client
	log     *slog.Logger

	outcomes *prometheus.CounterVec
	lag      prometheus.Histogram

	// held counts the deliveries in flight, by tenant (under mu); freed
	// is told when one ends; attempts waits for them.
	mu       sync.Mutex
	held     map[string]int
	inFlight int
	freed    chan struct{}
	attempts sync.WaitGroup

	lifetime
}

// NewWebhooks returns a delivery worker. changes may be nil (it then only
// polls); reg, if not nil, receives its metrics.
func NewWebhooks(cfg WebhookConfig, st webhookStore, changes changeSource, log *slog.Logger, reg prometheus.Registerer) *Webhooks {
	cfg = cfg.withDefaults()
	w := &Webhooks{
		cfg: cfg, store: st, changes: changes, log: log,
		held: map[string]int{}, freed: make(chan struct{}, 1),
		client: webhook.Guard{AllowPrivate: cfg.AllowPrivate}.Client(cfg.Timeout),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_webhook_deliveries_total",
			Help: "Webhook delivery attempts by outcome: delivered (2xx), retry (failed, tried again later), failed (retries ran out; the endpoint is failing).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tether_webhook_delivery_lag_seconds",
			Help:    "Time from an event to its delivery's 2xx, for the oldest event of each delivery.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400},
		}),
	}
	if reg != nil {
		reg.MustRegister(w.outcomes, w.lag)
	}
	return w
}

// Start runs the worker in the background until Stop. Stop (lifetime's)
// ends it and waits for the attempts in flight (each bounded by Timeout),
// or until its context is done; a delivery whose result could not be
// recorded is claimed again once its lease lapses.
func (w *Webhooks) Start(ctx context.Context) {
	_ = w.start(ctx, func(ctx context.Context) (func(), error) {
		var wake <-chan domain.Change
		unsubscribe := func() {}
		if w.changes != nil {
			wake, unsubscribe = w.changes.Subscribe()
		}
		return func() {
			defer w.attempts.Wait()
			defer unsubscribe()
			w.run(ctx, wake)
		}, nil
	})
}

// run plans, claims and sends rounds until ctx is done: at once while
// they find work, else at a change, a free slot or the poll interval.
func (w *Webhooks) run(ctx context.Context, wake <-chan domain.Change) {
	ticker := time.NewTicker(w.cfg.PollInterval)
	defer ticker.Stop()
	for {
		started := time.Now()
		busy, err := w.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("webhooks: round failed; retrying", "err", err)
		}
		if busy && err == nil {
			continue // more is waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-wake:
			if !coalesce(ctx, wake, started) {
				return
			}
		case <-w.freed:
			// A slot is free: a due delivery may take it.
			if !coalesce(ctx, wake, started) {
				return
			}
		}
	}
}

// wakeGap is the least time between the starts of two rounds that changes
// woke: a burst of changes (thousands a second under load, each of which
// wakes the worker) is served by one round per gap rather than one round
// (a transaction and a claim, three to five round trips) per change.
const wakeGap = 20 * time.Millisecond

// coalesce waits until wakeGap has passed since the last round started,
// then takes the wake-ups that came meanwhile, which the next round
// serves; false if ctx ended.
func coalesce(ctx context.Context, wake <-chan domain.Change, started time.Time) bool {
	if d := wakeGap - time.Since(started); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	for {
		select {
		case <-wake:
		default:
			return true
		}
	}
}

// RunOnce plans one round of deliveries, claims as many as the free
// slots and the tenants' shares allow, and starts sending them (Stop waits
// for them); it reports whether it found work (so that the caller goes on
// at once).
func (w *Webhooks) RunOnce(ctx context.Context) (bool, error) {
	planned, err := w.store.PlanWebhookDeliveries(ctx, 100, w.cfg.BatchSize, 10*w.cfg.BatchSize)
	if err != nil {
		return false, err
	}
	limits := w.limits()
	if limits.Max == 0 {
		return planned > 0, nil
	}
	claims, err := w.store.ClaimWebhookDeliveries(ctx, w.cfg.WorkerID, limits, w.lease())
	if err != nil {
		return false, err
	}
	sendCtx := context.WithoutCancel(ctx) // an attempt begun ends, bounded by Timeout
	for _, c := range claims {
		w.hold(c.Tenant)
		w.attempts.Go(func() {
			defer w.release(c.Tenant)
			w.attempt(sendCtx, c)
		})
	}
	return planned > 0 || len(claims) == limits.Max, nil
}

// limits are what the next claim may take: the free slots, and each
// tenant's share of them after what it holds.
func (w *Webhooks) limits() store.ClaimLimits {
	w.mu.Lock()
	defer w.mu.Unlock()
	return store.ClaimLimits{Max: w.cfg.Concurrency - w.inFlight, PerTenant: w.cfg.TenantConcurrency, Held: maps.Clone(w.held)}
}

// hold counts a delivery of tenant in flight.
func (w *Webhooks) hold(tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inFlight++
	w.held[tenant]++
}

// release ends a delivery of tenant in flight, and says a slot is free.
func (w *Webhooks) release(tenant string) {
	w.mu.Lock()
	w.inFlight--
	if w.held[tenant]--; w.held[tenant] <= 0 {
		delete(w.held, tenant)
	}
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// lease is how long a claim holds a delivery: an attempt's timeout, with
// room to record its result.
func (w *Webhooks) lease() time.Duration { return 2*w.cfg.Timeout + 5*time.Second }

// attempt sends one claimed delivery and records the outcome.
func (w *Webhooks) attempt(ctx context.Context, c store.DeliveryClaim) {
	status, err := w.send(ctx, c)
	now := w.store.Now()
	a := store.Attempt{Seq: c.Seq, Attempt: c.Attempts, Worker: w.cfg.WorkerID, Status: status}
	outcome := "delivered"
	switch {
	case err == nil:
		a.Delivered = true
	case now.Sub(c.CreatedAt) >= w.cfg.RetryFor:
		a.GiveUp, a.Error, outcome = true, err.Error(), "failed"
	default:
		a.Retry, a.Error, outcome = now.Add(w.backoff(c.Attempts)), err.Error(), "retry"
	}
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	held, rerr := w.store.RecordWebhookAttempt(recordCtx, a)
	switch {
	case rerr != nil:
		w.log.Warn("webhooks: could not record an attempt; it is retried when its lease lapses",
			"delivery", c.ID, "webhook_id", c.EndpointID, "err", rerr)
		return
	case !held:
		return // replayed or deleted meanwhile
	}
	w.outcomes.WithLabelValues(outcome).Inc()
	switch outcome {
	case "delivered":
		if len(c.Events) > 0 {
			w.lag.Observe(max(0, now.Sub(c.Events[0].At).Seconds()))
		}
	case "failed":
		w.log.Warn("webhook endpoint failing: retries ran out; nothing more is sent until it is replayed",
			"webhook_id", c.EndpointID, "tenant", c.Tenant, "delivery", c.ID, "attempts", c.Attempts, "err", a.Error)
	}
}

// backoff is the wait before retrying after the attempt-th failed attempt:
// full jitter over an exponential ceiling.
func (w *Webhooks) backoff(attempt int) time.Duration {
	ceiling := w.cfg.MaxBackoff
	if attempt < 40 {
		ceiling = min(ceiling, w.cfg.MinBackoff<<(attempt-1))
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1)) //nolint:gosec // jitter, not a secret
}

// maxErrorText bounds the error recorded for an attempt.
const maxErrorText = 500

// send POSTs the delivery, signed, and returns the receiver's status; an
// error unless it was 2xx.
func (w *Webhooks) send(ctx context.Context, c store.DeliveryClaim) (int, error) {
	body, err := webhook.Body(c.Delivery, c.Events)
	if err != nil {
		return 0, fmt.Errorf("encode delivery: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", webhook.UserAgent())
	req.Header.Set(webhook.HeaderDelivery, c.ID)
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(c.Secret, time.Now(), body))
	res, err := w.client.Do(req)
	if err != nil {
		return 0, truncated(attemptError(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, fmt.Errorf("the receiver answered %d", res.StatusCode)
	}
	return res.StatusCode, nil
}

// attemptError is the error of an attempt that got no answer, as the
// tenant reads it in the delivery's history. It says what failed, not what
// the operator's network told: a refused address without the address the
// host resolved to (which Go's dial error names), a failed lookup without
// the address of the DNS server.
func attemptError(err error) error {
	var opErr *net.OpError
	if errors.Is(err, webhook.ErrForbiddenAddress) && errors.As(err, &opErr) {
		return opErr.Err // the guard's own words
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("the lookup of the receiver's host %s failed: %s", dnsErr.Name, dnsErr.Err)
	}
	return err
}

func truncated(err error) error {
	s := err.Error()
	if len(s) > maxErrorText {
		s = s[:maxErrorText]
	}
	return fmt.Errorf("%s", s)
}

// webhookStatsReader is what the webhook collector needs.
type webhookStatsReader interface {
	WebhookStats(ctx context.Context) (failing, pending int64, oldest *time.Time, err error)
	Now() time.Time
}

// WebhookCollector exports the webhook gauges (failing endpoints, pending
// deliveries and the age of the oldest) by querying Postgres when scraped.
type WebhookCollector struct {
	store   webhookStatsReader
	failing *prometheus.Desc
	pending *prometheus.Desc
	oldest  *prometheus.Desc
}

// NewWebhookCollector returns a collector over st.
func NewWebhookCollector(st webhookStatsReader) *WebhookCollector {
	return &WebhookCollector{
		store:   st,
		failing: prometheus.NewDesc("tether_webhook_endpoints_failing", "Webhook endpoints that are failing (retries ran out; nothing is sent until a replay).", nil, nil),
		pending: prometheus.NewDesc("tether_webhook_deliveries_pending", "Webhook deliveries being attempted.", nil, nil),
		oldest:  prometheus.NewDesc("tether_webhook_oldest_pending_seconds", "Age of the oldest pending webhook delivery (0 if none).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *WebhookCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.failing
	ch <- c.pending
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *WebhookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	failing, pending, oldest, err := c.store.WebhookStats(ctx)
	if err != nil {
		return
	}
	age := 0.0
	if oldest != nil {
		age = max(0, c.store.Now().Sub(*oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(failing))
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
