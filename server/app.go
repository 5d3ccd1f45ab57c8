package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/framing"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/secretbox"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
)

// Connection timeouts of the API server, and the budget of the stops that
// come after the shutdown budget.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 15 * time.Minute
	idleTimeout       = 2 * time.Minute
	cleanupTimeout    = 5 * time.Second
)

// app is one `tether serve` process, in three phases: build makes every
// component and takes the ports (nothing runs yet), start starts the
// components in order, shutdown stops them in order. close releases what
// build took.
type app struct {
	cfg config
	log *slog.Logger

	providers  []domain.Provider
	egress     *egress        // the allow-list sandboxes' way out; nil without local
	secrets    *secretbox.Box // seals tenants' secrets; nil without SECRETS_KEY
	st         *store.Store
	notifier   *notify.Notifier
	closePools func()
	ln         net.Listener // the API's
	pln        net.Listener // pprof's; nil without PPROF_ADDR
	mln        net.Listener // /metrics'; nil without METRICS_ADDR
	node       store.Node
	guard      *connGuard

	heartbeat  *lifecycle.Heartbeat
	executor   *lifecycle.Executor
	janitor    *lifecycle.Janitor
	webhooks   *lifecycle.Webhooks
	refiller   *lifecycle.Refiller
	srv        *http.Server
	debugSrv   *http.Server // nil without PPROF_ADDR
	metricsSrv *http.Server // nil without METRICS_ADDR
	serveErr   chan error

	// Background work (the notifier, the workers, the servers) lives until
	// cancelWork, in shutdown; workers waits for the goroutines.
	workCtx    context.Context
	cancelWork context.CancelFunc
	workers    sync.WaitGroup
	// startDraining begins the API's drain: long-polls and exec streams
	// answer at once instead of holding the shutdown up.
	startDraining context.CancelFunc
}

// serve runs the service until ctx is done, then shuts down in order.
func serve(ctx context.Context, cfg config, migrateFirst bool, logw io.Writer) error {
	a := &app{cfg: cfg, log: newLogger(cfg, logw)}
	defer a.close()
	if err := a.build(ctx, migrateFirst); err != nil {
		return err
	}
	if err := a.start(ctx); err != nil {
		a.shutdown()
		return err
	}
	err := a.wait(ctx)
	a.shutdown()
	return err
}

// build makes the providers, opens the store (migrating it first if
// asked), takes the ports and makes the components. It starts nothing:
// what fails here has nothing to wind down.
func (a *app) build(ctx context.Context, migrateFirst bool) error {
	if err := a.fitConns(); err != nil {
		return err
	}
	if err := a.buildSecrets(); err != nil {
		return err
	}
	localOpts, err := a.buildEgress()
	if err != nil {
		return err
	}
	if a.providers, err = buildProviders(ctx, a.cfg, localOpts...); err != nil {
		return err
	}
	if err := a.openStore(ctx, migrateFirst); err != nil {
		return err
	}
	// Listen before any worker starts, so that a taken port fails the start
	// with nothing to wind down.
	if err := a.listen(ctx); err != nil {
		return err
	}
	secret, err := a.st.ClusterSecret(ctx)
	if err != nil {
		return err
	}
	if err := a.identify(); err != nil {
		return err
	}
	a.workCtx, a.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		lifecycle.NewRegistryCollector(a.st), lifecycle.NewProviderCollector(a.providers), lifecycle.NewWebhookCollector(a.st),
		lifecycle.NewPoolCollector(a.st))
	reg.MustRegister(a.egressCollectors()...)
	a.buildWorkers(reg)
	a.buildServers(ctx, reg, secret)
	return nil
}

// fitConns raises the open file limit and lowers a defaulted MAX_CONNS to
// fit it (a MAX_CONNS set that does not fit refuses the start).
func (a *app) fitConns() error {
	n, err := raiseOpenFileLimit()
	if err != nil {
		a.log.Warn("could not raise the open file limit", "err", err)
		return nil
	}
	a.log.Debug("open file limit", "limit", n)
	fit, err := fitConns(a.cfg.MaxConns, a.cfg.MaxConns == defaultMaxConns, n, fdReserve(a.cfg.DBMaxConns))
	if err != nil {
		return err
	}
	if fit != a.cfg.MaxConns {
		a.log.Warn("MAX_CONNS lowered to fit the open file limit", "max_conns", fit, "limit", n)
		a.cfg.MaxConns = fit
	}
	return nil
}

