// Package lifecycle is the machinery that drives sandboxes through their
// states: the executor, which creates requested sandboxes and releases
// terminal ones, and (with the janitor) the reconciliation that keeps the
// registry and the providers in agreement.
//
// Workers coordinate only through Postgres: a sandbox is worked on by the
// process that claimed it (FOR UPDATE SKIP LOCKED), under a lease it renews
// while the provider call runs, and every result is written fenced on the
// claim's epoch, so a worker that lost its lease changes nothing.
package lifecycle

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// ExecutorConfig tunes the executor. Zero fields take the defaults noted.
type ExecutorConfig struct {
	// WorkerID names this executor in leases and events; it must be unique
	// among running replicas. Default: a random id.
	WorkerID string
	// PollInterval is how often the executor looks for work when no
	// notification woke it (retries that came due, missed notifications).
	// Default 1s.
	PollInterval time.Duration
	// Lease is how long a claim lasts without renewal; it is renewed every
	// Lease/3 while the provider call runs. A crashed executor's work is
	// picked up by another one after at most Lease. Default 15s.
	Lease time.Duration
	// Concurrency bounds the create calls running at once per provider.
	// Default 16.
	Concurrency int
	// ReleaseConcurrency bounds the destroy calls running at once per
	// provider. Default 8.
	ReleaseConcurrency int
	// MaxAttempts bounds the create attempts per sandbox for errors the
	// provider marks retryable. Default 5.
	MaxAttempts int
	// RetryBackoff is the wait before the second attempt; it doubles with
	// each further attempt up to MaxBackoff. Default 500ms.
	RetryBackoff time.Duration
	// MaxBackoff caps the retry backoff, for creates and releases. Default 30s.
	MaxBackoff time.Duration
	// DestroyTimeout bounds one destroy call. Default 2m.
	DestroyTimeout time.Duration
	// Node is the node this executor runs on (NODE_ID). Sandboxes of
	// host-bound providers are placed on the node whose executor claims
	// their create; only that node's executors release them. Empty: every
	// sandbox is any executor's, as on a single host.
	Node string
	// MaxLifetime is the server's cap on a sandbox's lifetime
	// (MAX_LIFETIME): a create tells the provider its sandbox's end by
	// creation plus this (domain.CreateSpec.EndBy). Zero: none is told.
	MaxLifetime time.Duration
	// SnapshotConcurrency bounds the manual snapshot calls running at once
	// per provider. Default 4.
	SnapshotConcurrency int
	// ExitSnapshotTimeout bounds an exit snapshot: the release of a
	// sandbox created with on_end "snapshot" waits at most this long for
	// it (EXIT_SNAPSHOT_TIMEOUT). Default 2m.
	ExitSnapshotTimeout time.Duration
	// SnapshotRetention sets an exit snapshot's expires_at
	// (SNAPSHOT_RETENTION); zero: kept until deleted.
	SnapshotRetention time.Duration
	// SnapshotMaxCount and SnapshotMaxBytes are the server's snapshot
	// quota per tenant, which exit snapshots count against too; zero: no
	// limit.
	SnapshotMaxCount int
	SnapshotMaxBytes int64
}

// Executor defaults, for zero ExecutorConfig fields.
const (
	DefaultPollInterval       = time.Second
	DefaultLease              = 15 * time.Second
	DefaultConcurrency        = 16
	DefaultReleaseConcurrency = 8
	DefaultMaxAttempts        = 5
	DefaultRetryBackoff       = 500 * time.Millisecond
	DefaultMaxBackoff         = 30 * time.Second
	DefaultDestroyTimeout     = 2 * time.Minute
	// DefaultSnapshotConcurrency and DefaultExitSnapshotTimeout are the
	// snapshot defaults.
	DefaultSnapshotConcurrency = 4
	DefaultExitSnapshotTimeout = 2 * time.Minute
)

func (c ExecutorConfig) withDefaults() ExecutorConfig {
	if c.WorkerID == "" {
		c.WorkerID = "executor-" + randomSuffix()
	}
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.ReleaseConcurrency = cmp.Or(c.ReleaseConcurrency, DefaultReleaseConcurrency)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, DefaultMaxBackoff)
	c.DestroyTimeout = cmp.Or(c.DestroyTimeout, DefaultDestroyTimeout)
	c.SnapshotConcurrency = cmp.Or(c.SnapshotConcurrency, DefaultSnapshotConcurrency)
	c.ExitSnapshotTimeout = cmp.Or(c.ExitSnapshotTimeout, DefaultExitSnapshotTimeout)
	return c
}

