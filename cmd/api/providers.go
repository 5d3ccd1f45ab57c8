package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/sandbox"
	"github.com/tetherhq/tether/provider"
)

// A providerKind is a provider Tether can run: its name (as PROVIDERS
// names it), its settings, the checks across them, and how to make it
// from the configuration. Adding a provider is adding a row to
// providerKinds.
type providerKind struct {
	name     string
	settings []setting
	checks   []func(Config) error
	build    func(Config) (sandbox.Provider, error)
}

// providerKinds are the providers Tether knows, in the order their
// settings are documented.
var providerKinds = []providerKind{
	{name: sim.Name, settings: simSettings, build: newSim},
	{name: local.Name, settings: localSettings, checks: localChecks, build: newLocal},
	registered(kubernetes.Registration),
}

// registered is the row of a provider that declares its settings in a
// provider.Registration: each of them is a setting of the table, whose
// value the configuration keeps as it was given (Config.Registered), and
// the registration itself parses them, with the service's settings it
// Uses, when the provider is built.
func registered(r provider.Registration) providerKind {
	k := providerKind{name: r.Name}
	for _, rs := range r.Settings {
		k.settings = append(k.settings, setting{name: rs.Name, def: rs.Default, doc: rs.Doc,
			set: func(c *Config, v string) error {
				if c.Registered == nil {
					c.Registered = map[string]string{}
				}
				c.Registered[rs.Name] = v
				return nil
			}})
	}
	k.build = func(cfg Config) (sandbox.Provider, error) {
		service := map[string]string{"DATABASE_URL": cfg.DatabaseURL}
		return r.Open(context.Background(), func(name string) string {
			if v, ok := cfg.Registered[name]; ok {
				return v
			}
			return service[name]
		})
	}
	return k
}

