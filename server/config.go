package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"

	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store"
)

// Defaults of the settings that only the command has; the others are the
// defaults of the packages they configure (tetherhttp.Default*,
// lifecycle.Default*, local.Default*).
const (
	defaultListenAddr      = "127.0.0.1:8080"
	defaultProviders       = "sim,local"
	defaultShutdownTimeout = 30 * time.Second
	defaultDBMaxConns      = 20
	defaultMaxConns        = 2048
	defaultMaxConnsPerAddr = 256
)

// config is everything Tether reads from its environment, validated once at
// start and passed down explicitly. The settings (settings()) fill it: each
// field's variable, default and meaning are there and in
// docs/configuration.md.
type config struct {
	DatabaseURL     string
	ListenAddr      string
	BootstrapAPIKey string
	// Providers are the enabled providers, the default first.
	Providers []string
	// ProviderSettings are the values of the providers' settings, by
	// name, defaults included; each provider's registration parses its
	// own (buildProviders).
	ProviderSettings map[string]string

	// Executor and Janitor are the workers' configuration; serve adds the
	// replica's and the node's names (WorkerID, NodeID) and NodeGrace.
	Executor lifecycle.ExecutorConfig
	Janitor  lifecycle.JanitorConfig
	// Webhooks is the delivery worker's; serve adds WorkerID.
	Webhooks lifecycle.WebhookConfig
	// Egress is the egress proxy's, which runs when local is enabled.
	Egress egressConfig
	// SecretsKey seals tenants' secrets (SECRETS_KEY); nil: none are kept.
	SecretsKey []byte
	// Refiller is the warm pools' refiller; serve adds WorkerID, the
	// lifetimes and the live-sandbox quota.
	Refiller lifecycle.RefillerConfig
	// OutageCreditMax is the ceiling of an outage credit.
	OutageCreditMax time.Duration

	// WorkerID names this replica in leases and events.
	WorkerID string
	// NodeID names the node (host) this replica runs on; NodeIDSet is
	// whether NODE_ID set it (rather than the default).
	NodeID    string
	NodeIDSet bool
	// NodeURL is where other replicas reach this one's API ("": the
	// listening address).
	NodeURL string
	// NodeGrace is how long a node may go without a heartbeat.
	NodeGrace time.Duration
	// PausedTTL, if positive, stops a paused sandbox's TTL clock and is
	// how long it may stay paused (0: the TTL runs while paused).
	PausedTTL time.Duration

	// ProcessMax and ProcessOutput are the providers' limits on
	// background processes, per sandbox (PROCESS_MAX_PER_SANDBOX,
	// PROCESS_OUTPUT_BYTES).
	ProcessMax    int
	ProcessOutput int64

	// HTTP is the API's configuration; serve adds DefaultProvider and
	// MaxBodyTime.
	HTTP            tetherhttp.Config
	ShutdownTimeout time.Duration
	DBMaxConns      int
	MaxConns        int
	MaxConnsPerAddr int
	PprofAddr       string
	// MetricsAddr, if set, is where /metrics is served, and the API's
	// address answers it 404.
	MetricsAddr string
	LogLevel    slog.Level

	// providers are the registrations the settings were read with: the
	// built-in ones and the program's own (Options.Providers).
	providers *providerSet
}

// settings is the configuration's every setting, in the order
// docs/configuration.md lists them: the service's own first, then the
// providers', then the rest of the service's.
func (ps *providerSet) settings() []setting {
	all := slices.Clone(serviceSettings)
	all = append(all, ps.providerSettings()...)
	return append(all, laterSettings()...)
}

// coreSettings are the service's own settings, without the providers'.
func coreSettings() []setting {
	return append(slices.Clone(serviceSettings), laterSettings()...)
}

// laterSettings are the service's settings listed after the providers'.
func laterSettings() []setting {
	all := slices.Clone(lifecycleSettings)
	all = append(all, serverSettings...)
	all = append(all, webhookSettings...)
	all = append(all, egressSettings...)
	return append(append(all, previewSettings...), snapshotSettings...)
}

// serviceSettings are the service's own: its database, address and
// providers.
var serviceSettings = []setting{
	verbatim("DATABASE_URL", "the Postgres connection string (required)",
		func(c *config) *string { return &c.DatabaseURL }),
	text("LISTEN_ADDR", defaultListenAddr, "where the API listens (port 0: a free port)",
		func(c *config) *string { return &c.ListenAddr }),
	verbatim("BOOTSTRAP_API_KEY", "an API key for tenant default, registered at start (first start only)",
		func(c *config) *string { return &c.BootstrapAPIKey }),
	{name: "PROVIDERS", def: defaultProviders, doc: "the enabled providers, comma-separated, the default first", set: setProviders},
}