// workStore is what the executor needs from the registry.
type workStore interface {
	Now() time.Time
	Sandbox(ctx context.Context, id string) (domain.Sandbox, error)
	ClaimCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error)
	ClaimNewCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, since time.Time, share store.Share) ([]store.Claim, error)
	ClaimReleases(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error)
	NodeLoad(ctx context.Context, provider, node string) (store.Load, error)
	RenewLease(ctx context.Context, id string, epoch int64, worker string, lease time.Duration) (domain.State, error)
	SetReady(ctx context.Context, id string, epoch int64, res domain.Resource) error
	MarkFailed(ctx context.Context, id string, epoch int64, actor domain.Actor, message string) (domain.Sandbox, error)
	Unclaim(ctx context.Context, id string, epoch int64, at time.Time, lastErr string, refund bool) error
	MarkReleased(ctx context.Context, id string, epoch int64) error
	ReleaseFailed(ctx context.Context, id string, epoch int64, retryAt time.Time, cause string) error
	ClaimTransitions(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error)
	FinishTransition(ctx context.Context, id string, epoch int64, from domain.State) (domain.Sandbox, error)
	RevertTransition(ctx context.Context, id string, epoch int64, from domain.State, cause string) (domain.Sandbox, error)
	FailTransition(ctx context.Context, id string, epoch int64, from domain.State, actor domain.Actor, cause string) (domain.Sandbox, error)
	UnclaimTransition(ctx context.Context, id string, epoch int64, at time.Time, lastErr string) error
	FailSnapshotsOf(ctx context.Context, sourceID string, epoch int64) (int, error)
	ClaimSnapshots(ctx context.Context, provider, node, worker string, limit int, lease time.Duration) ([]store.Claim, error)
	FinishSnapshot(ctx context.Context, id string, epoch, size int64, releaseLease bool) (domain.Snapshot, error)
	FailSnapshot(ctx context.Context, id string, epoch int64, actor domain.Actor, cause string, releaseLease bool) (domain.Snapshot, error)
	HandBackSnapshot(ctx context.Context, id string, epoch int64, lastErr string) error
	EnsureExitSnapshot(ctx context.Context, sb domain.Sandbox, epoch int64, timeout, retention time.Duration, maxCount int, maxBytes int64) (domain.Snapshot, error)
}

// notifier wakes the executor when there may be work, and tells an in-flight
// create that its sandbox changed.
type notifier interface {
	Subscribe() (<-chan domain.Change, func())
	SubscribeSandbox(id string) (<-chan domain.Change, func())
}

// Executor creates requested sandboxes, pauses and resumes those asked to
// be (providers with domain.Pauser), and releases terminal ones. Start it
// and stop it as every worker of the package starts and stops (lifetime).
type Executor struct {
	cfg       ExecutorConfig
	store     workStore
	notes     notifier
	providers map[string]domain.Provider
	log       *slog.Logger
	metrics   *Metrics

	// creates, releases and transitions (pauses and resumes: only for
	// providers that have them) say how to claim and run each kind of
	// work, per provider.
	creates, releases, transitions map[string]claimSpec
	// snapshots says how to claim and take manual snapshots, for providers
	// with domain.Snapshotter.
	snapshots map[string]claimSpec
	// drainedAt is, per provider, when a full claim last left no claimable
	// sandbox behind (minus claimSkew): every sandbox requested since has
	// a later created_at. Without an entry the next create claim is full.
	// Only the loop goroutine uses it.
	drainedAt map[string]time.Time

	// wakeCreates and wakeReleases say that a worker of the kind finished:
	// look for more of that work.
	wakeCreates, wakeReleases, wakeTransitions chan struct{}
	wakeSnapshots                              chan struct{}

	// lifetime's context is the work's: Stop cancels it last, and the
	// work in flight hands its sandboxes back.
	lifetime
	stopOnce   sync.Once
	stop       chan struct{}      // closed by Stop: claim nothing more
	cancelLoop context.CancelFunc // cancels claiming; set before Started closes
	inFlight   sync.WaitGroup
}

// NewExecutor returns an executor for the given providers.
func NewExecutor(cfg ExecutorConfig, st workStore, notes notifier, providers []domain.Provider, log *slog.Logger, metrics *Metrics) *Executor {
	cfg = cfg.withDefaults()
	e := &Executor{
		cfg:             cfg,
		store:           st,
		notes:           notes,
		providers:       make(map[string]domain.Provider, len(providers)),
		log:             log.With("component", "executor", "worker", cfg.WorkerID),
		metrics:         metrics,
		creates:         make(map[string]claimSpec),
		releases:        make(map[string]claimSpec),
		transitions:     make(map[string]claimSpec),
		snapshots:       make(map[string]claimSpec),
		wakeSnapshots:   make(chan struct{}, 1),
		drainedAt:       make(map[string]time.Time),
		wakeCreates:     make(chan struct{}, 1),
		wakeReleases:    make(chan struct{}, 1),
		wakeTransitions: make(chan struct{}, 1),
		stop:            make(chan struct{}),
	}
	for _, p := range providers {
		// A host-bound provider's work is this node's share of it.
		node := ""
		if domain.IsHostBound(p) {
			node = cfg.Node
		}
		e.providers[p.Name()] = p
		creates := newClaimSpec("create", cfg.Concurrency, e.wakeCreates, e.create)
		creates.claim = func(ctx context.Context, provider, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error) {
			return e.claimCreates(ctx, provider, node, worker, limit, lease, share, creates.backlog)
		}
		e.creates[p.Name()] = creates
		releases := newClaimSpec("release", cfg.ReleaseConcurrency, e.wakeReleases, e.release)
		releases.claim = func(ctx context.Context, provider, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error) {
			return e.store.ClaimReleases(ctx, provider, node, worker, limit, lease, share)
		}
		e.releases[p.Name()] = releases
		if domain.CanPause(p) {
			transitions := newClaimSpec("transition", cfg.Concurrency, e.wakeTransitions, e.transition)
			transitions.claim = func(ctx context.Context, provider, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error) {
				return e.store.ClaimTransitions(ctx, provider, node, worker, limit, lease, share)
			}
			e.transitions[p.Name()] = transitions
		}
		if domain.CanSnapshot(p) {
			snapshots := newClaimSpec("snapshot", cfg.SnapshotConcurrency, e.wakeSnapshots, e.snapshot)
			snapshots.claim = func(ctx context.Context, provider, worker string, limit int, lease time.Duration, _ store.Share) ([]store.Claim, error) {
				return e.store.ClaimSnapshots(ctx, provider, node, worker, limit, lease)
			}
			e.snapshots[p.Name()] = snapshots
		}
	}
	return e
}

