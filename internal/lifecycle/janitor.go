package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// JanitorConfig tunes the janitor. Zero fields take the defaults noted.
type JanitorConfig struct {
	// Holder names this replica in the leadership lease; unique per replica.
	// Default: a random id.
	Holder string
	// Interval is how often each replica sweeps (JANITOR_INTERVAL). A sandbox
	// outlives its owner's lease or its TTL by at most about this long.
	// Default 5s.
	Interval time.Duration
	// LeaderTTL is how long leadership lasts unrenewed: a crashed leader is
	// replaced after at most this long. Default 3×Interval.
	LeaderTTL time.Duration
	// OrphanGrace is how old a provider resource that no live sandbox
	// accounts for must be before it is destroyed, and how long a sandbox
	// must have been ready before a missing resource makes it lost. It
	// absorbs clock skew between replicas and creates being recorded.
	// Default 30s.
	OrphanGrace time.Duration
	// BatchSize bounds the sandboxes one statement ends. Default 1000.
	BatchSize int
	// DestroyConcurrency bounds concurrent orphan destroys. Default 8.
	DestroyConcurrency int
	// IdempotencyKeyTTL is how long an Idempotency-Key is remembered; the
	// leader forgets older ones. Default 24h.
	IdempotencyKeyTTL time.Duration
	// Node is the node this janitor runs on (NODE_ID). With it, the
	// inventories of host-bound providers are reconciled by the node that
	// holds them (one replica per node at a time), against the sandboxes
	// placed on that node only; and the leader ends the ready sandboxes of
	// dead nodes. Empty: the leader reconciles every provider, as on a
	// single host.
	Node string
	// NodeGrace is how long a node may go without a heartbeat (NODE_GRACE;
	// the store judges deaths by the same value). The leader ends a dead
	// node's sandboxes only after reaching Postgres without a break for
	// this long itself, so that after an outage, or when it has just
	// started, every live node has had time to beat again. Default
	// store.DefaultNodeGrace.
	NodeGrace time.Duration
}

// Janitor defaults, for zero JanitorConfig fields. LeaderTTL defaults to
// three intervals.
const (
	DefaultJanitorInterval    = 5 * time.Second
	DefaultOrphanGrace        = 30 * time.Second
	DefaultBatchSize          = 1000
	DefaultDestroyConcurrency = 8
	DefaultIdempotencyKeyTTL  = 24 * time.Hour
)

func (c JanitorConfig) withDefaults() JanitorConfig {
	if c.Holder == "" {
		c.Holder = "janitor-" + randomSuffix()
	}
	c.Interval = cmp.Or(c.Interval, DefaultJanitorInterval)
	c.LeaderTTL = cmp.Or(c.LeaderTTL, 3*c.Interval)
	c.OrphanGrace = cmp.Or(c.OrphanGrace, DefaultOrphanGrace)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.DestroyConcurrency = cmp.Or(c.DestroyConcurrency, DefaultDestroyConcurrency)
	c.IdempotencyKeyTTL = cmp.Or(c.IdempotencyKeyTTL, DefaultIdempotencyKeyTTL)
	c.NodeGrace = cmp.Or(c.NodeGrace, store.DefaultNodeGrace)
	return c
}

// janitorStore is what the janitor needs from the registry.
type janitorStore interface {
	Now() time.Time
	TryLead(ctx context.Context, role, holder string, ttl time.Duration) (bool, error)
	Resign(ctx context.Context, role, holder string) error
	CreditOutage(ctx context.Context) (store.OutageCredit, bool, error)
	EndLapsedOwners(ctx context.Context, limit int) ([]domain.Sandbox, error)
	EndExpired(ctx context.Context, limit int) ([]domain.Sandbox, error)
	FailOverdue(ctx context.Context, limit int) ([]domain.Sandbox, error)
	RescueLapsedLeases(ctx context.Context) (int64, error)
	Records(ctx context.Context, ids []string) (map[string]store.Record, error)
	ReadyBefore(ctx context.Context, provider, node string, t time.Time, fn func(id string)) error
	StrandedSandboxes(ctx context.Context, limit int) ([]store.Stranded, error)
	MarkStranded(ctx context.Context, id, node, message string) (domain.Sandbox, bool, error)
	MarkLost(ctx context.Context, id, message string) (domain.Sandbox, bool, error)
	RecordReconcile(ctx context.Context, provider, sandboxID, tenant, action, message string) error
	ForgetIdempotencyKeys(ctx context.Context, cutoff time.Time, limit int) (int64, error)
	snapshotStore
}