// lifecycleSettings are the janitor's, the executor's, the sandboxes'
// lifetimes and the node's.
var lifecycleSettings = []setting{
	duration("JANITOR_INTERVAL", lifecycle.DefaultJanitorInterval, "how often each replica sweeps and the leader reconciles",
		func(c *config) *time.Duration { return &c.Janitor.Interval }),
	duration("OUTAGE_CREDIT_MAX", store.DefaultOutageCeiling, "ceiling of an outage credit",
		func(c *config) *time.Duration { return &c.OutageCreditMax }),
	duration("ORPHAN_GRACE", lifecycle.DefaultOrphanGrace, "age before an unaccounted resource is destroyed",
		func(c *config) *time.Duration { return &c.Janitor.OrphanGrace }),
	duration("IDEMPOTENCY_KEY_TTL", lifecycle.DefaultIdempotencyKeyTTL, "how long an Idempotency-Key is remembered",
		func(c *config) *time.Duration { return &c.Janitor.IdempotencyKeyTTL }),
	duration("DEFAULT_OWNER_TTL", tetherhttp.DefaultOwnerTTL, "lease of an owner a create names without a live one",
		func(c *config) *time.Duration { return &c.HTTP.DefaultOwnerTTL }),
	duration("DEFAULT_TTL", tetherhttp.DefaultTTL, "lifetime of a sandbox without ttl_seconds or owner",
		func(c *config) *time.Duration { return &c.HTTP.DefaultTTL }),
	duration("MAX_LIFETIME", tetherhttp.DefaultMaxLifetime, "cap on every sandbox's lifetime",
		func(c *config) *time.Duration { return &c.HTTP.MaxLifetime }),
	duration("CREATE_TIMEOUT", tetherhttp.DefaultCreateTimeout, "creation deadline",
		func(c *config) *time.Duration { return &c.HTTP.CreateTimeout }),
	duration("PAUSE_TIMEOUT", tetherhttp.DefaultPauseTimeout, "deadline of a pause or a resume",
		func(c *config) *time.Duration { return &c.HTTP.PauseTimeout }),
	durationOrZero("PAUSED_TTL", "how long a sandbox may stay paused, its TTL stopped (0: the TTL runs while paused)",
		func(c *config) *time.Duration { return &c.PausedTTL }),
	count("CREATE_MAX_ATTEMPTS", lifecycle.DefaultMaxAttempts, "create attempts on retryable provider errors",
		func(c *config) *int { return &c.Executor.MaxAttempts }),
	duration("EXECUTOR_MAX_BACKOFF", lifecycle.DefaultMaxBackoff, "cap on the wait between attempts",
		func(c *config) *time.Duration { return &c.Executor.MaxBackoff }),
	count("EXECUTOR_CONCURRENCY", lifecycle.DefaultConcurrency, "create calls at once, per provider, per replica",
		func(c *config) *int { return &c.Executor.Concurrency }),
	duration("EXECUTOR_LEASE", lifecycle.DefaultLease, "how long a claim lasts unrenewed",
		func(c *config) *time.Duration { return &c.Executor.Lease }),
	duration("EXECUTOR_POLL_INTERVAL", lifecycle.DefaultPollInterval, "the executor's full look for work",
		func(c *config) *time.Duration { return &c.Executor.PollInterval }),
	duration("POOL_REFILL_INTERVAL", lifecycle.DefaultRefillInterval, "how often each replica refills the warm pools",
		func(c *config) *time.Duration { return &c.Refiller.Interval }),
	duration("POOL_LEASE", lifecycle.DefaultPoolLease, "owner lease of a warm pool's unclaimed members",
		func(c *config) *time.Duration { return &c.Refiller.Lease }),
	duration("POOL_REFILL_BACKOFF", store.DefaultRefillBackoff, "a warm pool's wait after a refill whose members all failed (doubles per failed refill)",
		func(c *config) *time.Duration { return &c.Refiller.Backoff }),
	duration("POOL_REFILL_MAX_BACKOFF", store.DefaultRefillMaxBackoff, "cap on a warm pool's refill backoff",
		func(c *config) *time.Duration { return &c.Refiller.MaxBackoff }),
	{name: "NODE_ID", doc: "the node (host) this replica runs on (default: from the host name and LOCAL_STATE_DIR)", set: func(c *config, v string) error {
		c.NodeID = strings.TrimSpace(v)
		c.NodeIDSet = c.NodeID != ""
		return nil
	}},
	{name: "NODE_URL", doc: "where other replicas reach this one's API (default: the listening address)", set: setNodeURL},
	duration("NODE_GRACE", store.DefaultNodeGrace, "heartbeat age past which a node is dead",
		func(c *config) *time.Duration { return &c.NodeGrace }),
	text("WORKER_ID", "", "this replica's name (default: host name, pid and a random suffix)",
		func(c *config) *string { return &c.WorkerID }),
}