// WorkerID returns the id the executor claims work under.
func (e *Executor) WorkerID() string { return e.cfg.WorkerID }

// Start begins claiming work in the background. ctx bounds the executor's
// whole life; Stop ends it gracefully. Its work (the lifetime's run) is
// the claiming loop and then the work in flight when the loop ended.
func (e *Executor) Start(ctx context.Context) {
	_ = e.start(ctx, func(ctx context.Context) (func(), error) {
		// The loop's own context ends as soon as Stop is called, so that
		// the loop waits for nothing more; a claim in flight then still
		// has up to claimTimeout to answer (see claim).
		loopCtx, cancelLoop := context.WithCancel(ctx)
		e.cancelLoop = cancelLoop
		notes, unsubscribe := e.notes.Subscribe()
		return func() {
			defer cancelLoop()
			e.loop(loopCtx, ctx, notes)
			unsubscribe()
			e.inFlight.Wait()
		}, nil
	})
}

// Stop stops claiming work and waits for in-flight provider calls to finish
// until ctx is done; then it cancels the rest, which hand their sandboxes
// back (lease released) for another executor to pick up, and waits for that
// (each hand-back is bounded). Stop of an executor never started returns at
// once.
func (e *Executor) Stop(ctx context.Context) {
	select {
	case <-e.Started():
	default:
		e.lifetime.Stop(ctx) // it never ran, and now never will
		return
	}
	e.stopOnce.Do(func() {
		close(e.stop)
		e.cancelLoop()
	})
	select {
	case <-e.Stopped():
	case <-ctx.Done():
		e.log.Warn("executor: shutdown deadline passed; handing back in-flight work")
	}
	e.lifetime.Stop(context.WithoutCancel(ctx))
}

// loop claims work until ctx is done; the work it starts runs under workCtx.
func (e *Executor) loop(ctx, workCtx context.Context, notes <-chan domain.Change) {
	ticker := time.NewTicker(e.cfg.PollInterval)
	defer ticker.Stop()
	want := everything
	for {
		e.dispatch(ctx, workCtx, want)
		want = wanted{}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.stop:
				return
			case n := <-notes:
				want = want.or(wantsWork(n))
				// Take every note already waiting: a burst of requests
				// is one dispatch.
				for more := true; more; {
					select {
					case n := <-notes:
						want = want.or(wantsWork(n))
					default:
						more = false
					}
				}
				if want.creates || want.releases || want.transitions || want.snapshots {
					break wait
				}
			case <-e.wakeCreates:
				want.creates = true
				break wait
			case <-e.wakeTransitions:
				want.transitions = true
				break wait
			case <-e.wakeReleases:
				want.releases = true
				break wait
			case <-e.wakeSnapshots:
				want.snapshots = true
				break wait
			case <-ticker.C:
				want = everything
				break wait
			}
		}
	}
}

// wanted is the work a dispatch looks for: creates, releases, pauses and
// resumes (transitions), and whether the creates may be any claimable one
// (full) or only new requests.
//
// Snapshots to take announce nothing: the poll finds them, and so does a
// wake-up that may mean a sandbox's lease ended (a snapshot settled, a
// pause or resume did).
type wanted struct{ creates, releases, transitions, snapshots, full bool }

var everything = wanted{creates: true, releases: true, transitions: true, snapshots: true, full: true}

func (w wanted) or(o wanted) wanted {
	return wanted{creates: w.creates || o.creates, releases: w.releases || o.releases,
		transitions: w.transitions || o.transitions, snapshots: w.snapshots || o.snapshots, full: w.full || o.full}
}

// wantsWork says what work a notification may mean. A new request is a
// create to claim; a sandbox ended but not released is a release. A
// creating sandbox that becomes claimable again (a retry that came due, a
// lapsed lease, one handed back at shutdown) announces nothing at that
// moment, so the poll finds those. A change with no id means anything may
// have happened (the notifier reconnected).
func wantsWork(n domain.Change) wanted {
	switch {
	case n.ID == "":
		return everything
	case n.State == domain.SnapshotChanged:
		// A snapshot settled and its sandbox's lease ended: another
		// snapshot of that sandbox may be claimable now.
		return wanted{snapshots: true}
	case n.State == domain.StateRequested:
		return wanted{creates: true}
	case n.State.Transitioning():
		// A pause or resume asked for; one handed back for a retry
		// announces nothing, like a create's, and the poll finds it.
		return wanted{transitions: true}
	case n.State.Terminal() && !n.Released:
		return wanted{releases: true}
	}
	return wanted{}
}