// janitorRole is the leadership role the janitor holds.
const janitorRole = "janitor"

// Janitor keeps the registry honest: it ends sandboxes whose owner lease or
// TTL lapsed, settles creations that overran their deadline, rescues work
// whose worker died, and reconciles the registry with every provider's
// inventory in both directions.
//
// Every replica sweeps (see tick); one replica at a time, the leader,
// reconciles with the providers. A sweep's first step is the outage credit
// (store.CreditOutage): it records that this replica reached Postgres and
// extends the leases alive through a span in which no replica did; only
// once it succeeded does the sweep judge leases and deadlines
// (EndLapsedOwners, EndExpired). The API's calls that judge an owner's
// lease make the same step first (store.SettleOutage). Leadership is a lease row in Postgres
// (table leaders) rather than an advisory lock: it needs no dedicated
// session (so it works through connection poolers), it moves with the
// store's injectable clock in tests, and ops can see who leads. Safety does
// not rest on it: every janitor action is a single fenced, idempotent
// statement, so two leaders for a moment only duplicate work.
type Janitor struct {
	cfg       JanitorConfig
	store     janitorStore
	providers []domain.Provider
	log       *slog.Logger

	actions  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	leading  prometheus.Gauge

	// isLeader is set while this replica leads the janitor: only the
	// leader acts on what watching providers report.
	isLeader atomic.Bool

	// steadySince is when this janitor last began to reach Postgres
	// without a break (its creation, or its last run that found Postgres
	// unreachable), in Unix nanoseconds of the wall clock.
	steadySince atomic.Int64

	lifetime
	resignOnce sync.Once
}

// NewJanitor returns a janitor over the providers. reg, if not nil,
// receives its metrics.
func NewJanitor(cfg JanitorConfig, st janitorStore, providers []domain.Provider, log *slog.Logger, reg prometheus.Registerer) *Janitor {
	cfg = cfg.withDefaults()
	j := &Janitor{
		cfg:       cfg,
		store:     st,
		providers: providers,
		log:       log.With("component", "janitor", "holder", cfg.Holder),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_janitor_actions_total",
			Help: "Sandboxes and resources the janitor acted on, by action.",
		}, []string{"action"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_janitor_run_duration_seconds",
			Help:    "Duration of janitor runs by phase (sweep, reconcile).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"phase"}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tether_janitor_leader",
			Help: "1 while this replica leads the janitor.",
		}),
	}
	if reg != nil {
		reg.MustRegister(j.actions, j.duration, j.leading)
	}
	j.steadySince.Store(time.Now().UnixNano())
	return j
}

// panicked counts a recovered panic in a provider call.
func (j *Janitor) panicked() { j.actions.WithLabelValues("provider_panic").Inc() }

// Start runs the janitor in the background until Stop.
func (j *Janitor) Start(ctx context.Context) {
	_ = j.start(ctx, func(ctx context.Context) (func(), error) {
		return func() { j.run(ctx) }, nil
	})
}

// run runs the janitor's loops until ctx is done. Two loops: a
// reconciliation that waits on a slow provider must not hold back the
// sweeps that end lapsed owners' sandboxes.
func (j *Janitor) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { j.every(ctx, j.sweepTick) })
	wg.Go(func() { j.every(ctx, j.reconcileTick) })
	for _, p := range j.providers {
		if w, ok := p.(domain.Watcher); ok && !j.nodeBound(p) {
			wg.Go(func() { j.watch(ctx, p, w) })
		}
	}
	wg.Wait()
}

// resignTimeout bounds the janitor's resignation at Stop.
const resignTimeout = 5 * time.Second