// openStore opens the two pools and the notifier, migrates if asked,
// warns of a superuser role and registers the bootstrap key.
func (a *app) openStore(ctx context.Context, migrateFirst bool) error {
	var err error
	if a.st, a.notifier, a.closePools, err = openServeStore(ctx, a.cfg, a.log); err != nil {
		return err
	}
	if migrateFirst {
		applied, err := a.st.Migrate(ctx)
		if err != nil {
			return err
		}
		a.log.Info("schema migrated", "applied", len(applied))
	}
	switch super, err := a.st.Superuser(ctx); {
	case err != nil:
		a.log.Warn("could not tell whether the database role is a superuser", "err", err)
	case super:
		a.log.Warn("connected to Postgres as a superuser: run Tether as a role that owns its database and nothing more (see docs/operations.md)")
	}
	if a.cfg.BootstrapAPIKey != "" {
		return a.registerBootstrapKey(ctx)
	}
	return nil
}

// registerBootstrapKey registers BOOTSTRAP_API_KEY for the tenant default,
// and says what it found: a key registered now, one registered by an
// earlier start (every restart, while the variable stays set), or one
// that was revoked since and so lets no one in.
func (a *app) registerBootstrapKey(ctx context.Context) error {
	k, created, err := a.st.EnsureAPIKey(ctx, "default", "bootstrap", a.cfg.BootstrapAPIKey)
	switch {
	case err != nil:
		return fmt.Errorf("bootstrap api key: %w", err)
	case created:
		a.log.Info("bootstrap API key registered", "tenant", "default", "key_id", k.ID,
			"note", "BOOTSTRAP_API_KEY is only for a first start: make real keys with `tether keys create --tenant NAME`, then unset it")
	case k.RevokedAt != nil:
		a.log.Warn("bootstrap API key is revoked: it authenticates nothing; unset BOOTSTRAP_API_KEY", "tenant", "default", "key_id", k.ID)
	default:
		a.log.Debug("bootstrap API key already registered", "tenant", "default", "key_id", k.ID)
	}
	return nil
}

// openServeStore is openStore for serve: the workers' writes get a pool of
// their own that commits asynchronously (see store.WithWorkPool), and every
// committed change is announced through the notifier.
func openServeStore(ctx context.Context, cfg config, log *slog.Logger) (*store.Store, *notify.Notifier, func(), error) {
	pool, err := store.Connect(ctx, cfg.DatabaseURL, int32(cfg.DBMaxConns))
	if err != nil {
		return nil, nil, nil, err
	}
	work, err := store.ConnectWorkers(ctx, cfg.DatabaseURL, int32(max(4, cfg.DBMaxConns/2)))
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	notifier := notify.New(pool, log)
	st := store.New(pool, store.WithWorkPool(work), store.WithAnnouncer(notifier), store.WithNodeGrace(cfg.NodeGrace),
		store.WithPausedTTL(cfg.PausedTTL, cfg.HTTP.MaxLifetime),
		store.WithOutagePolicy(store.OutagePolicy{
			Replica: cfg.WorkerID,
			// Every replica records reaching Postgres each janitor interval.
			Tolerance: 2 * cfg.Janitor.Interval,
			Ceiling:   cfg.OutageCreditMax,
		}))
	return st, notifier, func() { work.Close(); pool.Close() }, nil
}

// listen takes the API's port, pprof's if PPROF_ADDR is set and the
// metrics' if METRICS_ADDR is.
func (a *app) listen(ctx context.Context) error {
	var err error
	if a.ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.ListenAddr); err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.ListenAddr, err)
	}
	if a.cfg.PprofAddr != "" {
		if a.pln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.PprofAddr); err != nil {
			return fmt.Errorf("listen on PPROF_ADDR %s: %w", a.cfg.PprofAddr, err)
		}
	}
	if a.cfg.MetricsAddr != "" {
		if a.mln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("listen on METRICS_ADDR %s: %w", a.cfg.MetricsAddr, err)
		}
	}
	return nil
}

// identify settles the node this replica runs on: a defaulted node id is
// kept in the node's folder (nodeDir: LOCAL_STATE_DIR) when a host-bound
// provider runs here, so that it outlives a renamed host.
func (a *app) identify() error {
	if dir := nodeDir(a.cfg); dir != "" && len(a.hostBound()) > 0 && !a.cfg.NodeIDSet {
		id, err := stickyNodeID(dir, a.cfg.NodeID)
		if err != nil {
			return err
		}
		a.cfg.NodeID = id
	}
	a.node = store.Node{ID: a.cfg.NodeID, URL: nodeURL(a.cfg.NodeURL, a.ln.Addr())} // each beat adds the providers offered
	return nil
}