// dispatch claims as much of the wanted work as there are free slots, per
// provider. A full dispatch looks at every claimable create; the others,
// woken by new requests or by freed slots, only at those requested since
// the last full one drained the queue (see claimCreates).
func (e *Executor) dispatch(ctx, workCtx context.Context, want wanted) {
	for name, p := range e.providers {
		if ctx.Err() != nil {
			return
		}
		if want.creates {
			if want.full {
				// Kept until a full claim runs, even if the slots are
				// busy now: the next claim, whatever wakes it, is full.
				delete(e.drainedAt, name)
			}
			e.claim(ctx, workCtx, p, e.creates[name])
		}
		if want.releases {
			e.claim(ctx, workCtx, p, e.releases[name])
		}
		if spec, ok := e.transitions[name]; ok && want.transitions {
			e.claim(ctx, workCtx, p, spec)
		}
		if spec, ok := e.snapshots[name]; ok && want.snapshots {
			e.claim(ctx, workCtx, p, spec)
		}
	}
}

// claimSkew is how far the clocks of replicas (which stamp created_at) may
// disagree before a quick claim misses a sandbox until the next full one.
const claimSkew = 5 * time.Second

// claimCreates claims creates for the provider, and marks backlog when the
// node's room, not the queue, cut the claim short. The claim walks the index
// of pending sandboxes oldest first, and under churn that index's oldest end is
// full of entries for sandboxes that have long moved on, until a vacuum: a
// full claim reads through all of them. So only the poll (which also finds
// retries that came due and lapsed leases, as before) claims in full; a
// wake-up by a new request claims among the sandboxes requested after the
// last full claim that left none behind, starting past the dead entries.
// A poll's full claim that finds every slot busy is not dropped: the next
// claim, whatever woke it, is full. And a quick claim that fills every slot
// means a backlog, which full claims serve oldest first. So anything a quick
// claim cannot see waits for at most a poll interval and a free slot.
//
// For a host-bound provider on several nodes, node is this node and the
// claim is bounded by placeLimit first.
func (e *Executor) claimCreates(ctx context.Context, provider, node, worker string, limit int, lease time.Duration, share store.Share, backlog *atomic.Bool) ([]store.Claim, error) {
	if node != "" {
		placed := e.placeLimit(ctx, provider, node, limit)
		if placed < limit {
			// The node is full, not the queue empty: a call's end
			// makes room.
			backlog.Store(true)
		}
		if limit = placed; limit == 0 {
			return nil, nil
		}
	}
	if since, drained := e.drainedAt[provider]; drained {
		claims, err := e.store.ClaimNewCreates(ctx, provider, node, worker, limit, lease, since, share)
		if err == nil && (len(claims) == limit || capped(share, claims)) {
			delete(e.drainedAt, provider)
		}
		return claims, err
	}
	start := e.store.Now()
	claims, err := e.store.ClaimCreates(ctx, provider, node, worker, limit, lease, share)
	if err != nil {
		return claims, err
	}
	if len(claims) < limit && !capped(share, claims) {
		e.drainedAt[provider] = start.Add(-claimSkew)
	} else {
		delete(e.drainedAt, provider) // a backlog: quick claims would serve newer ones first
	}
	return claims, nil
}

// capped reports whether a claim left work behind for a tenant's share
// rather than for want of work: some tenant holds its whole share now. A
// short claim then says nothing about the queue being drained.
func capped(share store.Share, claims []store.Claim) bool {
	if share.Cap <= 0 {
		return false
	}
	held := maps.Clone(share.Held)
	if held == nil {
		held = map[string]int{}
	}
	for _, c := range claims {
		held[c.Sandbox.Tenant]++
	}
	for _, n := range held {
		if n >= share.Cap {
			return true
		}
	}
	return false
}

// Placement of a host-bound provider's creates over several live nodes.
const (
	// placeSpread is how many more live sandboxes of the provider than the
	// least loaded live node a node may hold and still claim creates.
	placeSpread = 4
	// placeWait is how long a request may wait for the least loaded nodes
	// before any node claims it (they may be busy, or unable to create).
	placeWait = 3 * time.Second
)

// placeLimit bounds a create claim of this node so that creates go to the
// least loaded live nodes: while other live nodes have the provider, a node
// claims only as many as keep it within placeSpread of the least loaded
// one, unless a request has waited placeWait; a node where the provider is
// unavailable claims none while another has it. Without a load reading it
// does not hold creates back.
func (e *Executor) placeLimit(ctx context.Context, provider, node string, limit int) int {
	l, err := e.store.NodeLoad(ctx, provider, node)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("executor: node load unknown; claiming without placement", "provider", provider, "err", err)
		}
		return limit
	}
	switch {
	case !l.Serves && l.Nodes > 0:
		return 0 // the provider is unavailable here and available elsewhere
	case l.Nodes <= 1 || (!l.OldestRequest.IsZero() && e.store.Now().Sub(l.OldestRequest) >= placeWait):
		return limit
	}
	return max(0, min(limit, l.Least+placeSpread-l.Own))
}

