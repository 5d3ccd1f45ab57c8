package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/host/egress"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store"
)

// Defaults of the settings that only the command has; the others are the
// defaults of the packages they configure (tetherhttp.Default*,
// lifecycle.Default*). docs/configuration.md is checked against them.
const (
	defaultListenAddr      = "127.0.0.1:8080"
	defaultProviders       = "sim,local"
	defaultSimStateDir     = ".tether/sim"
	defaultLocalStateDir   = ".tether/local"
	defaultShutdownTimeout = 30 * time.Second
	defaultDBMaxConns      = 20
	defaultMaxConns        = 2048
	defaultMaxConnsPerAddr = 256
	defaultLogLevel        = "info"
)

// Config is everything Tether reads from its environment, validated once at
// start and passed down explicitly.
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL). Required.
	DatabaseURL string
	// ListenAddr is where the API listens (LISTEN_ADDR, default
	// 127.0.0.1:8080; port 0 picks a free port).
	ListenAddr string
	// BootstrapAPIKey, if set, is registered for tenant "default" at start,
	// idempotently (BOOTSTRAP_API_KEY).
	BootstrapAPIKey string
	// Providers are the enabled providers, the default first (PROVIDERS,
	// comma-separated, default "sim,local").
	Providers []string
	// SimStateDir is where the sim provider keeps its inventory
	// (SIM_STATE_DIR, default .tether/sim).
	SimStateDir string
	// LocalStateDir is where the local provider keeps its sandboxes
	// (LOCAL_STATE_DIR, default .tether/local).
	LocalStateDir string
	// LocalAllowHostNetwork lets creates ask the local provider for
	// params.network "host" (LOCAL_ALLOW_HOST_NETWORK, default false). Such a
	// sandbox shares the host's network: it reaches every service on the
	// host's loopback, Postgres and Tether included, and can bind the host's
	// ports. Enable it only when every tenant is trusted.
	LocalAllowHostNetwork bool
	// LocalLimits are a local sandbox's resource limits unless its create
	// asks for others (LOCAL_PIDS, default 256; LOCAL_MEMORY_MB, default
	// 512, which covers its /tmp too; LOCAL_WORKSPACE_MB, default 0: no
	// size limit on /workspace).
	LocalLimits local.Limits
	// LocalMaxLimits are the most a create may ask for (LOCAL_MAX_PIDS,
	// default 4096; LOCAL_MAX_MEMORY_MB, default 8192;
	// LOCAL_MAX_WORKSPACE_MB, default 102400).
	LocalMaxLimits local.Limits
	// LocalHostShare is what all local sandboxes on this host together may
	// reserve by their limits, and their parent control group is capped at
	// (LOCAL_HOST_PIDS, LOCAL_HOST_MEMORY_MB, default 0: derived from the
	// host; LOCAL_HOST_WORKSPACE_MB, default 0: workspace space is not
	// reserved). LocalTenantShare is what one tenant's may
	// (LOCAL_TENANT_PIDS, LOCAL_TENANT_MEMORY_MB, LOCAL_TENANT_WORKSPACE_MB,
	// default 0: the host share).
	LocalHostShare, LocalTenantShare local.Limits
	// LocalCgroupParent names the control group that holds every local
	// sandbox's and carries the host share's caps (LOCAL_CGROUP_PARENT,
	// default tether).
	LocalCgroupParent string
	// LocalAllowUnlimited lets the local provider run sandboxes on a host
	// where it cannot enforce resource limits (LOCAL_ALLOW_UNLIMITED,
	// default false: such a host reports the provider unavailable).
	LocalAllowUnlimited bool
	// LocalUIDBase and LocalUIDCount are the host uids (and gids) local
	// sandboxes run as, one each (LOCAL_UID_BASE, default 100000;
	// LOCAL_UID_COUNT, default 65536). The range must hold no host user.
	LocalUIDBase, LocalUIDCount int
	// LocalEgressPool is where params.network "allowlist" sandboxes take
	// their /30 links to the host from (LOCAL_EGRESS_POOL, default
	// 10.250.0.0/16); it must not overlap the host's own networks.
	LocalEgressPool netip.Prefix
	// LocalImages are the root file systems a local sandbox may ask for by
	// name (params.image) instead of the host's system folders
	// (LOCAL_IMAGES, comma-separated name=/absolute/path pairs, each path a
	// folder or a .tar, .tar.gz or .tgz of one; default none). Tarballs are
	// unpacked once, under LOCAL_STATE_DIR/images.
	LocalImages []local.Image

	// JanitorInterval is how often the janitor reconciles (JANITOR_INTERVAL,
	// default 5s).
	JanitorInterval time.Duration
	// OrphanGrace is how old a provider resource no live sandbox accounts
	// for must be before the janitor destroys it, and how long a sandbox must
	// have been ready before a missing resource makes it lost (ORPHAN_GRACE,
	// default 30s).
	OrphanGrace time.Duration
	// OutageCreditMax is the ceiling of an outage credit
	// (OUTAGE_CREDIT_MAX, default 2m): no owner lease or sandbox deadline is
	// stretched to end more than this long after an outage ended.
	OutageCreditMax time.Duration
	// IdempotencyKeyTTL is how long an Idempotency-Key is remembered
	// (IDEMPOTENCY_KEY_TTL, default 24h).
	IdempotencyKeyTTL time.Duration
	// DefaultOwnerTTL is the lease an owner gets when a create names it
	// without a live lease (DEFAULT_OWNER_TTL, default 60s).
	DefaultOwnerTTL time.Duration
	// DefaultTTL is the lifetime of a sandbox created without ttl_seconds and
	// without an owner (DEFAULT_TTL, default 1h).
	DefaultTTL time.Duration
	// MaxLifetime caps every sandbox's lifetime (MAX_LIFETIME, default 24h).
	MaxLifetime time.Duration
	// CreateTimeout bounds a sandbox's creation (CREATE_TIMEOUT, default 5m).
	CreateTimeout time.Duration

	// ExecutorConcurrency bounds concurrent create calls per provider in this
	// process (EXECUTOR_CONCURRENCY, default 16).
	ExecutorConcurrency int
	// ExecutorLease is how long a claim lasts unrenewed; a crashed replica's
	// work is taken over after at most this long (EXECUTOR_LEASE, default 15s).
	ExecutorLease time.Duration
	// ExecutorPollInterval is the full look for work (retries that came due,
	// lapsed leases, work handed back), and the fallback when no notification
	// arrives (EXECUTOR_POLL_INTERVAL, default 1s).
	ExecutorPollInterval time.Duration
	// CreateMaxAttempts bounds create attempts on retryable provider errors
	// (CREATE_MAX_ATTEMPTS, default 5).
	CreateMaxAttempts int
	// ExecutorMaxBackoff caps the wait between attempts of a failing create
	// or destroy (EXECUTOR_MAX_BACKOFF, default 30s).
	ExecutorMaxBackoff time.Duration
	// WorkerID names this replica in leases and events (WORKER_ID, default
	// host name, pid and a random suffix).
	WorkerID string
	// NodeID names the node (host) this replica runs on (NODE_ID, default
	// the host name and a hash of LOCAL_STATE_DIR's absolute path, kept in
	// LOCAL_STATE_DIR/node-id by the first start so that it outlives a
	// changed host name; shared by replicas on one host with one state
	// folder). Sandboxes of host-bound providers (local) belong to a node.
	NodeID string
	// NodeIDSet is whether NODE_ID was set (rather than defaulted).
	NodeIDSet bool
	// NodeURL is where other replicas reach this one's API, to forward
	// data-plane calls for this node's sandboxes (NODE_URL, default
	// http:// and the address the API listens on, 127.0.0.1 for an
	// unspecified host: right on a single host only).
	NodeURL string
	// NodeGrace is how long a node may go without a heartbeat before its
	// ready sandboxes end lost (NODE_GRACE, default 1m); it beats every
	// sixth of that.
	NodeGrace time.Duration

	// ShutdownTimeout bounds graceful shutdown; in-flight creates still
	// running then are handed back to other replicas (SHUTDOWN_TIMEOUT,
	// default 30s).
	ShutdownTimeout time.Duration
	// DBMaxConns caps the connection pool (DB_MAX_CONNS, default 20).
	DBMaxConns int
	// MaxConns caps the API's concurrent connections (MAX_CONNS, default
	// 2048): past it new connections wait to be accepted, so that a flood
	// cannot take every descriptor from the janitor and the pool.
	MaxConns int
	// MaxConnsPerAddr caps the connections from one remote address
	// (MAX_CONNS_PER_ADDR, default 256; 0: no cap); past it new ones are
	// closed at once. Behind a proxy or load balancer every client shares
	// its address: set it to MAX_CONNS there.
	MaxConnsPerAddr int
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second on average, once BodyGrace has passed (MIN_BODY_RATE, default
	// 1024; BODY_GRACE, default 10s); a slower one is 408 REQUEST_TIMEOUT.
	MinBodyRate int64
	BodyGrace   time.Duration
	// MaxBodyBytes caps JSON request bodies (MAX_BODY_BYTES, default 1 MiB).
	MaxBodyBytes int64
	// MaxWait caps ?wait= on GET /v1/sandboxes/{id} (MAX_WAIT, default 60s).
	MaxWait time.Duration
	// MaxFileBytes caps file uploads (MAX_FILE_BYTES, default 100 MiB).
	MaxFileBytes int64
	// MaxExecTimeout caps an exec's timeout (MAX_EXEC_TIMEOUT, default 1h).
	MaxExecTimeout time.Duration
	// MaxExecOutput caps the output an exec returns (MAX_EXEC_OUTPUT, bytes,
	// default 1 MiB); longer output is cut and marked truncated.
	MaxExecOutput int
	// TenantMaxLive caps each tenant's live sandboxes (TENANT_MAX_LIVE,
	// default 1000), TenantCreatesPerMinute its creates
	// (TENANT_CREATES_PER_MINUTE, default 6000, per replica); a tenant's
	// own quotas in the tenants table override both.
	TenantMaxLive          int
	TenantCreatesPerMinute int
	// KeyRequestsPerSecond caps each API key's requests, per replica
	// (KEY_REQUESTS_PER_SECOND, default 200; bursts of twice that).
	KeyRequestsPerSecond int
	// TenantRequestsPerSecond caps each tenant's requests over all its
	// keys, per replica (TENANT_REQUESTS_PER_SECOND, default 1000; bursts
	// of twice that).
	TenantRequestsPerSecond int
	// AuthFailuresPerSecond caps the requests without a valid API key
	// (none, unknown or revoked) from one remote address, per replica
	// (AUTH_FAILURES_PER_SECOND, default 5; bursts of four times that);
	// past it they are 429 before the key is looked up.
	AuthFailuresPerSecond int
	// TenantMaxKeys caps each tenant's API keys that are not revoked
	// (TENANT_MAX_KEYS, default 100).
	TenantMaxKeys int
	// MaxStreamsPerTenant bounds each tenant's open event streams, per
	// replica (MAX_STREAMS_PER_TENANT, default 20).
	MaxStreamsPerTenant int
	// AuthCacheTTL is how long a successful API key lookup is cached in
	// memory (AUTH_CACHE_TTL, default 10s): a revoked key keeps working at
	// most this long.
	AuthCacheTTL time.Duration
	// PprofAddr, if set, serves Go's pprof profiles there (PPROF_ADDR, e.g.
	// 127.0.0.1:6060); never expose it publicly.
	PprofAddr string
	// LogLevel is debug, info, warn or error (LOG_LEVEL, default info).
	LogLevel slog.Level
}