// hostBound names the enabled providers whose sandboxes live on a node.
func (a *app) hostBound() []string {
	var names []string
	for _, p := range a.providers {
		if domain.IsHostBound(p) {
			names = append(names, p.Name())
		}
	}
	return names
}

// offered names the providers the node offers now: a host-bound provider
// while it is available on this host, so that a node that cannot create
// its sandboxes draws none of its creates.
func (a *app) offered(ctx context.Context) []string {
	var names []string
	for _, p := range a.providers {
		if !domain.IsHostBound(p) || p.Info(ctx).Available {
			names = append(names, p.Name())
		}
	}
	return names
}

// buildWorkers makes the heartbeat, the executor, the janitor and the
// webhook delivery worker and the pool refiller.
func (a *app) buildWorkers(reg *prometheus.Registry) {
	a.heartbeat = lifecycle.NewHeartbeat(a.st, a.node, a.offered, a.hostBound(), a.cfg.NodeGrace, a.log)
	ex := a.cfg.Executor
	ex.WorkerID, ex.Node, ex.MaxLifetime = a.cfg.WorkerID, a.cfg.NodeID, a.cfg.HTTP.MaxLifetime
	a.executor = lifecycle.NewExecutor(ex, a.st, a.notifier, a.providers, a.log, lifecycle.NewMetrics(reg))
	jc := a.cfg.Janitor
	jc.Holder, jc.Node, jc.NodeGrace = a.cfg.WorkerID, a.cfg.NodeID, a.cfg.NodeGrace
	a.janitor = lifecycle.NewJanitor(jc, a.st, a.providers, a.log, reg)
	wc := a.cfg.Webhooks
	wc.WorkerID = a.cfg.WorkerID
	a.webhooks = lifecycle.NewWebhooks(wc, a.st, a.notifier, a.log, reg)
	// Warm pools: members are created like any sandbox, with the API's
	// lifetimes and quota.
	rc := a.cfg.Refiller
	rc.WorkerID, rc.MaxLifetime, rc.CreateTimeout = a.cfg.WorkerID, a.cfg.HTTP.MaxLifetime, a.cfg.HTTP.CreateTimeout
	rc.TenantMaxLive = cmp.Or(a.cfg.HTTP.TenantMaxLive, tetherhttp.DefaultTenantMaxLive)
	a.refiller = lifecycle.NewRefiller(rc, a.st, a.log, reg)
}