// buildProviders makes the providers PROVIDERS enables, the default first.
func buildProviders(cfg Config) ([]sandbox.Provider, error) {
	var out []sandbox.Provider
	seen := map[string]bool{}
	for _, name := range cfg.Providers {
		if seen[name] {
			return nil, fmt.Errorf("PROVIDERS names %q twice", name)
		}
		seen[name] = true
		i := slices.IndexFunc(providerKinds, func(k providerKind) bool { return k.name == name })
		if i < 0 {
			return nil, fmt.Errorf("PROVIDERS: unknown provider %q (known: %s)", name, strings.Join(providerNames(), ", "))
		}
		p, err := providerKinds[i].build(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// providerNames are the names of the providers Tether knows.
func providerNames() []string {
	var names []string
	for _, k := range providerKinds {
		names = append(names, k.name)
	}
	return names
}

// simConfig is the sim provider's configuration.
type simConfig struct {
	// StateDir is where it keeps its inventory; replicas share it.
	StateDir string
}

var simSettings = []setting{
	text("SIM_STATE_DIR", ".tether/sim", "folder of the sim provider's inventory; replicas share it",
		func(c *Config) *string { return &c.Sim.StateDir }),
}

func newSim(cfg Config) (sandbox.Provider, error) { return sim.New(cfg.Sim.StateDir) }

// localConfig is the local provider's configuration.
type localConfig struct {
	// StateDir is where it keeps its sandboxes (and the node id).
	StateDir string
	// AllowHostNetwork lets creates ask for params.network "host", which
	// shares the host's network, its loopback services included.
	AllowHostNetwork bool
	// Limits are a sandbox's limits unless its create asks for others;
	// MaxLimits the most a create may ask for.
	Limits, MaxLimits local.Limits
	// HostShare is what all sandboxes on the host may reserve together,
	// and their parent control group's cap (0: derived from the host);
	// TenantShare what one tenant's may (0: the host share).
	HostShare, TenantShare local.Limits
	// CgroupParent names the control group holding every sandbox's.
	CgroupParent string
	// AllowUnlimited lets sandboxes run on a host where limits cannot be
	// enforced.
	AllowUnlimited bool
	// UIDBase and UIDCount are the host uids (and gids) sandboxes run as.
	UIDBase, UIDCount int
	// EgressPool is where allow-list sandboxes take their links from.
	EgressPool netip.Prefix
	// Images are the root file systems a create may ask for by name.
	Images []local.Image
}

func newLocal(cfg Config) (sandbox.Provider, error) {
	l := cfg.Local
	return local.New(l.StateDir, local.AllowHostNetwork(l.AllowHostNetwork),
		local.WithLimits(l.Limits, l.MaxLimits), local.AllowUnlimited(l.AllowUnlimited),
		local.WithUIDRange(l.UIDBase, l.UIDCount), local.EgressPool(l.EgressPool),
		local.WithImages(l.Images...), local.WithHostShare(l.HostShare, l.TenantShare),
		local.WithCgroupParent(l.CgroupParent))
}

// localField is a local setting's field of the configuration.
func localField[T any](f func(*localConfig) *T) func(*Config) *T {
	return func(c *Config) *T { return f(&c.Local) }
}

var localSettings = []setting{
	text("LOCAL_STATE_DIR", ".tether/local", "folder of the local provider's sandboxes",
		localField(func(l *localConfig) *string { return &l.StateDir })),
	boolean("LOCAL_ALLOW_HOST_NETWORK", "let creates ask for params.network host (trusted tenants only)",
		localField(func(l *localConfig) *bool { return &l.AllowHostNetwork })),
	count("LOCAL_PIDS", local.DefaultPids, "processes a sandbox may have, unless its create asks",
		localField(func(l *localConfig) *int { return &l.Limits.Pids })),
	count("LOCAL_MAX_PIDS", local.DefaultMaxPids, "the most params.pids may ask for",
		localField(func(l *localConfig) *int { return &l.MaxLimits.Pids })),
	count("LOCAL_MEMORY_MB", local.DefaultMemoryMB, "memory of a sandbox in MiB, /tmp included, unless its create asks",
		localField(func(l *localConfig) *int { return &l.Limits.MemoryMB })),
	count("LOCAL_MAX_MEMORY_MB", local.DefaultMaxMemoryMB, "the most params.memory_mb may ask for",
		localField(func(l *localConfig) *int { return &l.MaxLimits.MemoryMB })),
	countOrZero("LOCAL_WORKSPACE_MB", local.DefaultWorkspaceMB, "size limit of /workspace in MiB, unless its create asks (0: none)",
		localField(func(l *localConfig) *int { return &l.Limits.WorkspaceMB })),
	count("LOCAL_MAX_WORKSPACE_MB", local.DefaultMaxWorkspaceMB, "the most params.workspace_mb may ask for",
		localField(func(l *localConfig) *int { return &l.MaxLimits.WorkspaceMB })),
	countOrZero("LOCAL_HOST_PIDS", 0, "processes all sandboxes on the host may reserve (0: from the kernel's limits)",
		localField(func(l *localConfig) *int { return &l.HostShare.Pids })),
	countOrZero("LOCAL_HOST_MEMORY_MB", 0, "memory all sandboxes on the host may reserve, in MiB (0: from the host)",
		localField(func(l *localConfig) *int { return &l.HostShare.MemoryMB })),
	countOrZero("LOCAL_HOST_WORKSPACE_MB", 0, "workspace space all sandboxes may reserve, in MiB (0: not reserved)",
		localField(func(l *localConfig) *int { return &l.HostShare.WorkspaceMB })),
	countOrZero("LOCAL_TENANT_PIDS", 0, "processes one tenant's sandboxes may reserve (0: the host share)",
		localField(func(l *localConfig) *int { return &l.TenantShare.Pids })),
	countOrZero("LOCAL_TENANT_MEMORY_MB", 0, "memory one tenant's sandboxes may reserve, in MiB (0: the host share)",
		localField(func(l *localConfig) *int { return &l.TenantShare.MemoryMB })),
	countOrZero("LOCAL_TENANT_WORKSPACE_MB", 0, "workspace space one tenant's may reserve, in MiB (0: the host share)",
		localField(func(l *localConfig) *int { return &l.TenantShare.WorkspaceMB })),
	{name: "LOCAL_CGROUP_PARENT", def: "tether", doc: "control group holding every sandbox's, capped at the host share", set: setCgroupParent},
	count("LOCAL_OPEN_FILES", local.DefaultOpenFiles, "files each sandbox process may hold open, unless its create asks",
		localField(func(l *localConfig) *int { return &l.Limits.OpenFiles })),
	count("LOCAL_MAX_OPEN_FILES", local.DefaultMaxOpenFiles, "the most params.open_files may ask for",
		localField(func(l *localConfig) *int { return &l.MaxLimits.OpenFiles })),
	count("LOCAL_UID_BASE", local.DefaultUIDBase, "first host uid (and gid) of the sandboxes",
		localField(func(l *localConfig) *int { return &l.UIDBase })),
	count("LOCAL_UID_COUNT", local.DefaultUIDCount, "how many uids: the most sandboxes on the host at once",
		localField(func(l *localConfig) *int { return &l.UIDCount })),
	{name: "LOCAL_EGRESS_POOL", def: local.DefaultEgressPool, doc: "IPv4 network allow-list sandboxes take their links from", set: setEgressPool},
	{name: "LOCAL_IMAGES", doc: "images a create may ask for: name=/absolute/path,...", set: func(c *Config, v string) error {
		images, err := local.ParseImages(v)
		c.Local.Images = images
		return err
	}},
	boolean("LOCAL_ALLOW_UNLIMITED", "run sandboxes where limits cannot be enforced",
		localField(func(l *localConfig) *bool { return &l.AllowUnlimited })),
}

// cgroupNamePattern is what LOCAL_CGROUP_PARENT may be: one folder name.
var cgroupNamePattern = nodeIDPattern

func setCgroupParent(c *Config, v string) error {
	name := cmp.Or(strings.TrimSpace(v), "tether")
	if !cgroupNamePattern.MatchString(name) {
		return fmt.Errorf("LOCAL_CGROUP_PARENT=%q: want 1 to 63 letters, digits, '.', '_' or '-', not starting with '.'", name)
	}
	c.Local.CgroupParent = name
	return nil
}

func setEgressPool(c *Config, v string) error {
	pool, err := netip.ParsePrefix(cmp.Or(strings.TrimSpace(v), local.DefaultEgressPool))
	if err != nil || egress.CheckPool(pool) != nil {
		return fmt.Errorf("LOCAL_EGRESS_POOL=%q: want an IPv4 network of /28 or larger such as %s", v, local.DefaultEgressPool)
	}
	c.Local.EgressPool = pool
	return nil
}

// localChecks are the checks across the local provider's settings.
var localChecks = []func(Config) error{
	func(c Config) error {
		if l := c.Local; l.Limits.Pids > l.MaxLimits.Pids || l.Limits.MemoryMB > l.MaxLimits.MemoryMB {
			return errors.New("LOCAL_PIDS and LOCAL_MEMORY_MB must not exceed LOCAL_MAX_PIDS and LOCAL_MAX_MEMORY_MB")
		}
		return nil
	},
	func(c Config) error {
		if l := c.Local; l.Limits.OpenFiles > l.MaxLimits.OpenFiles {
			return fmt.Errorf("LOCAL_OPEN_FILES (%d) must not exceed LOCAL_MAX_OPEN_FILES (%d)", l.Limits.OpenFiles, l.MaxLimits.OpenFiles)
		}
		return nil
	},
	func(c Config) error {
		if l := c.Local; l.Limits.WorkspaceMB > l.MaxLimits.WorkspaceMB {
			return fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must not exceed LOCAL_MAX_WORKSPACE_MB (%d)", l.Limits.WorkspaceMB, l.MaxLimits.WorkspaceMB)
		}
		return nil
	},
	func(c Config) error {
		if w := c.Local.Limits.WorkspaceMB; w > 0 && w < local.MinWorkspaceMB {
			return fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must be 0 (no limit) or at least %d", w, local.MinWorkspaceMB)
		}
		return nil
	},
	func(c Config) error {
		if int64(c.Local.UIDBase)+int64(c.Local.UIDCount) > 1<<31-1 {
			return errors.New("LOCAL_UID_BASE + LOCAL_UID_COUNT must not exceed 2147483647")
		}
		return nil
	},
}