// claimSpec is one kind of work (create or release) for one provider.
type claimSpec struct {
	kind string
	// slots holds a token per call in flight; its capacity bounds them.
	slots chan struct{}
	// wake is signalled when a call ends and backlog is set, so the loop
	// claims more.
	wake chan struct{}
	// backlog says a claim may have left work behind: it filled every
	// free slot, found none free, or stopped at a tenant's share or at
	// the node's room (claimCreates). Only then does a call's end wake
	// the loop; otherwise new work announces itself and the poll finds
	// the rest, and a wake-up would be a claim that finds nothing (one
	// per create, unloaded).
	backlog *atomic.Bool
	// held counts the slots each tenant holds, for sharing them fairly.
	held *tenantSlots
	// claim claims up to limit sandboxes under a lease, within share.
	claim func(ctx context.Context, provider, worker string, limit int, lease time.Duration, share store.Share) ([]store.Claim, error)
	// work runs one claimed sandbox to its end.
	work func(context.Context, domain.Provider, store.Claim)
}

// newClaimSpec is a claimSpec of kind with n slots, shared among tenants;
// its claim is the caller's to set.
func newClaimSpec(kind string, n int, wake chan struct{}, work func(context.Context, domain.Provider, store.Claim)) claimSpec {
	return claimSpec{kind: kind, slots: make(chan struct{}, n), held: newTenantSlots(n),
		backlog: new(atomic.Bool), wake: wake, work: work}
}

// claim claims as much of spec's work as it has free slots for and starts
// each claimed sandbox's work under workCtx.
func (e *Executor) claim(ctx, workCtx context.Context, p domain.Provider, spec claimSpec) {
	kind, slots, wake := spec.kind, spec.slots, spec.wake
	free := cap(slots) - len(slots)
	if free == 0 {
		spec.backlog.Store(true)
		return
	}
	// The claim is read to its answer even if Stop cancels ctx meanwhile:
	// a claim that committed but whose answer was dropped would hold its
	// sandboxes, with nobody working on them, until their lease lapsed. It
	// is bounded, so an unresponsive Postgres holds Stop up no longer than
	// claimTimeout. What it claims starts as usual, and Stop hands it back.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	share := spec.held.share()
	claims, err := spec.claim(claimCtx, p.Name(), e.cfg.WorkerID, free, e.cfg.Lease, share)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error("executor: claim failed", "provider", p.Name(), "kind", kind, "err", err)
		}
		return
	}
	// Before any of the work starts, so that the first call to end sees it.
	if len(claims) == free || capped(share, claims) {
		spec.backlog.Store(true)
	}
	for _, c := range claims {
		slots <- struct{}{} // never blocks: we claimed at most free
		tenant := c.Sandbox.Tenant
		spec.held.take(tenant)
		e.metrics.Claims.WithLabelValues(p.Name(), kind).Inc()
		if kind == "create" && c.From == domain.StateRequested {
			e.metrics.ClaimLatency.WithLabelValues(p.Name()).Observe(e.store.Now().Sub(c.Sandbox.CreatedAt).Seconds())
		}
		e.inFlight.Add(1)
		go func() {
			defer e.inFlight.Done()
			defer func() {
				spec.held.give(tenant)
				<-slots
				if spec.backlog.Swap(false) {
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}()
			gauge := e.metrics.InFlight.WithLabelValues(p.Name(), kind)
			gauge.Inc()
			defer gauge.Dec()
			spec.work(workCtx, p, c)
		}()
	}
}

// tenantSlots counts the slots of one kind of work each tenant holds. A
// tenant may hold all but a quarter of them (all of one or two): the rest
// stay free for other tenants, so that one tenant's slow creates delay
// another's by no more than the wait for a free slot among those.
type tenantSlots struct {
	capacity int
	mu       sync.Mutex
	held     map[string]int
}

func newTenantSlots(slots int) *tenantSlots {
	return &tenantSlots{capacity: max(1, slots-slots/4), held: map[string]int{}}
}

// share is the claim's view of the slots held.
func (t *tenantSlots) share() store.Share {
	t.mu.Lock()
	defer t.mu.Unlock()
	return store.Share{Cap: t.capacity, Held: maps.Clone(t.held)}
}

func (t *tenantSlots) take(tenant string) {
	t.mu.Lock()
	t.held[tenant]++
	t.mu.Unlock()
}

func (t *tenantSlots) give(tenant string) {
	t.mu.Lock()
	if t.held[tenant]--; t.held[tenant] <= 0 {
		delete(t.held, tenant)
	}
	t.mu.Unlock()
}

// Reasons an in-flight create's context is cancelled.
var (
	errSandboxEnded = errors.New("sandbox ended while being created")
	errLeaseLost    = errors.New("lease lost to another executor")
)

// create runs one claimed create to its end: ready, failed, retry later, or
// cancelled and released. runCreate makes the provider call and decides
// what came of it; recordCreate writes that down.
func (e *Executor) create(ctx context.Context, p domain.Provider, c store.Claim) {
	sb := c.Sandbox
	log := lazyWith(e.log, slog.String("sandbox", sb.ID), slog.String("provider", p.Name()),
		slog.Int64("epoch", sb.Epoch), slog.Int("attempt", sb.Attempts))
	e.recordCreate(ctx, p, sb, log, e.runCreate(ctx, p, sb, log))
}