// Stop ends the janitor, waits until ctx is done for the work in progress
// (which the stop cuts short), and then, once, resigns leadership within
// ctx (and at most resignTimeout) so another replica takes over at once.
// Work still in progress when ctx ends could take the leadership again:
// then the janitor does not resign, and its leadership lapses on its own.
// Stop of a janitor never started returns at once.
func (j *Janitor) Stop(ctx context.Context) {
	j.lifetime.Stop(ctx)
	select {
	case <-j.Started():
	default:
		return // it never ran: it leads nothing
	}
	select {
	case <-j.Stopped():
	default:
		j.log.Warn("janitor: stop deadline passed with work in progress; leadership lapses on its own")
		return
	}
	j.resignOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, resignTimeout)
		defer cancel()
		roles := []string{janitorRole}
		if j.cfg.Node != "" {
			roles = append(roles, nodeRole(j.cfg.Node))
		}
		for _, role := range roles {
			if err := j.store.Resign(ctx, role, j.cfg.Holder); err != nil {
				j.log.Warn("janitor: resign failed; leadership lapses on its own", "role", role, "err", err)
			}
		}
		j.leading.Set(0)
	})
}

// every runs fn now and then every interval until ctx is done.
func (j *Janitor) every(ctx context.Context, fn func(context.Context)) {
	ticker := time.NewTicker(j.cfg.Interval)
	defer ticker.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sweepTick runs the sweeps. They are single fenced statements that skip
// rows another replica holds, so every replica runs them: an owner's
// sandboxes end within one interval of its lease lapsing as long as any
// replica is alive, with no wait for a crashed leader's lease to lapse.
func (j *Janitor) sweepTick(ctx context.Context) {
	if _, err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
		j.unsteady(err)
		j.log.Error("janitor: sweep incomplete", "err", err)
	}
}

// unsteady restarts the wait before dead nodes are judged if err says
// Postgres could not be reached.
func (j *Janitor) unsteady(err error) {
	if errors.Is(err, domain.ErrUnavailable) {
		j.steadySince.Store(time.Now().UnixNano())
	}
}

// steady reports whether this janitor has reached Postgres without a break
// for a node grace period.
func (j *Janitor) steady() bool {
	return time.Since(time.Unix(0, j.steadySince.Load())) >= j.cfg.NodeGrace
}

// reconcileTick reconciles with the providers while this replica leads,
// and with this node's host-bound providers while it leads its node.
func (j *Janitor) reconcileTick(ctx context.Context) {
	var rep Report
	if j.lead(ctx, janitorRole) {
		j.isLeader.Store(true)
		j.leading.Set(1)
		if err := j.Reconcile(ctx, &rep); err != nil && ctx.Err() == nil {
			j.unsteady(err)
			j.log.Error("janitor: reconcile incomplete", "err", err)
		}
	} else {
		j.isLeader.Store(false)
		j.leading.Set(0)
	}
	if j.cfg.Node != "" && j.lead(ctx, nodeRole(j.cfg.Node)) {
		if err := j.ReconcileNode(ctx, &rep); err != nil && ctx.Err() == nil {
			j.log.Error("janitor: node reconcile incomplete", "node", j.cfg.Node, "err", err)
		}
	}
}

// nodeRole is the leadership role of reconciling a node's inventories.
func nodeRole(node string) string { return janitorRole + "/node/" + node }

// lead takes or keeps role for this replica and reports whether it holds it.
func (j *Janitor) lead(ctx context.Context, role string) bool {
	lead, err := j.store.TryLead(ctx, role, j.cfg.Holder, j.cfg.LeaderTTL)
	if err != nil {
		j.unsteady(err)
		if ctx.Err() == nil {
			j.log.Warn("janitor: leadership check failed", "role", role, "err", err)
		}
		return false
	}
	return lead
}

// nodeBound reports whether p's inventory is reconciled per node.
func (j *Janitor) nodeBound(p domain.Provider) bool {
	return j.cfg.Node != "" && domain.IsHostBound(p)
}

