// Command api is Tether (built as bin/tether): a control plane for
// AI-agent sandboxes.
//
//	tether [serve] [--no-migrate]   run the service (the default)
//	tether migrate                  apply the schema migrations and exit
//	tether keys create --tenant T [--name N]   make an API key for tenant T and print it
//	tether sandboxes|events|owners  ops commands over the REST API (cli.go)
//
// The service's configuration comes from the environment; see
// docs/configuration.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tether:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  tether [serve] [--no-migrate]     run the service (default)
  tether migrate                    apply schema migrations and exit
  tether keys create --tenant NAME [--name KEYNAME]
                                    create an API key; the key is the last line printed
`

// run is the whole program: it parses args, reads the configuration through
// getenv, and runs the chosen command until it finishes or ctx is cancelled
// (or SIGINT/SIGTERM arrives).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(stderr)
		noMigrate := fs.Bool("no-migrate", false, "do not apply migrations at start (readiness fails until the schema is current)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		cfg, err := loadConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return serve(ctx, cfg, !*noMigrate, stderr)
	case "migrate":
		cfg, err := loadConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return migrate(ctx, cfg, stdout)
	case "keys":
		// With --tenant, keys create works on the database (the first key of
		// a tenant); everything else works over the API with a key.
		if len(args) > 0 && args[0] == "create" && !hasFlag(args[1:], "tenant") && !hasFlag(args[1:], "name") {
			return errors.New("keys create: --tenant is required to make a tenant's key in the database; or pass --name, with TETHER_URL and TETHER_API_KEY, to make one over the API")
		}
		if len(args) == 0 || args[0] != "create" || !hasFlag(args[1:], "tenant") {
			return runKeys(ctx, args, getenv, stdout, stderr)
		}
		fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
		fs.SetOutput(stderr)
		tenant := fs.String("tenant", "", "tenant the key belongs to (created if new)")
		name := fs.String("name", "cli", "what the key is for, shown in GET /v1/keys and in the audit trail")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *tenant == "" {
			return errors.New("keys create: --tenant is required")
		}
		if *name == "" || len(*name) > 100 {
			return errors.New("keys create: --name must be 1-100 bytes")
		}
		cfg, err := loadConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return createKey(ctx, cfg, *tenant, *name, stdout)
	case "sandboxes":
		return runSandboxes(ctx, args, getenv, stdout, stderr)
	case "events":
		return runEvents(ctx, args, getenv, stdout, stderr)
	case "owners":
		return runOwners(ctx, args, getenv, stdout, stderr)
	case "help", "-h", "--help":
		_, err := io.WriteString(stdout, usage+"\n"+cliUsage)
		return err
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

func openStore(ctx context.Context, cfg Config) (*store.Store, error) {
	pool, err := store.Connect(ctx, cfg.DatabaseURL, int32(cfg.DBMaxConns))
	if err != nil {
		return nil, err
	}
	return store.New(pool), nil
}

// openServeStore is openStore for serve: the workers' writes get a pool of
// their own that commits asynchronously (see store.WithWorkPool), and every
// committed change is announced through the notifier.
func openServeStore(ctx context.Context, cfg Config, log *slog.Logger) (*store.Store, *notify.Notifier, func(), error) {
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
		store.WithOutagePolicy(store.OutagePolicy{
			Replica: cfg.WorkerID,
			// Every replica records reaching Postgres each janitor interval.
			Tolerance: 2 * cfg.JanitorInterval,
			Ceiling:   cfg.OutageCreditMax,
		}))
	return st, notifier, func() { work.Close(); pool.Close() }, nil
}

func migrate(ctx context.Context, cfg Config, stdout io.Writer) error {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Pool().Close()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "applied %d migration(s); schema is current\n", len(applied))
	return err
}

func createKey(ctx context.Context, cfg Config, tenant, name string, stdout io.Writer) error {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Pool().Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	rec, key, err := st.CreateAPIKey(ctx, tenant, name)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "API key %s (%q) for tenant %q (shown once; store it now):\n%s\n", rec.ID, name, tenant, key)
	return err
}

func buildProviders(cfg Config) ([]sandbox.Provider, error) {
	var out []sandbox.Provider
	seen := map[string]bool{}
	for _, name := range cfg.Providers {
		if seen[name] {
			return nil, fmt.Errorf("PROVIDERS names %q twice", name)
		}
		seen[name] = true
		switch name {
		case sim.Name:
			p, err := sim.New(cfg.SimStateDir)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		case local.Name:
			p, err := local.New(cfg.LocalStateDir, local.AllowHostNetwork(cfg.LocalAllowHostNetwork),
				local.WithLimits(cfg.LocalLimits, cfg.LocalMaxLimits), local.AllowUnlimited(cfg.LocalAllowUnlimited),
				local.WithUIDRange(cfg.LocalUIDBase, cfg.LocalUIDCount), local.EgressPool(cfg.LocalEgressPool),
				local.WithImages(cfg.LocalImages...), local.WithHostShare(cfg.LocalHostShare, cfg.LocalTenantShare),
				local.WithCgroupParent(cfg.LocalCgroupParent))
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		case kubernetes.Name:
			kcfg, err := kubernetes.ConfigFromEnv(os.Getenv)
			if err != nil {
				return nil, fmt.Errorf("provider kubernetes: %w", err)
			}
			p, err := kubernetes.New(kcfg)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		default:
			return nil, fmt.Errorf("PROVIDERS: unknown provider %q (known: sim, local, kubernetes)", name)
		}
	}
	return out, nil
}

// serve runs the service until ctx is done, then shuts down in order: stop
// taking requests, stop the executor (in-flight work finishes or is handed
// back), stop the janitor (resigning leadership), stop the notifier, close
// the pool.
func serve(ctx context.Context, cfg Config, migrateFirst bool, logw io.Writer) error {
	log := newLogger(cfg, logw)
	if n, err := raiseOpenFileLimit(); err != nil {
		log.Warn("could not raise the open file limit", "err", err)
	} else {
		log.Debug("open file limit", "limit", n)
		fit, err := fitConns(cfg.MaxConns, cfg.MaxConns == defaultMaxConns, n, fdReserve(cfg.DBMaxConns))
		if err != nil {
			return err
		}
		if fit != cfg.MaxConns {
			log.Warn("MAX_CONNS lowered to fit the open file limit", "max_conns", fit, "limit", n)
			cfg.MaxConns = fit
		}
	}
	providers, err := buildProviders(cfg)
	if err != nil {
		return err
	}

	st, notifier, closePools, err := openServeStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closePools()
	if migrateFirst {
		applied, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		log.Info("schema migrated", "applied", len(applied))
	}
	switch super, err := st.Superuser(ctx); {
	case err != nil:
		log.Warn("could not tell whether the database role is a superuser", "err", err)
	case super:
		log.Warn("connected to Postgres as a superuser: run Tether as a role that owns its database and nothing more (see docs/operations.md)")
	}
	if cfg.BootstrapAPIKey != "" {
		if _, err := st.RegisterAPIKey(ctx, "default", "bootstrap", cfg.BootstrapAPIKey); err != nil {
			return fmt.Errorf("bootstrap api key: %w", err)
		}
		log.Info("bootstrap API key registered", "tenant", "default",
			"note", "BOOTSTRAP_API_KEY is only for a first start: make real keys with `keys create`, then unset it")
	}

	// Listen before any worker starts, so that a taken port fails the start
	// with nothing to wind down.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	var pln net.Listener
	if cfg.PprofAddr != "" {
		if pln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.PprofAddr); err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen on PPROF_ADDR %s: %w", cfg.PprofAddr, err)
		}
	}

	secret, err := st.ClusterSecret(ctx)
	if err != nil {
		_ = ln.Close()
		return err
	}
	var hostBound []string
	for _, p := range providers {
		if sandbox.IsHostBound(p) {
			hostBound = append(hostBound, p.Name())
		}
	}
	if len(hostBound) > 0 && !cfg.NodeIDSet {
		if cfg.NodeID, err = stickyNodeID(cfg.LocalStateDir, cfg.NodeID); err != nil {
			_ = ln.Close()
			return err
		}
	}
	node := store.Node{ID: cfg.NodeID, URL: nodeURL(cfg.NodeURL, ln.Addr())} // each beat adds the providers offered

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		lifecycle.NewRegistryCollector(st), lifecycle.NewProviderCollector(providers))
	metrics := lifecycle.NewMetrics(reg)

	// Background workers live until workCtx is cancelled during shutdown.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var workers sync.WaitGroup
	workers.Go(func() { notifier.Run(workCtx) })
	// The node registers before any work is claimed for it.
	// A host-bound provider is offered while it is available on this host:
	// a node that cannot create its sandboxes draws none of its creates.
	offered := func(ctx context.Context) []string {
		var names []string
		for _, p := range providers {
			if !sandbox.IsHostBound(p) || p.Info(ctx).Available {
				names = append(names, p.Name())
			}
		}
		return names
	}
	heartbeat := lifecycle.NewHeartbeat(st, node, offered, hostBound, cfg.NodeGrace, log)
	if err := heartbeat.Start(workCtx); err != nil {
		_ = ln.Close()
		cancelWork()
		workers.Wait()
		return fmt.Errorf("register node %s: %w", node.ID, err)
	}

	executor := lifecycle.NewExecutor(lifecycle.ExecutorConfig{
		WorkerID:     cfg.WorkerID,
		PollInterval: cfg.ExecutorPollInterval,
		Lease:        cfg.ExecutorLease,
		Concurrency:  cfg.ExecutorConcurrency,
		MaxAttempts:  cfg.CreateMaxAttempts,
		MaxBackoff:   cfg.ExecutorMaxBackoff,
		Node:         cfg.NodeID,
		MaxLifetime:  cfg.MaxLifetime,
	}, st, notifier, providers, log, metrics)
	executor.Start(workCtx)

	janitor := lifecycle.NewJanitor(lifecycle.JanitorConfig{
		Holder:            cfg.WorkerID,
		Interval:          cfg.JanitorInterval,
		OrphanGrace:       cfg.OrphanGrace,
		IdempotencyKeyTTL: cfg.IdempotencyKeyTTL,
		Node:              cfg.NodeID,
		NodeGrace:         cfg.NodeGrace,
	}, st, providers, log, reg)
	janitor.Start(workCtx)

	// Draining is done once shutdown begins: long-polls and exec streams
	// then answer at once instead of holding the shutdown up.
	draining, startDraining := context.WithCancel(context.WithoutCancel(ctx))
	defer startDraining()
	guard := newConnGuard(cfg.MaxConns, cfg.MaxConnsPerAddr)
	handler := tetherhttp.NewServer(log, tetherhttp.Config{
		DefaultProvider: providers[0].Name(),
		DefaultTTL:      cfg.DefaultTTL,
		DefaultOwnerTTL: cfg.DefaultOwnerTTL,
		MaxLifetime:     cfg.MaxLifetime,
		CreateTimeout:   cfg.CreateTimeout,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		MaxWait:         cfg.MaxWait,
		MaxFileBytes:    cfg.MaxFileBytes,
		MaxExecTimeout:  cfg.MaxExecTimeout,
		MaxExecOutput:   cfg.MaxExecOutput,
		AuthCacheTTL:    cfg.AuthCacheTTL,

		TenantMaxLive:          cfg.TenantMaxLive,
		TenantCreatesPerMinute: cfg.TenantCreatesPerMinute,
		KeyRequestsPerSecond:   cfg.KeyRequestsPerSecond,
		MaxStreamsPerTenant:    cfg.MaxStreamsPerTenant,

		TenantRequestsPerSecond: cfg.TenantRequestsPerSecond,
		AuthFailuresPerSecond:   cfg.AuthFailuresPerSecond,
		TenantMaxKeys:           cfg.TenantMaxKeys,
		MinBodyRate:             cfg.MinBodyRate,
		BodyGrace:               cfg.BodyGrace,
		MaxBodyTime:             readTimeout,
	}, tetherhttp.Deps{
		Store:     st,
		Changes:   notifier,
		Providers: providers,
		Ready:     readiness(st),
		Metrics:   reg,
		Gatherer:  reg,
		Draining:  draining,
		Nodes:     tetherhttp.Nodes{Self: cfg.NodeID, Secret: secret, Finder: st, Nonces: st},

		Authenticated: guard.authenticated,
	})
	var debugSrv *http.Server
	if pln != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		debugSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		workers.Go(func() { _ = debugSrv.Serve(pln) })
		log.Info("pprof listening", "addr", pln.Addr().String())
	}
	srv := &http.Server{
		Handler:     handler,
		ConnState:   guard.track,
		ConnContext: guard.connContext,
		// A client gets this long to send its headers, and its whole
		// request (bodies up to MAX_FILE_BYTES, and never slower than
		// MIN_BODY_RATE: see the API's body pacing); an idle keep-alive
		// connection is closed after IdleTimeout. None holds a connection
		// for ever.
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
	}
	srv.RegisterOnShutdown(startDraining)
	serveErr := make(chan error, 1)
	workers.Go(func() { serveErr <- srv.Serve(guard.listener(ln)) })
	for _, p := range providers {
		if info := p.Info(ctx); !info.Available {
			log.Warn("provider unavailable; creates for it are refused", "provider", p.Name(), "reason", info.Reason)
		}
	}
	log.Info("tether listening", "addr", ln.Addr().String(), "worker", executor.WorkerID(), "providers", cfg.Providers,
		"node", node.ID, "node_url", node.URL)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-serveErr:
		err = fmt.Errorf("http server: %w", err)
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		log.Warn("http shutdown incomplete", "err", serr)
	}
	executor.Stop(shutdownCtx)
	janitor.Stop()
	heartbeat.Stop()
	if debugSrv != nil {
		_ = debugSrv.Close()
	}
	cancelWork()
	workers.Wait()
	log.Info("stopped")
	return err
}

// Connection timeouts of the API server.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 15 * time.Minute
	idleTimeout       = 2 * time.Minute
)

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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