// createOutcome is what became of one create attempt.
type createOutcome int

const (
	// createReady: the provider made the sandbox; record it ready.
	createReady createOutcome = iota
	// createCancelled: the sandbox ended meanwhile; release what the call
	// may have made, if the claim is still ours.
	createCancelled
	// createLeaseLost: another executor owns the sandbox now; touch nothing.
	createLeaseLost
	// createHandBack: this executor is stopping; hand the sandbox back.
	createHandBack
	// createRetry: a transient failure; try again at retryAt.
	createRetry
	// createFailed: it will not succeed; record it failed and release.
	createFailed
)

// createResult is a create attempt's outcome, with what recording it needs.
type createResult struct {
	outcome createOutcome
	res     domain.Resource // createReady
	err     error           // the provider's error, if any
	retryAt time.Time       // createRetry
	message string          // createFailed: the sandbox's error
	took    time.Duration
}

// runCreate makes the provider call for a claimed sandbox (unless it is too
// late or has had its attempts), renewing the claim's lease meanwhile and
// cancelling the call if the sandbox ends or the lease is lost.
func (e *Executor) runCreate(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger) createResult {
	if !e.store.Now().Before(sb.CreateDeadline) {
		return createResult{outcome: createFailed, message: "creation deadline passed before an attempt could complete"}
	}
	if sb.Attempts > e.cfg.MaxAttempts {
		return createResult{outcome: createFailed, message: fmt.Sprintf("gave up after %d attempts", e.cfg.MaxAttempts)}
	}

	start := time.Now()
	res, c := leasedCall(ctx, e, p, sb, log, "create", sb.CreateDeadline, func(ctx context.Context) (domain.Resource, error) {
		return p.Create(ctx, domain.CreateSpec{
			SandboxID: sb.ID, Tenant: sb.Tenant, Labels: sb.Labels, Env: sb.Env, Setup: sb.Setup, Params: sb.Params,
			EndBy: e.endBy(sb), FromSnapshot: sb.FromSnapshot, Epoch: sb.Epoch,
		})
	})
	c.attempts, c.maxAttempts = sb.Attempts, e.cfg.MaxAttempts
	c.retryAt = e.store.Now().Add(backoff(e.cfg.RetryBackoff, e.cfg.MaxBackoff, sb.Attempts))
	c.deadline = sb.CreateDeadline
	r := classifyCreate(c)
	r.res, r.took = res, time.Since(start)
	return r
}

// endBy is the latest sb may live, or zero without a MaxLifetime.
func (e *Executor) endBy(sb domain.Sandbox) time.Time {
	if e.cfg.MaxLifetime <= 0 {
		return time.Time{}
	}
	return sb.CreatedAt.Add(e.cfg.MaxLifetime)
}

// leasedCall makes a provider call (op, for logs and metrics) for the
// claimed sandbox sb: call runs with a context that ends at deadline, when
// the sandbox ends or when its lease is lost, and the lease is renewed
// meanwhile. It returns what call returned, and how the call ended as far
// as judgeCall needs it (the caller adds attempts, retryAt and deadline).
func leasedCall[T any](ctx context.Context, e *Executor, p domain.Provider, sb domain.Sandbox, log *slog.Logger, op string, deadline time.Time, call func(context.Context) (T, error)) (T, createCall) {
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadlineCtx, cancelDeadline := context.WithDeadline(callCtx, deadline)
	defer cancelDeadline()
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		e.keepLease(deadlineCtx, sb, cancel, true)
	}()

	start := time.Now()
	v, err := callProvider(log, p.Name(), op, e.panicked(p.Name(), op), func() (T, error) {
		return call(deadlineCtx)
	})
	c := createCall{err: err, cause: context.Cause(callCtx), stopping: ctx.Err() != nil,
		deadlinePassed: errors.Is(deadlineCtx.Err(), context.DeadlineExceeded)}
	cancelDeadline()
	cancel(nil)
	<-keeperDone
	e.observe(p.Name(), op, start, err)
	return v, c
}

// createCall is what judgeCall judges a finished provider call (a create,
// a pause, a resume) by.
type createCall struct {
	err            error // the provider's
	cause          error // why the call's context was cancelled, if it was
	stopping       bool  // the executor is stopping
	deadlinePassed bool  // the call's deadline ended it
	attempts       int
	maxAttempts    int       // 0: no limit
	retryAt        time.Time // when a retry would run
	deadline       time.Time // the call's deadline
}

// verdict is what became of a provider call, whichever call it was.
type verdict int

const (
	verdictDone      verdict = iota // it succeeded
	verdictEnded                    // the sandbox ended meanwhile
	verdictLeaseLost                // another executor owns the sandbox now
	verdictHandBack                 // this executor is stopping
	verdictRetry                    // a transient failure; try again at retryAt
	verdictRefused                  // it will not succeed: a lasting error, or the attempts ran out
	verdictDeadline                 // its deadline passed, or would before a retry
)

// judgment is a call's verdict, when to retry (verdictRetry) and what to
// record (verdictRefused, verdictDeadline).
type judgment struct {
	verdict verdict
	retryAt time.Time
	message string
}