// Report counts what one run of the janitor did: a Sweep, a Reconcile, or
// both (RunOnce).
type Report struct {
	OwnerExpired     int
	Expired          int
	Overdue          int
	LeasesRescued    int64
	OrphansDestroyed int
	OrphansFailed    int
	Lost             int
	// Stranded counts ready sandboxes ended lost because their node died.
	Stranded      int
	KeysForgotten int64
	// OutagesCredited counts outages credited to leases (0 or 1).
	OutagesCredited int
	// SnapshotsFailed, SnapshotsExpired, SnapshotOrphans and SnapshotsLost
	// count what became of snapshots: creating ones that could no longer
	// be taken, ones past their retention, orphaned data removed, and
	// ready ones whose data was gone.
	SnapshotsFailed, SnapshotsExpired, SnapshotOrphans, SnapshotsLost int
}

// RunOnce runs every janitor duty once, whether or not this replica leads:
// Sweep, Reconcile, then ReconcileNode. Tests call it directly.
func (j *Janitor) RunOnce(ctx context.Context) (Report, error) {
	rep, err := j.Sweep(ctx)
	rerr := j.Reconcile(ctx, &rep)
	nerr := j.ReconcileNode(ctx, &rep)
	return rep, errors.Join(err, rerr, nerr)
}