// defaultNodeID is the node id of a host with the given name whose local
// sandboxes live in stateDir: the same across restarts, different for two
// state folders on one host (two simulated hosts, say).
func defaultNodeID(host, stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	sum := sha256.Sum256([]byte(abs))
	return cmp.Or(host, "node") + "-" + hex.EncodeToString(sum[:4])
}

// nodeIDPattern is what a node id may look like.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// cgroupNamePattern is what LOCAL_CGROUP_PARENT may be: one folder name.
var cgroupNamePattern = nodeIDPattern

// stickyNodeID returns the node id kept in stateDir/node-id, writing id
// there first if none is: a defaulted node id must not change with the host
// name, or the node would take its own sandboxes for another node's.
func stickyNodeID(stateDir, id string) (string, error) {
	path := filepath.Join(stateDir, "node-id")
	b, err := os.ReadFile(path)
	if err == nil {
		kept := strings.TrimSpace(string(b))
		if !nodeIDPattern.MatchString(kept) {
			return "", fmt.Errorf("node id in %s: %q is not a node id", path, kept)
		}
		return kept, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node id: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", fmt.Errorf("keep node id: %w", err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("keep node id: %w", err)
	}
	return id, nil
}

// nodeURL is the URL other replicas reach this one at: NODE_URL, or the
// listening address (an unspecified host becomes loopback).
func nodeURL(configured string, addr net.Addr) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// loadConfig reads and validates the configuration. Every problem is
// reported, not just the first.
func loadConfig(getenv func(string) string) (Config, error) {
	var errs []error
	str := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	dur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive Go duration such as 5s", name, v))
			return def
		}
		return d
	}
	num := func(name string, def int64) int64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive integer", name, v))
			return def
		}
		return n
	}
	// numOrZero is num for settings where 0 means none.
	numOrZero := func(name string, def int64) int64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want 0 or a positive integer", name, v))
			return def
		}
		return n
	}

	boolean := func(name string) bool {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", name, v))
		}
		return b
	}

	host, _ := os.Hostname()
	cfg := Config{
		DatabaseURL:           getenv("DATABASE_URL"),
		ListenAddr:            str("LISTEN_ADDR", defaultListenAddr),
		BootstrapAPIKey:       getenv("BOOTSTRAP_API_KEY"),
		SimStateDir:           str("SIM_STATE_DIR", defaultSimStateDir),
		LocalStateDir:         str("LOCAL_STATE_DIR", defaultLocalStateDir),
		LocalAllowHostNetwork: boolean("LOCAL_ALLOW_HOST_NETWORK"),
		LocalLimits: local.Limits{
			Pids:        int(num("LOCAL_PIDS", local.DefaultPids)),
			MemoryMB:    int(num("LOCAL_MEMORY_MB", local.DefaultMemoryMB)),
			WorkspaceMB: int(numOrZero("LOCAL_WORKSPACE_MB", local.DefaultWorkspaceMB)),
			OpenFiles:   int(num("LOCAL_OPEN_FILES", local.DefaultOpenFiles)),
		},
		LocalMaxLimits: local.Limits{
			Pids:        int(num("LOCAL_MAX_PIDS", local.DefaultMaxPids)),
			MemoryMB:    int(num("LOCAL_MAX_MEMORY_MB", local.DefaultMaxMemoryMB)),
			WorkspaceMB: int(num("LOCAL_MAX_WORKSPACE_MB", local.DefaultMaxWorkspaceMB)),
			OpenFiles:   int(num("LOCAL_MAX_OPEN_FILES", local.DefaultMaxOpenFiles)),
		},
		LocalAllowUnlimited:     boolean("LOCAL_ALLOW_UNLIMITED"),
		LocalUIDBase:            int(num("LOCAL_UID_BASE", local.DefaultUIDBase)),
		LocalUIDCount:           int(num("LOCAL_UID_COUNT", local.DefaultUIDCount)),
		JanitorInterval:         dur("JANITOR_INTERVAL", lifecycle.DefaultJanitorInterval),
		OrphanGrace:             dur("ORPHAN_GRACE", lifecycle.DefaultOrphanGrace),
		OutageCreditMax:         dur("OUTAGE_CREDIT_MAX", store.DefaultOutageCeiling),
		IdempotencyKeyTTL:       dur("IDEMPOTENCY_KEY_TTL", lifecycle.DefaultIdempotencyKeyTTL),
		DefaultOwnerTTL:         dur("DEFAULT_OWNER_TTL", tetherhttp.DefaultOwnerTTL),
		DefaultTTL:              dur("DEFAULT_TTL", tetherhttp.DefaultTTL),
		MaxLifetime:             dur("MAX_LIFETIME", tetherhttp.DefaultMaxLifetime),
		CreateTimeout:           dur("CREATE_TIMEOUT", tetherhttp.DefaultCreateTimeout),
		ExecutorConcurrency:     int(num("EXECUTOR_CONCURRENCY", lifecycle.DefaultConcurrency)),
		ExecutorLease:           dur("EXECUTOR_LEASE", lifecycle.DefaultLease),
		ExecutorPollInterval:    dur("EXECUTOR_POLL_INTERVAL", lifecycle.DefaultPollInterval),
		CreateMaxAttempts:       int(num("CREATE_MAX_ATTEMPTS", lifecycle.DefaultMaxAttempts)),
		ExecutorMaxBackoff:      dur("EXECUTOR_MAX_BACKOFF", lifecycle.DefaultMaxBackoff),
		WorkerID:                str("WORKER_ID", fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))),
		NodeURL:                 strings.TrimRight(str("NODE_URL", ""), "/"),
		NodeGrace:               dur("NODE_GRACE", store.DefaultNodeGrace),
		ShutdownTimeout:         dur("SHUTDOWN_TIMEOUT", defaultShutdownTimeout),
		DBMaxConns:              int(num("DB_MAX_CONNS", defaultDBMaxConns)),
		MaxConns:                int(num("MAX_CONNS", defaultMaxConns)),
		MaxConnsPerAddr:         int(numOrZero("MAX_CONNS_PER_ADDR", defaultMaxConnsPerAddr)),
		MinBodyRate:             num("MIN_BODY_RATE", tetherhttp.DefaultMinBodyRate),
		BodyGrace:               dur("BODY_GRACE", tetherhttp.DefaultBodyGrace),
		MaxBodyBytes:            num("MAX_BODY_BYTES", tetherhttp.DefaultMaxBodyBytes),
		MaxWait:                 dur("MAX_WAIT", tetherhttp.DefaultMaxWait),
		MaxFileBytes:            num("MAX_FILE_BYTES", tetherhttp.DefaultMaxFileBytes),
		MaxExecTimeout:          dur("MAX_EXEC_TIMEOUT", tetherhttp.DefaultMaxExecTimeout),
		MaxExecOutput:           int(num("MAX_EXEC_OUTPUT", tetherhttp.DefaultMaxExecOutput)),
		TenantMaxLive:           int(num("TENANT_MAX_LIVE", tetherhttp.DefaultTenantMaxLive)),
		TenantCreatesPerMinute:  int(num("TENANT_CREATES_PER_MINUTE", tetherhttp.DefaultTenantCreatesPerMinute)),
		KeyRequestsPerSecond:    int(num("KEY_REQUESTS_PER_SECOND", tetherhttp.DefaultKeyRequestsPerSecond)),
		TenantRequestsPerSecond: int(num("TENANT_REQUESTS_PER_SECOND", tetherhttp.DefaultTenantRequestsPerSecond)),
		AuthFailuresPerSecond:   int(num("AUTH_FAILURES_PER_SECOND", tetherhttp.DefaultAuthFailuresPerSecond)),
		TenantMaxKeys:           int(num("TENANT_MAX_KEYS", tetherhttp.DefaultTenantMaxKeys)),
		MaxStreamsPerTenant:     int(num("MAX_STREAMS_PER_TENANT", tetherhttp.DefaultMaxStreamsPerTenant)),
		AuthCacheTTL:            dur("AUTH_CACHE_TTL", tetherhttp.DefaultAuthCacheTTL),
		PprofAddr:               getenv("PPROF_ADDR"),
	}
	pool, err := netip.ParsePrefix(str("LOCAL_EGRESS_POOL", local.DefaultEgressPool))
	if err != nil || egress.CheckPool(pool) != nil {
		errs = append(errs, fmt.Errorf("LOCAL_EGRESS_POOL=%q: want an IPv4 network of /28 or larger such as %s", getenv("LOCAL_EGRESS_POOL"), local.DefaultEgressPool))
	}
	cfg.LocalEgressPool = pool
	cfg.LocalHostShare = local.Limits{
		Pids:        int(numOrZero("LOCAL_HOST_PIDS", 0)),
		MemoryMB:    int(numOrZero("LOCAL_HOST_MEMORY_MB", 0)),
		WorkspaceMB: int(numOrZero("LOCAL_HOST_WORKSPACE_MB", 0)),
	}
	cfg.LocalTenantShare = local.Limits{
		Pids:        int(numOrZero("LOCAL_TENANT_PIDS", 0)),
		MemoryMB:    int(numOrZero("LOCAL_TENANT_MEMORY_MB", 0)),
		WorkspaceMB: int(numOrZero("LOCAL_TENANT_WORKSPACE_MB", 0)),
	}
	cfg.LocalCgroupParent = str("LOCAL_CGROUP_PARENT", "tether")
	images, err := local.ParseImages(getenv("LOCAL_IMAGES"))
	if err != nil {
		errs = append(errs, err)
	}
	cfg.LocalImages = images
	cfg.NodeID = str("NODE_ID", defaultNodeID(host, cfg.LocalStateDir))
	cfg.NodeIDSet = strings.TrimSpace(getenv("NODE_ID")) != ""
	if !nodeIDPattern.MatchString(cfg.NodeID) {
		errs = append(errs, fmt.Errorf("NODE_ID=%q: want 1 to 63 letters, digits, '.', '_' or '-'", cfg.NodeID))
	}
	if cfg.NodeURL != "" {
		if u, err := url.Parse(cfg.NodeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("NODE_URL=%q: want a scheme and host only, such as http://10.0.0.7:8080", cfg.NodeURL))
		}
	}
	for p := range strings.SplitSeq(str("PROVIDERS", defaultProviders), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	if len(cfg.Providers) == 0 {
		errs = append(errs, errors.New("PROVIDERS: name at least one provider"))
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(str("LOG_LEVEL", defaultLogLevel))); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", getenv("LOG_LEVEL")))
	}
	if cfg.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is not set: point it at a Postgres database (the README's `make run` starts one)"))
	}
	if cfg.DefaultTTL > cfg.MaxLifetime {
		errs = append(errs, fmt.Errorf("DEFAULT_TTL (%s) must not exceed MAX_LIFETIME (%s)", cfg.DefaultTTL, cfg.MaxLifetime))
	}
	if cfg.LocalLimits.Pids > cfg.LocalMaxLimits.Pids || cfg.LocalLimits.MemoryMB > cfg.LocalMaxLimits.MemoryMB {
		errs = append(errs, errors.New("LOCAL_PIDS and LOCAL_MEMORY_MB must not exceed LOCAL_MAX_PIDS and LOCAL_MAX_MEMORY_MB"))
	}
	if cfg.LocalLimits.OpenFiles > cfg.LocalMaxLimits.OpenFiles {
		errs = append(errs, fmt.Errorf("LOCAL_OPEN_FILES (%d) must not exceed LOCAL_MAX_OPEN_FILES (%d)", cfg.LocalLimits.OpenFiles, cfg.LocalMaxLimits.OpenFiles))
	}
	if cfg.LocalLimits.WorkspaceMB > cfg.LocalMaxLimits.WorkspaceMB {
		errs = append(errs, fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must not exceed LOCAL_MAX_WORKSPACE_MB (%d)", cfg.LocalLimits.WorkspaceMB, cfg.LocalMaxLimits.WorkspaceMB))
	}
	if w := cfg.LocalLimits.WorkspaceMB; w > 0 && w < local.MinWorkspaceMB {
		errs = append(errs, fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must be 0 (no limit) or at least %d", w, local.MinWorkspaceMB))
	}
	if !cgroupNamePattern.MatchString(cfg.LocalCgroupParent) {
		errs = append(errs, fmt.Errorf("LOCAL_CGROUP_PARENT=%q: want 1 to 63 letters, digits, '.', '_' or '-', not starting with '.'", cfg.LocalCgroupParent))
	}
	if int64(cfg.LocalUIDBase)+int64(cfg.LocalUIDCount) > 1<<31-1 {
		errs = append(errs, errors.New("LOCAL_UID_BASE + LOCAL_UID_COUNT must not exceed 2147483647"))
	}
	if cfg.MaxLifetime < time.Second {
		errs = append(errs, errors.New("MAX_LIFETIME must be at least 1s"))
	}
	return cfg, errors.Join(errs...)
}