// serverSettings are the process's and its API's.
var serverSettings = []setting{
	duration("SHUTDOWN_TIMEOUT", defaultShutdownTimeout, "graceful shutdown budget",
		func(c *config) *time.Duration { return &c.ShutdownTimeout }),
	count("DB_MAX_CONNS", defaultDBMaxConns, "size of the main connection pool",
		func(c *config) *int { return &c.DBMaxConns }),
	count("MAX_CONNS", defaultMaxConns, "concurrent connections the API accepts",
		func(c *config) *int { return &c.MaxConns }),
	countOrZero("MAX_CONNS_PER_ADDR", defaultMaxConnsPerAddr, "connections one remote address may hold (0: no cap)",
		func(c *config) *int { return &c.MaxConnsPerAddr }),
	count("MIN_BODY_RATE", tetherhttp.DefaultMinBodyRate, "slowest request body, bytes a second, after BODY_GRACE",
		func(c *config) *int64 { return &c.HTTP.MinBodyRate }),
	duration("BODY_GRACE", tetherhttp.DefaultBodyGrace, "how long a body may take before MIN_BODY_RATE applies",
		func(c *config) *time.Duration { return &c.HTTP.BodyGrace }),
	count("MAX_BODY_BYTES", tetherhttp.DefaultMaxBodyBytes, "limit on JSON request bodies",
		func(c *config) *int64 { return &c.HTTP.MaxBodyBytes }),
	count("MAX_FILE_BYTES", tetherhttp.DefaultMaxFileBytes, "limit on file and archive transfers",
		func(c *config) *int64 { return &c.HTTP.MaxFileBytes }),
	duration("MAX_EXEC_TIMEOUT", tetherhttp.DefaultMaxExecTimeout, "cap on an exec's timeout_seconds",
		func(c *config) *time.Duration { return &c.HTTP.MaxExecTimeout }),
	count("MAX_EXEC_OUTPUT", tetherhttp.DefaultMaxExecOutput, "bytes of exec output kept",
		func(c *config) *int { return &c.HTTP.MaxExecOutput }),
	count("PROCESS_MAX_PER_SANDBOX", local.DefaultProcessMax, "background processes a sandbox keeps at once, running or ended within a minute",
		func(c *config) *int { return &c.ProcessMax }),
	count("PROCESS_OUTPUT_BYTES", int64(local.DefaultProcessOutput), "bytes of each background process's latest output kept",
		func(c *config) *int64 { return &c.ProcessOutput }),
	duration("MAX_WAIT", tetherhttp.DefaultMaxWait, "cap on ?wait= of GET /v1/sandboxes/{id}",
		func(c *config) *time.Duration { return &c.HTTP.MaxWait }),
	quota("TENANT_MAX_LIVE", tetherhttp.DefaultTenantMaxLive, "live sandboxes a tenant may have (0: no limit)",
		func(c *config) *int { return &c.HTTP.TenantMaxLive }),
	quota("TENANT_CREATES_PER_MINUTE", tetherhttp.DefaultTenantCreatesPerMinute, "creates a tenant may make a minute, per replica (0: no limit)",
		func(c *config) *int { return &c.HTTP.TenantCreatesPerMinute }),
	count("KEY_REQUESTS_PER_SECOND", tetherhttp.DefaultKeyRequestsPerSecond, "requests an API key may make a second, per replica",
		func(c *config) *int { return &c.HTTP.KeyRequestsPerSecond }),
	count("TENANT_REQUESTS_PER_SECOND", tetherhttp.DefaultTenantRequestsPerSecond, "requests a tenant may make a second, per replica",
		func(c *config) *int { return &c.HTTP.TenantRequestsPerSecond }),
	count("AUTH_FAILURES_PER_SECOND", tetherhttp.DefaultAuthFailuresPerSecond, "requests without a valid key or token one client address may make a second",
		func(c *config) *int { return &c.HTTP.AuthFailuresPerSecond }),
	{name: "TRUSTED_PROXIES", doc: "addresses (CIDRs) of proxies whose X-Forwarded-For names the client (none: the header is ignored)",
		set: setTrustedProxies},
	count("TENANT_MAX_KEYS", tetherhttp.DefaultTenantMaxKeys, "API keys a tenant may hold unrevoked",
		func(c *config) *int { return &c.HTTP.TenantMaxKeys }),
	count("MAX_STREAMS_PER_TENANT", tetherhttp.DefaultMaxStreamsPerTenant, "event streams a tenant may hold open, per replica",
		func(c *config) *int { return &c.HTTP.MaxStreamsPerTenant }),
	duration("AUTH_CACHE_TTL", tetherhttp.DefaultAuthCacheTTL, "how long a key lookup is cached",
		func(c *config) *time.Duration { return &c.HTTP.AuthCacheTTL }),
	verbatim("PPROF_ADDR", "where Go's pprof profiles are served (never publicly)",
		func(c *config) *string { return &c.PprofAddr }),
	verbatim("METRICS_ADDR", "where /metrics is served instead of the API's address (none: on the API's, without a key)",
		func(c *config) *string { return &c.MetricsAddr }),
	{name: "LOG_LEVEL", def: "info", doc: "debug, info, warn or error", set: func(c *config, v string) error {
		if err := c.LogLevel.UnmarshalText([]byte(cmp.Or(strings.TrimSpace(v), "info"))); err != nil {
			return fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v)
		}
		return nil
	}},
}