// Sweep credits any outage (CreditOutage), then ends sandboxes whose owner
// lease or deadline lapsed, settles creations past their deadline and
// rescues lapsed worker leases. Without the credit, no lease or deadline is
// judged; otherwise a failing duty does not stop the others. Errors are
// joined.
func (j *Janitor) Sweep(ctx context.Context) (Report, error) {
	start := time.Now()
	defer func() { j.duration.WithLabelValues("sweep").Observe(time.Since(start).Seconds()) }()
	var (
		rep  Report
		errs []error
	)
	sweep := func(action string, fn func(context.Context, int) ([]domain.Sandbox, error), count *int) {
		for {
			ended, err := fn(ctx, j.cfg.BatchSize)
			if err != nil {
				errs = append(errs, err)
				return
			}
			*count += len(ended)
			j.actions.WithLabelValues(action).Add(float64(len(ended)))
			for _, sb := range ended {
				j.log.Info("janitor: sandbox ended", "sandbox", sb.ID, "tenant", sb.Tenant, "action", action, "state", sb.State)
			}
			if len(ended) < j.cfg.BatchSize || ctx.Err() != nil {
				return
			}
		}
	}
	// Leases and deadlines are judged only once any outage is credited.
	if err := j.creditOutage(ctx, &rep); err != nil {
		errs = append(errs, err)
	} else {
		sweep("owner_expired", j.store.EndLapsedOwners, &rep.OwnerExpired)
		sweep("expired", j.store.EndExpired, &rep.Expired)
	}
	sweep("overdue", j.store.FailOverdue, &rep.Overdue)
	if err := j.sweepSnapshots(ctx, &rep); err != nil {
		errs = append(errs, err)
	}

	rescued, err := j.store.RescueLapsedLeases(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	rep.LeasesRescued = rescued
	j.actions.WithLabelValues("lease_rescued").Add(float64(rescued))
	if rescued > 0 {
		j.log.Info("janitor: rescued lapsed leases", "count", rescued)
	}
	return rep, errors.Join(errs...)
}

// creditOutage runs the store's CreditOutage, the step before leases are
// judged: it records that this replica reached Postgres and credits a span
// in which no replica did. It gives up after two intervals, so that a call
// stuck on a dead connection does not hold the sweeps for ever.
func (j *Janitor) creditOutage(ctx context.Context, rep *Report) error {
	cctx, cancel := context.WithTimeout(ctx, 2*j.cfg.Interval)
	defer cancel()
	c, credited, err := j.store.CreditOutage(cctx)
	if err != nil {
		return err
	}
	if credited {
		rep.OutagesCredited++
		j.actions.WithLabelValues("outage_credited").Inc()
		attrs := []any{"from", c.From, "to", c.To, "length", c.Length(), "ceiling", c.Ceiling,
			"owners_extended", c.Owners, "sandboxes_extended", c.Sandboxes}
		if c.AtStart {
			// A restart, most often: clients could not heartbeat while no
			// Tether ran, and get that time back. Nothing failed.
			j.log.Info("janitor: leases credited for the time before this replica started, when no replica recorded reaching Postgres (Tether was stopped, or none reached it)", attrs...)
		} else {
			j.log.Warn("janitor: outage credited to leases: no replica reached Postgres", attrs...)
		}
	}
	return nil
}

// Reconcile compares the inventory of every provider that is not
// reconciled per node with the registry (see reconcile), ends the ready
// sandboxes of dead nodes, and forgets expired idempotency keys. It is the
// leader's duty: listing a provider is the expensive part of the janitor's
// work.
func (j *Janitor) Reconcile(ctx context.Context, rep *Report) error {
	start := time.Now()
	defer func() { j.duration.WithLabelValues("reconcile").Observe(time.Since(start).Seconds()) }()
	var errs []error
	for _, p := range j.providers {
		if j.nodeBound(p) {
			continue
		}
		if err := j.reconcile(ctx, p, "", rep); err != nil {
			errs = append(errs, fmt.Errorf("reconcile %s: %w", p.Name(), err))
		}
	}
	if j.steady() {
		if err := j.endStranded(ctx, rep); err != nil {
			errs = append(errs, err)
		}
	}
	cutoff := j.store.Now().Add(-j.cfg.IdempotencyKeyTTL)
	for {
		n, err := j.store.ForgetIdempotencyKeys(ctx, cutoff, j.cfg.BatchSize)
		if err != nil {
			errs = append(errs, err)
			break
		}
		rep.KeysForgotten += n
		j.actions.WithLabelValues("idempotency_key_forgotten").Add(float64(n))
		if n < int64(j.cfg.BatchSize) || ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// ReconcileNode compares this node's inventory of each host-bound provider
// with the sandboxes placed on this node (see reconcile). It is the duty of
// one replica per node at a time. Without a node it does nothing: Reconcile
// covers every provider then.
func (j *Janitor) ReconcileNode(ctx context.Context, rep *Report) error {
	start := time.Now()
	defer func() { j.duration.WithLabelValues("reconcile_node").Observe(time.Since(start).Seconds()) }()
	var errs []error
	for _, p := range j.providers {
		if !j.nodeBound(p) {
			continue
		}
		if err := j.reconcile(ctx, p, j.cfg.Node, rep); err != nil {
			errs = append(errs, fmt.Errorf("reconcile %s on node %s: %w", p.Name(), j.cfg.Node, err))
		}
	}
	return errors.Join(errs...)
}

// endStranded ends the ready and creating sandboxes of dead nodes with
// reason lost, the message naming the node. When the node comes back, its executors release
// them, destroying what it still holds.
func (j *Janitor) endStranded(ctx context.Context, rep *Report) error {
	for {
		stranded, err := j.store.StrandedSandboxes(ctx, j.cfg.BatchSize)
		if err != nil {
			return err
		}
		for _, st := range stranded {
			msg := fmt.Sprintf("its node %s stopped heartbeating (last heartbeat %s)", st.Node, st.HeartbeatAt.UTC().Format(time.RFC3339))
			sb, ended, err := j.store.MarkStranded(ctx, st.ID, st.Node, msg)
			if err != nil {
				return err
			}
			if ended {
				rep.Stranded++
				j.actions.WithLabelValues("node_lost").Inc()
				j.log.Warn("janitor: sandbox lost with its node", "node", st.Node, "sandbox", st.ID, "tenant", sb.Tenant)
			}
		}
		if len(stranded) < j.cfg.BatchSize {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// reconcile compares the provider's inventory with the registry, both ways:
// resources that no live sandbox accounts for are destroyed (after a grace
// period, in case a create is being recorded), and ready sandboxes whose
// resource the provider no longer has, or holds only defunct remains of,
// end with reason lost (the release that follows clears the remains). The
// decisions are planOrphans and lostIn; this applies them. A non-empty node
// is the node whose inventory this is: only sandboxes placed there are
// judged lost, and resources of sandboxes placed elsewhere are orphans.
func (j *Janitor) reconcile(ctx context.Context, p domain.Provider, node string, rep *Report) error {
	listedAt := j.store.Now()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	resources, err := callProvider(j.log, p.Name(), "list", j.panicked, func() ([]domain.Resource, error) {
		return p.List(lctx)
	})
	cancel()
	if err != nil {
		// Without an inventory nothing can be judged lost or orphaned.
		return fmt.Errorf("list inventory: %w", err)
	}
	held := make(map[string]domain.Resource, len(resources))
	ids := make([]string, 0, len(resources))
	for _, r := range resources {
		held[r.SandboxID] = r
		ids = append(ids, r.SandboxID)
	}
	records, err := j.store.Records(ctx, ids)
	if err != nil {
		return err
	}
	if err := j.destroyOrphans(ctx, p, planOrphans(held, records, node, listedAt, j.cfg.OrphanGrace), rep); err != nil {
		return err
	}

	// Judge only sandboxes ready since well before the listing: replicas'
	// clocks differ, and a resource made just after the listing must not
	// look lost. The ready sandboxes stream past; only the lost are kept.
	var lost []lostSandbox
	if err := j.store.ReadyBefore(ctx, p.Name(), node, listedAt.Add(-j.cfg.OrphanGrace), func(id string) {
		if lostIn(held, id) {
			lost = append(lost, lostSandbox{id: id, reason: held[id].Reason})
		}
	}); err != nil {
		return err
	}
	if err := j.markLost(ctx, p, lost, rep); err != nil {
		return err
	}
	if snap, ok := p.(domain.Snapshotter); ok {
		return j.reconcileSnapshots(ctx, p, snap, node, rep)
	}
	return nil
}

// orphan is a provider resource the registry does not want, and why.
type orphan struct {
	id, tenant, why string
}

// planOrphans decides which of a provider's resources, listed at listedAt,
// to destroy: those of no sandbox the registry knows, and those of
// sandboxes already released, once the grace period has passed since the
// resource was made or its sandbox ended (a create may be being recorded,
// a release may be confirming). On a node's inventory (node not empty),
// resources of sandboxes placed on another node are orphans too: a create
// re-placed after this node was dead. It does no I/O.
func planOrphans(held map[string]domain.Resource, records map[string]store.Record, node string, listedAt time.Time, grace time.Duration) []orphan {
	var orphans []orphan
	for id, res := range held {
		rec, known := records[id]
		switch {
		case !known:
			if listedAt.Sub(res.CreatedAt) >= grace {
				orphans = append(orphans, orphan{id, "", "resource with no sandbox in the registry"})
			}
		case node != "" && rec.Node != "" && rec.Node != node:
			if listedAt.Sub(res.CreatedAt) >= grace {
				orphans = append(orphans, orphan{id, rec.Tenant, "resource of a sandbox placed on node " + rec.Node})
			}
		case rec.State.Terminal() && rec.Released:
			ended := res.CreatedAt
			if rec.EndedAt != nil && rec.EndedAt.After(ended) {
				ended = *rec.EndedAt
			}
			if listedAt.Sub(ended) >= grace {
				orphans = append(orphans, orphan{id, rec.Tenant, fmt.Sprintf("resource of a %s sandbox already released", rec.State)})
			}
		}
	}
	return orphans
}

// lostIn reports whether a sandbox that has been ready since before the
// listing is lost: the inventory lacks it, or holds only defunct remains.
func lostIn(held map[string]domain.Resource, id string) bool {
	res, ok := held[id]
	return !ok || res.Defunct
}

// destroyOrphans destroys the orphans, a few at a time, and records each
// outcome in the reconciliation history.
func (j *Janitor) destroyOrphans(ctx context.Context, p domain.Provider, orphans []orphan, rep *Report) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(j.cfg.DestroyConcurrency)
	var mu sync.Mutex
	for _, o := range orphans {
		g.Go(func() error {
			dctx, cancel := context.WithTimeout(gctx, 2*time.Minute)
			_, err := callProvider(j.log, p.Name(), "destroy", j.panicked, func() (struct{}, error) {
				return struct{}{}, p.Destroy(dctx, o.id)
			})
			cancel()
			action, msg := "orphan_destroyed", o.why
			if err != nil {
				action, msg = "orphan_destroy_failed", o.why+": "+err.Error()
				j.log.Warn("janitor: orphan destroy failed; retrying next sweep", "provider", p.Name(), "sandbox", o.id, "err", err)
			} else {
				j.log.Info("janitor: orphan destroyed", "provider", p.Name(), "sandbox", o.id, "why", o.why)
			}
			mu.Lock()
			if err != nil {
				rep.OrphansFailed++
			} else {
				rep.OrphansDestroyed++
			}
			mu.Unlock()
			j.actions.WithLabelValues(action).Inc()
			return j.store.RecordReconcile(gctx, p.Name(), o.id, o.tenant, action, msg)
		})
	}
	return g.Wait()
}

// lostSandbox is a ready sandbox whose resource is gone or defunct, and
// what the provider said of it (its Resource.Reason; empty when it holds
// nothing).
type lostSandbox struct {
	id, reason string
}

// lostMessage is what a lost sandbox's history says of it.
func lostMessage(reason string) string {
	if reason == "" {
		return "the provider no longer has this sandbox"
	}
	return "the provider reports the sandbox no longer runs: " + reason
}

// markLost ends the lost sandboxes with reason lost.
func (j *Janitor) markLost(ctx context.Context, p domain.Provider, lost []lostSandbox, rep *Report) error {
	for _, l := range lost {
		sb, ended, err := j.store.MarkLost(ctx, l.id, lostMessage(l.reason))
		if err != nil {
			return err
		}
		if ended {
			rep.Lost++
			j.actions.WithLabelValues("lost").Inc()
			j.log.Warn("janitor: sandbox lost by its provider", "provider", p.Name(), "sandbox", l.id, "tenant", sb.Tenant, "reason", l.reason)
		}
	}
	return nil
}

// watch acts, while this replica leads, on what a watching provider
// reports: each sandbox whose resource it says became defunct or vanished
// is reconciled at once (reconcileWatched), not at the next listing. What
// it reports while another replica leads is that replica's to act on.
func (j *Janitor) watch(ctx context.Context, p domain.Provider, w domain.Watcher) {
	for ev := range w.Watch(ctx) {
		if !j.isLeader.Load() {
			continue
		}
		if err := j.reconcileWatched(ctx, p, w, ev); err != nil && ctx.Err() == nil {
			j.log.Warn("janitor: reconciling a watched sandbox failed; the next listing will", "provider", p.Name(), "sandbox", ev.SandboxID, "err", err)
		}
	}
}

// reconcileWatched ends with reason lost the sandbox of a watched event
// if it is ready and its resource, looked up now, is still gone or
// defunct: an event may be stale (a create since made a new resource).
// The sandbox is checked ready before the lookup, and a ready sandbox's
// resource is never made again, so a resource found gone after that is
// gone for good.
func (j *Janitor) reconcileWatched(ctx context.Context, p domain.Provider, w domain.Watcher, ev domain.Resource) error {
	records, err := j.store.Records(ctx, []string{ev.SandboxID})
	if err != nil {
		return err
	}
	if rec, ok := records[ev.SandboxID]; !ok || rec.State != domain.StateReady {
		return nil
	}
	type lookup struct {
		res   domain.Resource
		found bool
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	now, err := callProvider(j.log, p.Name(), "lookup", j.panicked, func() (lookup, error) {
		res, found, err := w.Lookup(lctx, ev.SandboxID)
		return lookup{res, found}, err
	})
	cancel()
	if err != nil {
		return fmt.Errorf("lookup: %w", err)
	}
	if now.found && !now.res.Defunct {
		return nil
	}
	reason := ev.Reason
	if now.found && now.res.Reason != "" {
		reason = now.res.Reason
	}
	var rep Report
	return j.markLost(ctx, p, []lostSandbox{{id: ev.SandboxID, reason: reason}}, &rep)
}