// judgeCall decides what became of a provider call; deadline names its
// deadline in messages ("creation", "pause"). It does no I/O.
func judgeCall(deadline string, c createCall) judgment {
	switch {
	case c.err == nil:
		return judgment{verdict: verdictDone}
	case errors.Is(c.cause, errSandboxEnded):
		return judgment{verdict: verdictEnded}
	case errors.Is(c.cause, errLeaseLost):
		return judgment{verdict: verdictLeaseLost}
	case c.stopping:
		return judgment{verdict: verdictHandBack}
	case c.deadlinePassed:
		return judgment{verdict: verdictDeadline, message: deadline + " deadline passed: " + c.err.Error()}
	case domain.IsRetryable(c.err) && (c.maxAttempts == 0 || c.attempts < c.maxAttempts):
		if c.retryAt.After(c.deadline) {
			return judgment{verdict: verdictDeadline, message: deadline + " deadline would pass before a retry: " + c.err.Error()}
		}
		return judgment{verdict: verdictRetry, retryAt: c.retryAt}
	default:
		return judgment{verdict: verdictRefused, message: c.err.Error()}
	}
}

// createOutcomes is each verdict's create outcome.
var createOutcomes = [...]createOutcome{
	verdictDone: createReady, verdictEnded: createCancelled, verdictLeaseLost: createLeaseLost,
	verdictHandBack: createHandBack, verdictRetry: createRetry, verdictRefused: createFailed, verdictDeadline: createFailed,
}

// classifyCreate decides what became of a create call. It does no I/O.
func classifyCreate(c createCall) createResult {
	j := judgeCall("creation", c)
	return createResult{outcome: createOutcomes[j.verdict], err: c.err, retryAt: j.retryAt, message: j.message}
}

// recordCreate writes a create attempt's outcome, fenced on sb's epoch. Its
// writes happen even while the executor stops: they hand the sandbox back
// or record its result.
func (e *Executor) recordCreate(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger, r createResult) {
	wctx, cancel := detached(ctx)
	defer cancel()
	switch r.outcome {
	case createReady:
		if err := e.store.SetReady(wctx, sb.ID, sb.Epoch, r.res); err != nil {
			if errors.Is(err, domain.ErrFenced) {
				log.Info("executor: created after the sandbox ended or was reclaimed; releasing if still ours")
				e.releaseIfOurs(ctx, p, sb, log)
				return
			}
			log.Error("executor: recording ready failed; the lease will lapse and the create is retried", "err", err)
			return
		}
		log.Info("executor: sandbox ready", "took", r.took)
	case createCancelled:
		log.Info("executor: create cancelled: sandbox ended", "err", r.err)
		e.releaseIfOurs(ctx, p, sb, log)
	case createLeaseLost:
		log.Warn("executor: create abandoned: lease lost", "err", r.err)
	case createHandBack:
		// Hand the sandbox back now rather than after the lease.
		e.handBack(wctx, sb, log)
		log.Info("executor: create handed back at shutdown")
	case createRetry:
		log.Warn("executor: create failed; retrying", "err", r.err, "retry_at", r.retryAt)
		e.retryLater(wctx, sb, r.retryAt, r.err, log)
	case createFailed:
		e.fail(ctx, p, sb, log, r.message)
	}
}

// handBack ends the claim at once and refunds its attempt, so that any
// executor may claim the sandbox again now.
func (e *Executor) handBack(ctx context.Context, sb domain.Sandbox, log *slog.Logger) {
	const refund = true
	if err := e.store.Unclaim(ctx, sb.ID, sb.Epoch, e.store.Now(), "", refund); err != nil && !errors.Is(err, domain.ErrFenced) {
		log.Error("executor: handing back failed; the lease will lapse", "err", err)
	}
}

// retryLater ends the claim and makes the sandbox claimable again at
// retryAt, recording why the attempt failed; the attempt counts.
func (e *Executor) retryLater(ctx context.Context, sb domain.Sandbox, retryAt time.Time, cause error, log *slog.Logger) {
	const refund = false
	if err := e.store.Unclaim(ctx, sb.ID, sb.Epoch, retryAt, cause.Error(), refund); err != nil && !errors.Is(err, domain.ErrFenced) {
		log.Error("executor: scheduling retry failed; the lease will lapse", "err", err)
	}
}

// claimTimeout bounds a claim statement (see claim).
const claimTimeout = 3 * time.Second

// resultWriteTimeout bounds a write of a provider call's result.
const resultWriteTimeout = 10 * time.Second

// detached returns a context for writing a provider call's result: not
// cancelled with ctx (the executor may be stopping; the result must still
// be recorded), but bounded.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), resultWriteTimeout)
}

// fail records a creation that will not succeed, then releases whatever the
// attempts may have left at the provider.
func (e *Executor) fail(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger, msg string) {
	wctx, cancel := detached(ctx)
	defer cancel()
	if _, err := e.store.MarkFailed(wctx, sb.ID, sb.Epoch, domain.ActorExecutor, msg); err != nil {
		if errors.Is(err, domain.ErrFenced) {
			e.releaseIfOurs(ctx, p, sb, log)
			return
		}
		log.Error("executor: recording failure failed; the lease will lapse", "err", err)
		return
	}
	log.Warn("executor: sandbox failed", "error", msg)
	e.destroy(ctx, p, sb, log)
}

