package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"

	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/provider"
)

// DefaultStateDir is where sandboxes are kept unless LOCAL_STATE_DIR says
// otherwise.
const DefaultStateDir = ".tether/local"

// cgroupParentPattern is what LOCAL_CGROUP_PARENT may be: one folder name.
var cgroupParentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func itoa(n int) string { return strconv.Itoa(n) }

// Registration makes local one of Tether's providers. Its settings are
// those of docs/configuration.md, with the same defaults and checks.
var Registration = provider.Registration{
	Name: Name,
	Settings: []provider.Setting{
		{Name: "LOCAL_STATE_DIR", Default: DefaultStateDir, Doc: "folder of the sandboxes; every folder above it needs o+x"},
		{Name: "LOCAL_ALLOW_HOST_NETWORK", Default: "false", Doc: `let creates ask for params.network "host"`},
		{Name: "LOCAL_PIDS", Default: itoa(DefaultPids), Doc: "processes a sandbox may have, unless its create asks (params.pids)"},
		{Name: "LOCAL_MAX_PIDS", Default: itoa(DefaultMaxPids), Doc: "the most params.pids may ask for"},
		{Name: "LOCAL_MEMORY_MB", Default: itoa(DefaultMemoryMB), Doc: "memory of a sandbox in MiB, its /tmp included, unless its create asks (params.memory_mb)"},
		{Name: "LOCAL_MAX_MEMORY_MB", Default: itoa(DefaultMaxMemoryMB), Doc: "the most params.memory_mb may ask for"},
		{Name: "LOCAL_WORKSPACE_MB", Default: itoa(DefaultWorkspaceMB), Doc: "size limit of /workspace in MiB unless the create asks (params.workspace_mb); 0: none"},
		{Name: "LOCAL_MAX_WORKSPACE_MB", Default: itoa(DefaultMaxWorkspaceMB), Doc: "the most params.workspace_mb may ask for"},
		{Name: "LOCAL_HOST_PIDS", Default: "0", Doc: "processes all sandboxes on the host may reserve; 0: half of what the kernel can hand out"},
		{Name: "LOCAL_HOST_MEMORY_MB", Default: "0", Doc: "memory in MiB all sandboxes on the host may reserve; 0: the host's less a quarter"},
		{Name: "LOCAL_HOST_WORKSPACE_MB", Default: "0", Doc: "disk in MiB all sandboxes' workspaces and snapshots on the host may reserve; 0: three quarters of the disk they could have at start"},
		{Name: "LOCAL_TENANT_PIDS", Default: "0", Doc: "processes one tenant's sandboxes on the host may reserve; 0: half the host's, at least LOCAL_PIDS"},
		{Name: "LOCAL_TENANT_MEMORY_MB", Default: "0", Doc: "memory in MiB one tenant's sandboxes on the host may reserve; 0: half the host's, at least LOCAL_MEMORY_MB"},
		{Name: "LOCAL_TENANT_WORKSPACE_MB", Default: "0", Doc: "disk in MiB one tenant's workspaces and snapshots on the host may reserve; 0: half the host's, at least LOCAL_WORKSPACE_MB"},
		{Name: "LOCAL_CGROUP_PARENT", Default: defaultCgroupParent, Doc: "the control group holding every sandbox's, capped at the host share"},
		{Name: "LOCAL_OPEN_FILES", Default: itoa(DefaultOpenFiles), Doc: "files each process may hold open, unless its create asks (params.open_files)"},
		{Name: "LOCAL_MAX_OPEN_FILES", Default: itoa(DefaultMaxOpenFiles), Doc: "the most params.open_files may ask for"},
		{Name: "LOCAL_UID_BASE", Default: itoa(DefaultUIDBase), Doc: "first host uid of the sandboxes; no host user may have one in the range"},
		{Name: "LOCAL_UID_COUNT", Default: itoa(DefaultUIDCount), Doc: "how many uids the range holds: the most sandboxes at once"},
		{Name: "LOCAL_EGRESS_POOL", Default: DefaultEgressPool, Doc: `where params.network "allowlist" sandboxes take their /30 links from`},
		{Name: "LOCAL_IMAGES", Doc: "images a create may ask for (params.image): comma-separated name=/absolute/path pairs"},
		{Name: "LOCAL_ALLOW_UNLIMITED", Default: "false", Doc: "run sandboxes on a host where resource limits cannot be enforced"},
		{Name: "LOCAL_EXEC_SERVER", Default: "true", Doc: "new sandboxes start exec's commands from a server inside them; false: every exec enters through nsenter"},
	},
	New: func(ctx context.Context, s *provider.Settings) (provider.Provider, error) {
		return newFromSettings(ctx, s)
	},
	NodeDir: "LOCAL_STATE_DIR",
	Uses:    []string{provider.SettingProcessMax, provider.SettingProcessOutput},
}