// buildServers makes the API's server and, with PPROF_ADDR, pprof's;
// with METRICS_ADDR, the metrics' (and the API's has no /metrics).
func (a *app) buildServers(ctx context.Context, reg *prometheus.Registry, secret []byte) {
	draining, startDraining := context.WithCancel(context.WithoutCancel(ctx))
	a.startDraining = startDraining
	a.guard = newConnGuard(a.cfg.MaxConns, a.cfg.MaxConnsPerAddr)
	api := a.cfg.HTTP
	api.DefaultProvider = a.providers[0].Name()
	api.MaxBodyTime = readTimeout
	var gatherer prometheus.Gatherer = reg // /metrics on the API's address
	if a.mln != nil {
		gatherer = nil
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		a.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	deps := tetherhttp.Deps{
		Store:     a.st,
		Changes:   a.notifier,
		Providers: a.providers,
		Ready:     readiness(a.st),
		Metrics:   reg,
		Gatherer:  gatherer,
		Draining:  draining,
		Nodes:     cluster.Nodes{Self: a.cfg.NodeID, Secret: secret, Finder: a.st, Nonces: a.st},

		Authenticated: a.guard.authenticated,
		Framing:       requestFraming,
	}
	if a.egress != nil {
		deps.Egress = a.egressRules()
	}
	if a.secrets != nil {
		deps.Secrets = a.secrets
	}
	handler := tetherhttp.NewServer(a.log, api, deps)
	a.srv = &http.Server{
		Handler:     handler,
		ConnState:   a.guard.track,
		ConnContext: a.guard.connContext,
		// A client gets this long to send its headers, and its whole
		// request (bodies up to MAX_FILE_BYTES, and never slower than
		// MIN_BODY_RATE: see the API's body pacing); an idle keep-alive
		// connection is closed after IdleTimeout. None holds a connection
		// for ever.
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
	}
	a.srv.RegisterOnShutdown(startDraining)
	if a.pln != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		a.debugSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
}

// start starts the components in order: the notifier, the node's
// heartbeat (the node registers before any work is claimed for it), the
// executor, the janitor, the webhook worker, the pool refiller, then the servers. An error leaves what started
// for shutdown to stop.
func (a *app) start(ctx context.Context) error {
	a.workers.Go(func() { a.notifier.Run(a.workCtx) })
	a.startEgress()
	if err := a.heartbeat.Start(a.workCtx); err != nil {
		return fmt.Errorf("register node %s: %w", a.node.ID, err)
	}
	a.executor.Start(a.workCtx)
	a.janitor.Start(a.workCtx)
	a.webhooks.Start(a.workCtx)
	a.refiller.Start(a.workCtx)
	if a.debugSrv != nil {
		a.workers.Go(func() { _ = a.debugSrv.Serve(a.pln) })
		a.log.Info("pprof listening", "addr", a.pln.Addr().String())
	}
	if a.metricsSrv != nil {
		a.workers.Go(func() { _ = a.metricsSrv.Serve(a.mln) })
		a.log.Info("metrics listening", "addr", a.mln.Addr().String())
	}
	a.serveErr = make(chan error, 1)
	a.workers.Go(func() { a.serveErr <- a.srv.Serve(framing.Listener(a.guard.listener(a.ln))) })
	for _, p := range a.providers {
		if info := p.Info(ctx); !info.Available {
			a.log.Warn("provider unavailable; creates for it are refused", "provider", p.Name(), "reason", info.Reason)
		}
	}
	a.log.Info("tether listening", "addr", a.ln.Addr().String(), "worker", a.executor.WorkerID(), "providers", a.cfg.Providers,
		"node", a.node.ID, "node_url", a.node.URL)
	return nil
}

// wait returns when ctx is done (nil) or the API's server fails.
func (a *app) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.serveErr:
		return fmt.Errorf("http server: %w", err)
	}
}

// shutdown stops what start started, in order: stop taking requests,
// stop the executor (in-flight work finishes or is handed back), stop the
// pool refiller, the janitor (resigning leadership), the webhook worker
// (attempts in flight finish) and the heartbeat, then the notifier and
// the rest of the background work. The API and the executor share
// SHUTDOWN_TIMEOUT; the janitor's resignation is quick and spares the
// other replicas three intervals without a leader, so it and the heartbeat
// get a few seconds of their own even when the executor spent the budget.
func (a *app) shutdown() {
	a.log.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := a.srv.Shutdown(ctx); err != nil {
		a.log.Warn("http shutdown incomplete", "err", err)
	}
	a.executor.Stop(ctx)
	cleanup, cancelCleanup := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancelCleanup()
	a.refiller.Stop(cleanup)
	a.janitor.Stop(cleanup)
	a.webhooks.Stop(cleanup)
	a.heartbeat.Stop(cleanup)
	a.stopEgress(cleanup)
	for _, srv := range []*http.Server{a.debugSrv, a.metricsSrv} {
		if srv != nil {
			_ = srv.Close()
		}
	}
	a.cancelWork()
	a.workers.Wait()
	a.log.Info("stopped")
}

// close releases what build took: the ports (if no server took them over)
// and the pools.
func (a *app) close() {
	for _, ln := range []net.Listener{a.ln, a.pln, a.mln} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	for _, cancel := range []context.CancelFunc{a.cancelWork, a.startDraining} {
		if cancel != nil {
			cancel()
		}
	}
	if a.closePools != nil {
		a.closePools()
	}
	a.stopEgress(context.Background()) // if start never ran
}

// raiseOpenFileLimit raises this process's soft limit of open files to its
// hard limit: each connection, sandbox command and pool connection holds
// descriptors, and a low soft limit would lock clients out long before the
// host runs short. It returns the limit in force.
func raiseOpenFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("setrlimit: %w", err)
		}
	}
	return lim.Cur, nil
}

// readiness reports Postgres reachable and the schema current. Once the
// schema has been seen current it stays so (migrations only move forward),
// so later checks are a ping.
func readiness(st *store.Store) func(context.Context) error {
	var (
		mu      sync.Mutex
		current bool
	)
	return func(ctx context.Context) error {
		if err := st.Ping(ctx); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if current {
			return nil
		}
		ok, err := st.SchemaCurrent(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("schema is not current: run `tether migrate`")
		}
		current = true
		return nil
	}
}