func setProviders(c *config, v string) error {
	c.Providers = nil
	for p := range strings.SplitSeq(cmp.Or(strings.TrimSpace(v), defaultProviders), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Providers = append(c.Providers, p)
		}
	}
	if len(c.Providers) == 0 {
		return errors.New("PROVIDERS: name at least one provider")
	}
	for i, name := range c.Providers {
		if _, ok := c.providers.reg.Lookup(name); !ok {
			return fmt.Errorf("PROVIDERS: unknown provider %q (known: %s)", name, strings.Join(c.providers.reg.Names(), ", "))
		}
		if slices.Contains(c.Providers[:i], name) {
			return fmt.Errorf("PROVIDERS names %q twice", name)
		}
	}
	return nil
}

// setTrustedProxies reads TRUSTED_PROXIES: addresses or CIDRs, separated
// by commas or blanks.
func setTrustedProxies(c *config, v string) error {
	c.HTTP.TrustedProxies = nil
	for f := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil || a.Zone() != "" {
				return fmt.Errorf("TRUSTED_PROXIES: %q is not an address or a CIDR such as 10.0.0.0/8", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.HTTP.TrustedProxies = append(c.HTTP.TrustedProxies, p.Masked())
	}
	return nil
}

func setNodeURL(c *config, v string) error {
	c.NodeURL = strings.TrimRight(strings.TrimSpace(v), "/")
	if c.NodeURL == "" {
		return nil
	}
	if u, err := url.Parse(c.NodeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("NODE_URL=%q: want a scheme and host only, such as http://10.0.0.7:8080", c.NodeURL)
	}
	return nil
}

// serviceChecks are the checks across settings that are not a provider's.
var serviceChecks = []func(config) error{
	checkPreviewTTL,
	checkE2BDomain,
	func(c config) error {
		if c.DatabaseURL == "" {
			return errors.New("DATABASE_URL is not set: point it at a Postgres database (the README's `make run` starts one)")
		}
		return nil
	},
	func(c config) error {
		if !nodeIDPattern.MatchString(c.NodeID) {
			return fmt.Errorf("NODE_ID=%q: want 1 to 63 letters, digits, '.', '_' or '-'", c.NodeID)
		}
		return nil
	},
	func(c config) error {
		if c.HTTP.DefaultTTL > c.HTTP.MaxLifetime {
			return fmt.Errorf("DEFAULT_TTL (%s) must not exceed MAX_LIFETIME (%s)", c.HTTP.DefaultTTL, c.HTTP.MaxLifetime)
		}
		return nil
	},
	func(c config) error {
		if c.HTTP.MaxLifetime < time.Second {
			return errors.New("MAX_LIFETIME must be at least 1s")
		}
		return nil
	},
}

// loadConfig reads and validates the configuration: every setting, then
// the defaults worked out from others, then the checks across settings.
// Every problem is reported, not just the first. The providers' settings
// are only kept: their registrations check them when buildProviders makes
// the enabled providers.
func (ps *providerSet) loadConfig(getenv func(string) string) (config, error) {
	cfg := config{providers: ps}
	var errs []error
	for _, s := range ps.settings() {
		v := getenv(s.name)
		if v == "" {
			v = s.def
		}
		if err := s.set(&cfg, v); err != nil {
			errs = append(errs, err)
			_ = s.set(&cfg, s.def) // go on checking with the default
		}
	}
	host, _ := os.Hostname()
	if cfg.WorkerID == "" {
		cfg.WorkerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
	}
	if cfg.NodeID == "" {
		cfg.NodeID = defaultNodeID(host, nodeDir(cfg))
	}
	for _, check := range serviceChecks {
		if err := check(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	return cfg, errors.Join(errs...)
}