// RegistrationWith is Registration whose provider also gets opts: how
// Tether hands it what is not a setting (its egress proxy,
// WithEgressProxy).
func RegistrationWith(opts ...Option) provider.Registration {
	r := Registration
	r.New = func(ctx context.Context, s *provider.Settings) (provider.Provider, error) {
		return newFromSettings(ctx, s, opts...)
	}
	return r
}

// newFromSettings is Registration's constructor; extra options come after
// those of the settings.
func newFromSettings(_ context.Context, s *provider.Settings, extra ...Option) (provider.Provider, error) {
	num := func(name string) int { return int(s.Int(name, 1)) }
	orZero := func(name string) int { return int(s.Int(name, 0)) }
	def := Limits{Pids: num("LOCAL_PIDS"), MemoryMB: num("LOCAL_MEMORY_MB"), WorkspaceMB: orZero("LOCAL_WORKSPACE_MB"), OpenFiles: num("LOCAL_OPEN_FILES")}
	maxLimits := Limits{Pids: num("LOCAL_MAX_PIDS"), MemoryMB: num("LOCAL_MAX_MEMORY_MB"), WorkspaceMB: num("LOCAL_MAX_WORKSPACE_MB"), OpenFiles: num("LOCAL_MAX_OPEN_FILES")}
	host := Limits{Pids: orZero("LOCAL_HOST_PIDS"), MemoryMB: orZero("LOCAL_HOST_MEMORY_MB"), WorkspaceMB: orZero("LOCAL_HOST_WORKSPACE_MB")}
	tenant := Limits{Pids: orZero("LOCAL_TENANT_PIDS"), MemoryMB: orZero("LOCAL_TENANT_MEMORY_MB"), WorkspaceMB: orZero("LOCAL_TENANT_WORKSPACE_MB")}
	checkLimits(s, def, maxLimits)
	uidBase, uidCount := num("LOCAL_UID_BASE"), num("LOCAL_UID_COUNT")
	if int64(uidBase)+int64(uidCount) > 1<<31-1 {
		s.Fail(errors.New("LOCAL_UID_BASE + LOCAL_UID_COUNT must not exceed 2147483647"))
	}
	cgroup := s.String("LOCAL_CGROUP_PARENT")
	if !cgroupParentPattern.MatchString(cgroup) {
		s.Fail(fmt.Errorf("LOCAL_CGROUP_PARENT=%q: want 1 to 63 letters, digits, '.', '_' or '-', not starting with '.'", cgroup))
	}
	pool, err := netip.ParsePrefix(s.String("LOCAL_EGRESS_POOL"))
	if err != nil || egress.CheckPool(pool) != nil {
		s.Fail(fmt.Errorf("LOCAL_EGRESS_POOL=%q: want an IPv4 network of /28 or larger such as %s", s.String("LOCAL_EGRESS_POOL"), DefaultEgressPool))
	}
	procMax := cmp.Or(int(s.Int(provider.SettingProcessMax, 0)), DefaultProcessMax)
	procOutput := cmp.Or(s.Int(provider.SettingProcessOutput, 0), DefaultProcessOutput)
	images, err := ParseImages(s.String("LOCAL_IMAGES"))
	if err != nil {
		s.Fail(err)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	opts := []Option{AllowHostNetwork(s.Bool("LOCAL_ALLOW_HOST_NETWORK")),
		WithLimits(def, maxLimits), AllowUnlimited(s.Bool("LOCAL_ALLOW_UNLIMITED")),
		WithUIDRange(uidBase, uidCount), EgressPool(pool), WithImages(images...),
		WithHostShare(host, tenant), WithCgroupParent(cgroup), WithExecServer(s.Bool("LOCAL_EXEC_SERVER")),
		WithProcessLimits(procMax, procOutput)}
	p, err := New(s.String("LOCAL_STATE_DIR"), append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkLimits records default limits that contradict their maxima.
func checkLimits(s *provider.Settings, def, maxLimits Limits) {
	if def.Pids > maxLimits.Pids || def.MemoryMB > maxLimits.MemoryMB {
		s.Fail(errors.New("LOCAL_PIDS and LOCAL_MEMORY_MB must not exceed LOCAL_MAX_PIDS and LOCAL_MAX_MEMORY_MB"))
	}
	if def.OpenFiles > maxLimits.OpenFiles {
		s.Fail(fmt.Errorf("LOCAL_OPEN_FILES (%d) must not exceed LOCAL_MAX_OPEN_FILES (%d)", def.OpenFiles, maxLimits.OpenFiles))
	}
	if def.WorkspaceMB > maxLimits.WorkspaceMB {
		s.Fail(fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must not exceed LOCAL_MAX_WORKSPACE_MB (%d)", def.WorkspaceMB, maxLimits.WorkspaceMB))
	}
	if w := def.WorkspaceMB; w > 0 && w < MinWorkspaceMB {
		s.Fail(fmt.Errorf("LOCAL_WORKSPACE_MB (%d) must be 0 (no limit) or at least %d", w, MinWorkspaceMB))
	}
}