// releaseIfOurs releases the sandbox if it ended while our claim was the
// latest one. If another executor reclaimed it, the resource is theirs.
func (e *Executor) releaseIfOurs(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger) {
	wctx, cancel := detached(ctx)
	defer cancel()
	cur, err := e.store.Sandbox(wctx, sb.ID)
	if err != nil {
		log.Error("executor: re-reading sandbox failed; the release workers will handle it", "err", err)
		return
	}
	if cur.Epoch != sb.Epoch || !cur.State.Terminal() || cur.Released {
		return
	}
	e.destroy(ctx, p, sb, log)
}

// release is the work of a release claim.
func (e *Executor) release(ctx context.Context, p domain.Provider, c store.Claim) {
	sb := c.Sandbox
	log := lazyWith(e.log, slog.String("sandbox", sb.ID), slog.String("provider", p.Name()), slog.Int64("epoch", sb.Epoch))
	keepCtx, stopKeeping := context.WithCancel(ctx)
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		e.keepLease(keepCtx, sb, nil, false)
	}()
	defer func() {
		stopKeeping()
		<-keeperDone
	}()
	if domain.CanSnapshot(p) {
		e.failPendingSnapshots(ctx, sb, log)
	}
	if takesExitSnapshot(p, sb) && !e.exitSnapshot(ctx, p, sb, log) {
		// Interrupted: hand the release back for another worker, which
		// takes the exit snapshot up again.
		wctx, cancel := detached(ctx)
		defer cancel()
		if err := e.store.ReleaseFailed(wctx, sb.ID, sb.Epoch, e.store.Now(), "exit snapshot interrupted"); err != nil && !errors.Is(err, domain.ErrFenced) {
			log.Error("executor: handing the release back failed; the lease will lapse", "err", err)
		}
		return
	}
	e.destroy(ctx, p, sb, log)
}

// destroy asks the provider to destroy the sandbox's resources and records
// the outcome, fenced on sb's epoch.
func (e *Executor) destroy(ctx context.Context, p domain.Provider, sb domain.Sandbox, log *slog.Logger) {
	dctx, cancel := context.WithTimeout(ctx, e.cfg.DestroyTimeout)
	start := time.Now()
	_, err := callProvider(log, p.Name(), "destroy", e.panicked(p.Name(), "destroy"), func() (struct{}, error) {
		return struct{}{}, p.Destroy(dctx, sb.ID)
	})
	cancel()
	e.observe(p.Name(), "destroy", start, err)

	wctx, wcancel := detached(ctx)
	defer wcancel()
	if err != nil {
		retryAt := e.store.Now()
		if ctx.Err() == nil {
			retryAt = retryAt.Add(backoff(e.cfg.RetryBackoff, e.cfg.MaxBackoff, sb.ReleaseAttempts))
			log.Warn("executor: destroy failed; will retry", "err", err, "retry_at", retryAt)
		}
		if err := e.store.ReleaseFailed(wctx, sb.ID, sb.Epoch, retryAt, err.Error()); err != nil && !errors.Is(err, domain.ErrFenced) {
			log.Error("executor: recording destroy failure failed; the lease will lapse", "err", err)
		}
		return
	}
	if err := e.store.MarkReleased(wctx, sb.ID, sb.Epoch); err != nil {
		if errors.Is(err, domain.ErrFenced) {
			log.Info("executor: release already recorded elsewhere")
			return
		}
		log.Error("executor: recording release failed; it will be released again", "err", err)
		return
	}
	log.Info("executor: sandbox released")
}

// keepLease renews the claim's lease every Lease/3 until ctx is done. For a
// create (onEnd set), it cancels the call when the sandbox ends or the lease
// is lost.
func (e *Executor) keepLease(ctx context.Context, sb domain.Sandbox, onEnd context.CancelCauseFunc, watchEnd bool) {
	var notes <-chan domain.Change
	if watchEnd {
		ch, unsubscribe := e.notes.SubscribeSandbox(sb.ID)
		defer unsubscribe()
		notes = ch
	}
	ticker := time.NewTicker(e.cfg.Lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-notes:
			if n.ID != "" && !n.State.Terminal() {
				continue
			}
		case <-ticker.C:
		}
		state, err := e.store.RenewLease(ctx, sb.ID, sb.Epoch, e.cfg.WorkerID, e.cfg.Lease)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, domain.ErrFenced):
			if onEnd != nil {
				onEnd(errLeaseLost)
			}
			return
		case err != nil:
			e.log.Warn("executor: lease renewal failed; retrying", "sandbox", sb.ID, "err", err)
		case watchEnd && state.Terminal():
			onEnd(errSandboxEnded)
			return
		}
	}
}

// panicked returns the count of a recovered panic in a provider call.
func (e *Executor) panicked(provider, op string) func() {
	return func() { e.metrics.ProviderPanics.WithLabelValues(provider, op).Inc() }
}

func (e *Executor) observe(provider, op string, start time.Time, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, context.Canceled):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
		e.metrics.ProviderErrors.WithLabelValues(provider, op).Inc()
	}
	e.metrics.ProviderCalls.WithLabelValues(provider, op, outcome).Observe(time.Since(start).Seconds())
}

// backoff returns base doubled for each attempt after the first, capped.
func backoff(base, maxWait time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
