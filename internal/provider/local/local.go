// Package local is the provider of real sandboxes on the host Tether runs
// on, isolated with Linux namespaces through bubblewrap (bwrap).
//
// Each sandbox is a bwrap process tree with its own pid, mount, ipc and uts
// namespaces (and, unless params.network is "host", its own network
// namespace: with only loopback, or for "allowlist" one with a link to the
// host filtered outside the sandbox, see egress.go). Its root holds the
// host's system folders and a curated /etc, read-only, or, with
// params.image, an image the operator registered (image.go); /workspace is
// a private writable folder kept under the provider's state directory, or,
// with a size limit, a file system of its own mounted there
// (workspace.go); /tmp is a private tmpfs. The sandbox's pid 1
// (bwrap's init) lives until Destroy kills it, and with it every process in
// the sandbox, including background processes that exec started.
//
// State lives in the state directory, one folder per sandbox named by its
// id: meta.json (what is needed to find the sandbox again), workspace/ and,
// with a size limit, workspace.img; images/ holds unpacked tarball images.
// Sandboxes are not tied to the Tether process: they survive its crash and
// are found again by List, so the janitor can reconcile them.
//
// Commands run inside a sandbox through nsenter (util-linux) and the
// sandbox's /bin/sh, with every capability dropped and no_new_privs set.
// Every process of a sandbox runs as a host uid of its own (uid.go) and
// under a seccomp filter (seccomp.go); exec output comes through pipes,
// bounded in memory (outputcap).
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/sandbox"
)

// Name is the provider's name.
const Name = "local"

// WorkDir is the sandbox's writable working directory.
const WorkDir = "/workspace"

// Provider runs sandboxes on this host. It is safe for concurrent use.
type Provider struct {
	dir      string
	bwrap    string
	nsenter  string
	sleep    string // the host's, which each sandbox's keeper runs (keeper.go)
	problem  string // why the provider is unavailable, if it is
	maxSetup int    // bytes of setup output kept in the error

	// waiters reap the bwrap processes this Provider started; each lives as
	// long as its sandbox.
	mu      sync.Mutex
	waiters map[string]chan struct{}

	// locks serialise Create and Destroy per sandbox within this process.
	locks idLocks

	// hostNetwork allows params.network "host" (see AllowHostNetwork).
	hostNetwork bool
	// egress runs params.network "allowlist" (egress.go).
	egress egress
	// workspace size-limits sandboxes' /workspace (workspace.go).
	workspace workspaceFS
	// cg places sandboxes in control groups; nil when the host has none
	// Tether can manage and the operator allowed running without.
	cg *cgroups
	// limits are the defaults and the maxima of a sandbox's limits.
	limits, maxLimits Limits
	// hostShare is what all sandboxes together may reserve of the host,
	// tenantShare what one tenant's may (0: no cap but the host's), and
	// ledger what they hold (ceiling.go); cgroupParent names the control
	// group capped at the host share.
	hostShare, tenantShare Limits
	ledger                 ledger
	cgroupParent           string
	// unlimited allows sandboxes without kernel limits (AllowUnlimited).
	unlimited bool
	// procMasks are bwrap's options that mask the host's files in a
	// sandbox's /proc (procmask.go).
	procMasks []string
	// sh is the host's shell, which the probe runs under the exec filter.
	sh string
	// sandboxFilter is the seccomp filter bwrap installs in each sandbox,
	// execFilter the one of the commands that enter it (seccomp.go); nil
	// on architectures without one.
	sandboxFilter, execFilter []unix.SockFilter
	// uidBase and uidCount are the host uids sandboxes run as, one each
	// (uid.go).
	uidBase, uidCount int
	// imageList are the images WithImages registered, images those ready
	// for sandboxes by name (image.go).
	imageList []Image
	images    map[string]*image
}

// Default limits of a sandbox, and their maxima, unless WithLimits says
// otherwise.
const (
	DefaultPids         = 256
	DefaultOpenFiles    = 1024
	DefaultMaxOpenFiles = 65536
	minOpenFiles        = 64
	DefaultMaxPids      = 4096
	DefaultMemoryMB     = 512
	DefaultMaxMemoryMB  = 8192
	minPids, minMemMB   = 16, 32
)

// WithLimits sets the limits a sandbox gets when its create does not ask
// for others (params.pids, params.memory_mb, params.workspace_mb,
// params.open_files), and the most it may ask for. A default WorkspaceMB of
// 0 leaves /workspace without a size limit unless the create asks for one;
// OpenFiles of 0 in both keeps the default open-files limits.
func WithLimits(def, maxLimits Limits) Option {
	return func(p *Provider) {
		if def.OpenFiles == 0 && maxLimits.OpenFiles == 0 {
			def.OpenFiles, maxLimits.OpenFiles = p.limits.OpenFiles, p.maxLimits.OpenFiles
		}
		p.limits, p.maxLimits = def, maxLimits
	}
}

// AllowUnlimited lets the provider run sandboxes on a host where it cannot
// enforce resource limits (no control groups it can manage). Off by
// default: such a host reports the provider unavailable, since one
// sandbox's fork storm or memory hog would then take the whole host.
func AllowUnlimited(allow bool) Option {
	return func(p *Provider) { p.unlimited = allow }
}

// Option configures a Provider.
type Option func(*Provider)

// AllowHostNetwork lets creates ask for params.network "host": the sandbox
// then shares the host's network namespace, and with it every service
// listening on the host's loopback (Postgres and Tether among them), so
// only an operator who trusts every tenant should turn it on. Off by
// default: a create that asks for it is refused with FORBIDDEN.
func AllowHostNetwork(allow bool) Option {
	return func(p *Provider) { p.hostNetwork = allow }
}

// New returns a provider keeping its sandboxes under dir. A host without
// bubblewrap (or where it cannot create namespaces) still gets a provider:
// it reports itself unavailable, with the reason, and refuses to create.
// An image (WithImages) that cannot be used is an error.
func New(dir string, opts ...Option) (*Provider, error) {
	if dir == "" {
		return nil, errors.New("local: state directory not set")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: state directory: %w", err)
	}
	// Traversable, not readable, by the sandbox user: bwrap, which runs as
	// that user, must reach each workspace, and no one else may list them.
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, fmt.Errorf("local: state directory: %w", err)
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return nil, fmt.Errorf("local: state directory: %w", err)
	}
	p := &Provider{dir: abs, maxSetup: 8 << 10, waiters: map[string]chan struct{}{},
		limits:    Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB, WorkspaceMB: DefaultWorkspaceMB, OpenFiles: DefaultOpenFiles},
		maxLimits: Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: DefaultMaxWorkspaceMB, OpenFiles: DefaultMaxOpenFiles},
		uidBase:   DefaultUIDBase, uidCount: DefaultUIDCount, cgroupParent: defaultCgroupParent}
	p.sandboxFilter, p.execFilter = seccompFilter(false), seccompFilter(true)
	for _, opt := range opts {
		opt(p)
	}
	p.hostShare = hostShareDefaults(p.hostShare)
	p.capToShare(abs)
	masks, maskErr := prepareProcMasks()
	p.procMasks = masks
	var missing []string
	if err := p.prepareImages(); err != nil {
		return nil, err
	}
	for name, dst := range map[string]*string{"bwrap": &p.bwrap, "nsenter": &p.nsenter, "sh": &p.sh, "sleep": &p.sleep} {
		path, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		*dst = path
	}
	cg, cgErr := detectCgroups(p.cgroupParent)
	if cgErr == nil {
		cgErr = cg.setCeiling(p.hostShare)
	}
	switch {
	case len(missing) > 0:
		p.problem = fmt.Sprintf("missing on this host: %s (install the Debian packages bubblewrap and util-linux)", strings.Join(missing, ", "))
	case cgErr != nil && !p.unlimited:
		p.problem = fmt.Sprintf("cannot enforce resource limits on this host (%v): a sandbox could exhaust it; run Tether as root on a host with cgroups, or let sandboxes run without limits (LOCAL_ALLOW_UNLIMITED=true)", cgErr)
	case maskErr != nil:
		p.problem = fmt.Sprintf("cannot mask the host's files in sandboxes' /proc (Tether must run as root for the local provider): %v", maskErr)
	default:
		if cgErr == nil {
			p.cg = cg
		}
		p.problem = p.probe()
	}
	if p.problem == "" {
		var errs []error
		for _, name := range p.imageNames() {
			if reason := p.probeSandbox(Params{Image: name}); reason != "" {
				errs = append(errs, fmt.Errorf("local: image %q: a sandbox of it does not start (it needs a /bin/sh that runs): %s", name, reason))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	p.egress.detect(p.problem)
	p.workspace.detect(p.dir, p.problem)
	return p, nil
}

// outputNote describes exec output, for Info.
const outputNote = "exec output: read through pipes and never stored on the host; past the server's cap (MAX_EXEC_OUTPUT) the first and last parts are kept, with \"[tether: N bytes of output omitted]\" between them"

// limitsNote says which resource limits are in force, for Info.
func (p *Provider) limitsNote() string {
	files := fmt.Sprintf("open files %d per process (params.open_files, at most %d)", p.limits.OpenFiles, p.maxLimits.OpenFiles)
	if p.cg == nil {
		return "resource limits: none of the control groups' enforced on this host (the operator allowed sandboxes without them); " + files
	}
	kind := "cgroup v1"
	if p.cg.v2 {
		kind = "cgroup v2"
	}
	return fmt.Sprintf("resource limits (%s, per sandbox): pids %d (params.pids, at most %d), memory incl. /tmp %d MiB (params.memory_mb, at most %d), a fair CPU share; %s",
		kind, p.limits.Pids, p.maxLimits.Pids, p.limits.MemoryMB, p.maxLimits.MemoryMB, files)
}

// probeDir is the folder under the state directory where probe builds its
// sandbox; not a sandbox id, so List and the janitor never see it.
const probeDir = ".probe"

// probe checks the host: the uid range, the state folder, a sandbox of the
// host's system folders, and commands under the exec filter. It returns
// why the provider cannot work, or "".
func (p *Provider) probe() string {
	if reason := p.checkUIDRange(); reason != "" {
		return reason
	}
	if blocked := untraversable(p.dir); blocked != "" {
		return fmt.Sprintf("the state folder %s is not reachable by the sandbox users (uids %d to %d): %s needs o+x (chmod o+x %s), or set LOCAL_STATE_DIR to a folder below reachable ones",
			p.dir, p.uidBase, p.uidBase+p.uidCount-1, blocked, blocked)
	}
	if reason := p.probeSandbox(Params{}); reason != "" {
		return reason
	}
	// Commands enter sandboxes under the exec filter, from a thread that
	// holds it: that must work here too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	//nolint:noctx // run kills it when ctx ends
	if _, err := p.run(ctx, &sandboxCmd{Cmd: exec.Command(p.sh, "-c", "true")}); err != nil {
		return fmt.Sprintf("cannot start commands under a seccomp filter: %v", err)
	}
	return ""
}

// probeSandbox starts a sandbox of prm's root the way Create does (the
// same bwrap arguments, as the same user, with a workspace under the state
// folder) and runs its sh in it. It returns why that fails, or "".
func (p *Provider) probeSandbox(prm Params) string {
	dir := filepath.Join(p.dir, probeDir)
	defer func() { _ = os.RemoveAll(dir) }()
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return fmt.Sprintf("cannot make a workspace under %s: %v", p.dir, err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Sprintf("cannot make a workspace under %s: %v", p.dir, err)
	}
	uid, err := p.claimUID(dir)
	if err != nil {
		return fmt.Sprintf("cannot take a sandbox uid: %v", err)
	}
	defer func() { _ = releaseUID(uid, dir) }()
	if err := os.Chown(ws, uid, uid); err != nil {
		return fmt.Sprintf("cannot hand a workspace to uid %d (Tether must run as root for the local provider): %v", uid, err)
	}
	if err := writeSandboxEtc(dir, uid); err != nil {
		return fmt.Sprintf("cannot write a sandbox's /etc/passwd under %s: %v", p.dir, err)
	}
	filterArgs, filter, err := p.seccompArgs(3)
	if err != nil {
		return fmt.Sprintf("cannot pass bubblewrap the seccomp filter: %v", err)
	}
	var files []*os.File
	if filter != nil {
		defer func() { _ = filter.Close() }()
		files = append(files, filter)
	}
	args, data, err := p.bwrapArgs(ws, "sbx-probe", prm, Limits{}, 3+len(files))
	if err != nil {
		return fmt.Sprintf("cannot list the root's folders: %v", err)
	}
	dataFiles, err := openAll(data)
	if err != nil {
		return fmt.Sprintf("cannot pass bubblewrap a sandbox's own /etc files: %v", err)
	}
	defer closeAll(dataFiles)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bwrap, append(append(args, filterArgs...), "--", "/bin/sh", "-c", "exit 0")...)
	cmd.Env = sandboxEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxCredential(uid)}
	files = append(files, dataFiles...)
	cmd.ExtraFiles = files
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Sprintf("bubblewrap cannot create a sandbox here: %s", msg)
	}
	return ""
}

// untraversable returns the first folder on the way to dir (dir included)
// that the sandbox users, who own none of them, cannot enter (no o+x), or
// "".
func untraversable(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		if err != nil || info.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// defaultPath is PATH inside sandboxes unless the sandbox's env sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sandboxEnv is the whole environment of every process Tether starts for a
// sandbox (bwrap and so the sandbox's init, nsenter, the probe).
// Tether's own environment holds its secrets (DATABASE_URL,
// BOOTSTRAP_API_KEY) and must never be inherited: a process in the sandbox
// can read the environment of every other one through /proc.
func sandboxEnv() []string {
	return []string{"PATH=" + defaultPath, "HOME=" + WorkDir, "LANG=C.UTF-8", "TERM=dumb"}
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// HostBound is true: a local sandbox lives on the host that made it.
func (p *Provider) HostBound() bool { return true }

// Info implements sandbox.Provider.
func (p *Provider) Info(context.Context) sandbox.ProviderInfo {
	var images []sandbox.ProviderImage
	for _, name := range p.imageNames() {
		images = append(images, sandbox.ProviderImage{Name: name, Source: p.images[name].Source()})
	}
	return sandbox.ProviderInfo{
		Name:      Name,
		Available: p.problem == "",
		Reason:    p.problem,
		Exec:      true,
		Files:     true,
		WorkDir:   WorkDir,
		Images:    images,
		Notes: []string{
			"isolation: bubblewrap; own user, pid, mount, ipc and uts namespaces; processes run without capabilities; the root holds the host's system folders (/usr, /bin, /lib*, /sbin) and a curated /etc, read-only, and nothing else of the host's, or an image (params.image); private /workspace and /tmp",
			p.imageNote(),
			p.uidNote(),
			p.seccompNote(),
			p.networkNote(),
			p.egress.note(),
			p.limitsNote(),
			p.shareNote(),
			p.workspace.note(p.limits.WorkspaceMB, p.maxLimits.WorkspaceMB),
			outputNote,
		},
	}
}

// Params are the local provider's create params.
type Params struct {
	// Network is "none" (default: a private network namespace with only
	// loopback), "host", or "allowlist" (only what Allow names; egress.go).
	Network string `json:"network,omitempty"`
	// Allow lists what an "allowlist" sandbox may reach: host names, IPv4
	// addresses or CIDRs, each with an optional ":port".
	Allow []string `json:"allow,omitempty"`
	// Pids, MemoryMB and WorkspaceMB ask for other resource limits than
	// the defaults, within the server's maxima.
	Pids        int `json:"pids,omitempty"`
	MemoryMB    int `json:"memory_mb,omitempty"`
	WorkspaceMB int `json:"workspace_mb,omitempty"`
	// OpenFiles asks for another open-files limit per process.
	OpenFiles int `json:"open_files,omitempty"`
	// Image names the image (WithImages) that is the sandbox's root; none
	// gives it the host's system folders.
	Image string `json:"image,omitempty"`
}

func (p *Provider) networkNote() string {
	if p.hostNetwork {
		return "network: isolated (loopback only) by default; params.network=\"host\" shares the host's (enabled by the operator)"
	}
	return "network: isolated (loopback only); params.network=\"host\" is disabled by the operator"
}

// parseParams decodes and checks create params, including what the
// operator allows.
func (p *Provider) parseParams(raw json.RawMessage) (Params, error) {
	var prm Params
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return prm, nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&prm); err != nil {
		msg := "not a valid JSON object"
		if rest, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg = "unknown field " + rest + " (known: network, allow, pids, memory_mb, workspace_mb, open_files, image)"
		}
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params for provider local: %s", msg)
	}
	switch prm.Network {
	case "", "none", networkAllowlist:
	case "host":
		if !p.hostNetwork {
			return prm, sandbox.Errorf(sandbox.CodeForbidden,
				"params.network \"host\" is disabled on this server: it would share the host's network, and every service on its loopback, with the sandbox; only the operator can enable it")
		}
	default:
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.network must be \"none\", \"host\" or \"allowlist\" (got %q)", prm.Network)
	}
	if err := p.egress.checkParams(prm); err != nil {
		return prm, err
	}
	if prm.Image != "" && p.images[prm.Image] == nil {
		known := "none are registered on this server"
		if names := p.imageNames(); len(names) > 0 {
			known = "known: " + strings.Join(names, ", ")
		}
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.image %q is not an image of this server (%s)", prm.Image, known)
	}
	if prm.Pids != 0 && (prm.Pids < minPids || prm.Pids > p.maxLimits.Pids) {
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.pids must be between %d and %d", minPids, p.maxLimits.Pids)
	}
	if prm.OpenFiles != 0 && (prm.OpenFiles < minOpenFiles || prm.OpenFiles > p.maxLimits.OpenFiles) {
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.open_files must be between %d and %d", minOpenFiles, p.maxLimits.OpenFiles)
	}
	if prm.MemoryMB != 0 && (prm.MemoryMB < minMemMB || prm.MemoryMB > p.maxLimits.MemoryMB) {
		return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.memory_mb must be between %d and %d", minMemMB, p.maxLimits.MemoryMB)
	}
	if prm.WorkspaceMB != 0 {
		if p.workspace.problem != "" {
			return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.workspace_mb: /workspace size limits are unavailable on this host (%s)", p.workspace.problem)
		}
		if prm.WorkspaceMB < MinWorkspaceMB || prm.WorkspaceMB > p.maxLimits.WorkspaceMB {
			return prm, sandbox.Errorf(sandbox.CodeInvalidRequest, "params.workspace_mb must be between %d and %d", MinWorkspaceMB, p.maxLimits.WorkspaceMB)
		}
	}
	return prm, nil
}

// limitsFor are the limits of a sandbox created with prm, as far as the
// host enforces them (the others are zero).
func (p *Provider) limitsFor(prm Params) Limits {
	lim := p.limits
	if prm.Pids != 0 {
		lim.Pids = prm.Pids
	}
	if prm.MemoryMB != 0 {
		lim.MemoryMB = prm.MemoryMB
	}
	if prm.WorkspaceMB != 0 {
		lim.WorkspaceMB = prm.WorkspaceMB
	}
	if prm.OpenFiles != 0 {
		lim.OpenFiles = prm.OpenFiles
	}
	if p.cg == nil {
		lim.Pids, lim.MemoryMB = 0, 0
	}
	if p.workspace.problem != "" {
		lim.WorkspaceMB = 0
	}
	return lim
}

// ValidateParams implements sandbox.Provider.
func (p *Provider) ValidateParams(raw json.RawMessage) error {
	_, err := p.parseParams(raw)
	return err
}

// meta is what the provider records of a sandbox, in meta.json.
type meta struct {
	SandboxID string `json:"sandbox_id"`
	// InitPID is the sandbox's pid 1 as the host sees it, and InitStart its
	// start time in clock ticks since boot, which tells it from a later
	// process that reuses the pid.
	InitPID   int    `json:"init_pid"`
	InitStart uint64 `json:"init_start"`
	// UID is the host uid and gid the sandbox runs as (uid.go); zero in
	// sandboxes made before each had its own, which run as legacyUID.
	UID int               `json:"uid,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Tenant owns the sandbox; its limits count against the tenant's share
	// of the host (ceiling.go).
	Tenant string `json:"tenant,omitempty"`
	// Limits are the sandbox's resource limits; zero when none are
	// enforced.
	Limits Limits `json:"limits"`
	// Image is the image the sandbox's root is (params.image); empty for
	// the host's system folders. Commands enter the root of the sandbox's
	// init, so they see it whatever images a later Tether registers.
	Image     string    `json:"image,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Ready is set once setup succeeded: a sandbox found without it was
	// interrupted mid-creation and is made again.
	Ready bool `json:"ready"`
}

func (p *Provider) sandboxDir(id string) string { return filepath.Join(p.dir, id) }

func (p *Provider) lock(id string) func() { return p.locks.lock(id) }

// idLocks are one lock per sandbox id that a call holds or waits for, and
// no more: a create holds its sandbox's lock through its setup, which may
// take minutes, so a lock shared by two ids (a fixed set striped by hash,
// as before) made one tenant's create wait for another's setup.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int // calls holding or waiting for mu; guarded by idLocks.mu
}

// lock takes id's lock and returns what gives it back.
func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k := l.locks[id]
	if k == nil {
		k = &idLock{}
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// sandboxProcesses finds the bwrap processes (the monitor and the
// sandbox's init) of every sandbox under the state folder, by their command
// line, which binds the sandbox's workspace folder and so names its id. It
// finds a sandbox even when its metadata was never written: Tether may die
// between starting bwrap and recording the pid.
func (p *Provider) sandboxProcesses() (map[string][]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	prefix, suffix := p.dir+"/", "/workspace"
	out := map[string][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "bwrap" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] != "--bind" || !strings.HasPrefix(args[i+1], prefix) || !strings.HasSuffix(args[i+1], suffix) {
				continue
			}
			id := strings.TrimSuffix(strings.TrimPrefix(args[i+1], prefix), suffix)
			if sandbox.ValidID(id) {
				out[id] = append(out[id], pid)
			}
			break
		}
	}
	return out, nil
}

// processRunning reports whether pid runs (and is not a zombie).
func processRunning(pid int) bool {
	_, err := processStart(pid)
	return err == nil
}

func (p *Provider) readMeta(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(p.sandboxDir(id), "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("meta.json: %w", err)
	}
	return m, nil
}

func (p *Provider) writeMeta(m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(p.sandboxDir(m.SandboxID), "meta.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// alive reports whether the sandbox's init still runs.
func (m meta) alive() bool {
	if m.InitPID <= 0 {
		return false
	}
	start, err := processStart(m.InitPID)
	return err == nil && start == m.InitStart
}

// processStart returns the start time of pid, in clock ticks since boot.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, errors.New("process is a zombie")
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 overall
}

// Create implements sandbox.Provider.
func (p *Provider) Create(ctx context.Context, spec sandbox.CreateSpec) (sandbox.Resource, error) {
	if p.problem != "" {
		return sandbox.Resource{}, fmt.Errorf("local: provider unavailable: %s", p.problem)
	}
	if !sandbox.ValidID(spec.SandboxID) {
		return sandbox.Resource{}, fmt.Errorf("local: create: invalid sandbox id %q", spec.SandboxID)
	}
	prm, err := p.parseParams(spec.Params)
	if err != nil {
		return sandbox.Resource{}, err
	}
	unlock := p.lock(spec.SandboxID)
	defer unlock()

	if m, err := p.readMeta(spec.SandboxID); err == nil && m.Ready && m.alive() {
		return p.resource(m), nil // idempotent: it exists already
	}
	// Leftovers of an interrupted create: start over. Only where its
	// folder is: an attempt makes the folder before anything else of the
	// sandbox (its uid, groups, workspace, network, processes) and a destroy
	// removes it after all of those, so without it there is nothing to
	// clear, and no need to look through /proc for processes.
	dir := p.sandboxDir(spec.SandboxID)
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		if err := p.destroyLocked(ctx, spec.SandboxID); err != nil {
			return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: clearing an interrupted attempt: %w", err))
		}
	}

	lim := p.limitsFor(prm)
	if err := p.reserve(spec.SandboxID, spec.Tenant, lim); err != nil {
		return sandbox.Resource{}, err
	}
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		p.unreserve(spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	uid, err := p.claimUID(dir)
	if err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
	}
	m := meta{SandboxID: spec.SandboxID, UID: uid, Env: spec.Env, Tenant: spec.Tenant, Limits: lim, Image: prm.Image, CreatedAt: time.Now().UTC()}
	// Recorded at once, so that whatever fails next, destroy frees the uid.
	if err := p.writeMeta(m); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		_ = releaseUID(uid, dir)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if m.Limits.WorkspaceMB > 0 {
		if err := p.workspace.create(ctx, dir, uid, m.Limits.WorkspaceMB); err != nil {
			_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
			return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
		}
	}
	// The folder, or the root of the workspace's own file system.
	if err := os.Chown(ws, uid, uid); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if err := os.Chmod(ws, 0o700); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if err := writeSandboxEtc(dir, uid); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if p.cg != nil {
		if err := p.cg.create(spec.SandboxID, m.Limits); err != nil {
			_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
			return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
		}
	}
	if err := p.setupEgress(ctx, spec.SandboxID, prm); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	pid, err := p.start(spec.SandboxID, uid, prm, m.Limits)
	if err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
	}
	m.InitPID = pid
	if m.InitStart, err = processStart(pid); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: sandbox exited at once: %w", err))
	}
	// Before anything of the sandbox's runs: then nothing in it can end it
	// by killing the init's other children.
	if err := p.startKeeper(pid, m.Limits); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
	}
	// Without setup, the sandbox is ready now: recorded once, below.
	// (Tether dying before that leaves a folder whose processes destroy
	// finds by their command line.)
	if spec.Setup != "" {
		if err := p.writeMeta(m); err != nil {
			_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
			return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
		}
		timeout := 10 * time.Minute
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		res, err := p.exec(ctx, m, sandbox.ExecRequest{Command: spec.Setup, Timeout: timeout, MaxOutput: p.maxSetup})
		if err != nil || res.ExitCode != 0 || res.TimedOut {
			// The sandbox is destroyed here; the executor's release confirms it.
			_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
			if err != nil {
				return sandbox.Resource{}, fmt.Errorf("local: setup: %w", err)
			}
			if res.TimedOut {
				return sandbox.Resource{}, fmt.Errorf("setup timed out; output:\n%s", res.Output)
			}
			return sandbox.Resource{}, fmt.Errorf("setup exited with status %d; output:\n%s", res.ExitCode, res.Output)
		}
	}
	m.Ready = true
	if err := p.writeMeta(m); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	return p.resource(m), nil
}

func (p *Provider) resource(m meta) sandbox.Resource {
	return sandbox.Resource{
		SandboxID:  m.SandboxID,
		ProviderID: "local-" + strconv.Itoa(m.InitPID),
		WorkDir:    WorkDir,
		CreatedAt:  m.CreatedAt,
		Defunct:    !m.alive(),
	}
}

// systemDirs are the host's top-level folders a sandbox sees, read-only:
// what programs need to run, and nothing of the host's data.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcEntries are the entries of the host's /etc a sandbox sees, read-only:
// what the C library, shells, TLS and language runtimes read. Not the
// host's identity (hostname, machine-id), its users (passwd and group are
// the sandbox's own), its services' configuration or their secrets.
var etcEntries = []string{
	"nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	"ssl/certs", "ca-certificates", "ca-certificates.conf", "localtime", "timezone", "hosts", "host.conf",
	"os-release", "debian_version", "lsb-release", "mime.types", "magic", "magic.mime",
	"protocols", "services", "inputrc", "bash.bashrc", "profile", "shells", "locale.alias",
	"login.defs", "gai.conf", "networks", "perl", "python3", "java-17-openjdk", "java-21-openjdk",
}

// openAll opens each of paths for reading; on an error none stays open.
func openAll(paths []string) ([]*os.File, error) {
	files := make([]*os.File, 0, len(paths))
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// bwrapArgs builds the sandbox's options (everything before bwrap's "--"):
// an empty root holding read-only binds of the host's system folders and a
// curated /etc, or of prm.Image's entries, the sandbox's own /etc/passwd
// and /etc/group, fresh /proc, /dev, /tmp and /run, and workspace at
// /workspace. Create and the probe share them.
//
// The sandbox's own files (its /etc/passwd and /etc/group, an allow-list
// sandbox's /etc/hosts) are copied in from descriptors, dataFD and on, that
// the caller opens from data, in order: bound from the state folder, they
// would name it in the sandbox's mount table.
func (p *Provider) bwrapArgs(workspace, hostname string, prm Params, lim Limits, dataFD int) (args, data []string, err error) {
	args = []string{"--tmpfs", "/"}
	if prm.Image != "" {
		img := p.images[prm.Image]
		if img == nil {
			return nil, nil, fmt.Errorf("image %q is not registered", prm.Image)
		}
		own := map[string]bool{"passwd": true, "group": true}
		if prm.Network == networkAllowlist {
			own["hosts"] = true // egressHosts'
		}
		rootArgs, err := imageRootArgs(img.root, own)
		if err != nil {
			return nil, nil, err
		}
		args, data = sandboxArgs(append(args, rootArgs...), workspace, hostname, prm, lim, p.procMasks, dataFD)
		return args, data, nil
	}
	args, data = sandboxArgs(append(args, hostRootArgs()...), workspace, hostname, prm, lim, p.procMasks, dataFD)
	return args, data, nil
}

// hostRootArgs are bwrap's options that fill the sandbox's empty root with
// the host's system folders and a curated /etc, read-only.
func hostRootArgs() []string {
	var args []string
	for _, name := range systemDirs {
		host := "/" + name
		info, err := os.Lstat(host)
		switch {
		case err != nil:
			continue
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				continue
			}
			args = append(args, "--symlink", target, host)
		case info.IsDir():
			args = append(args, "--ro-bind", host, host)
		}
	}
	args = append(args, "--dir", "/etc")
	for _, name := range etcEntries {
		host := "/etc/" + name
		info, err := os.Lstat(host)
		switch {
		case err != nil:
			continue
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				continue
			}
			args = append(args, "--symlink", target, host)
		default:
			args = append(args, "--ro-bind", host, host)
		}
	}
	return args
}

// sandboxArgs are bwrap's options for what every sandbox has of its own,
// after args, which fill its root; procMasks mask files of its /proc. The
// files in data (see bwrapArgs) are read from descriptors dataFD and on.
func sandboxArgs(args []string, workspace, hostname string, prm Params, lim Limits, procMasks []string, dataFD int) (_, data []string) {
	etc := filepath.Join(filepath.Dir(workspace), "etc") // writeSandboxEtc's
	data = []string{filepath.Join(etc, "passwd"), filepath.Join(etc, "group")}
	dests := []string{"/etc/passwd", "/etc/group"}
	if hosts := egressHosts(workspace, prm); hosts != "" {
		data, dests = append(data, hosts), append(dests, "/etc/hosts")
	}
	for i, dest := range dests {
		args = append(args, "--ro-bind-data", strconv.Itoa(dataFD+i), dest)
	}
	args = append(args, "--proc", "/proc")
	args = append(args, procMasks...)
	args = append(args, "--dev", "/dev")
	if lim.MemoryMB > 0 {
		// /tmp counts against the sandbox's memory; it cannot be larger.
		args = append(args, "--size", strconv.FormatInt(int64(lim.MemoryMB)<<20, 10))
	}
	args = append(args, "--tmpfs", "/tmp", "--tmpfs", "/run",
		"--bind", workspace, WorkDir,
		"--remount-ro", "/",
		"--chdir", WorkDir,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--hostname", hostname,
		"--cap-drop", "ALL",
	)
	if prm.Network != "host" && prm.Network != networkAllowlist { // an allow-list sandbox starts in the namespace made for it
		args = append(args, "--unshare-net")
	}
	return args, data
}

// initScript is the sandbox's first process: it says it runs, then waits
// until the sandbox ends, needing nothing of the sandbox's root but /bin/sh
// (see start).
const initScript = `[ "$1" = 0 ] || ulimit -n "$1" || exit 126; echo ready; exec </dev/null >/dev/null 2>&1; while read -r _ <&4; do :; done`

// start launches the sandbox and returns the host pid of its init. The
// bwrap process is Tether's child (reaped by a waiter) but in a session of
// its own, so signals for Tether's process group do not reach it and it
// outlives Tether.
func (p *Provider) start(id string, uid int, prm Params, lim Limits) (int, error) {
	dataFD := 6 // after the info pipe, 3, the held pipe, 4 and 5, and the filter
	if p.sandboxFilter != nil {
		dataFD = 7
	}
	args, data, err := p.bwrapArgs(filepath.Join(p.sandboxDir(id), "workspace"), "sbx-"+id[len(id)-12:], prm, lim, dataFD) // the id's random end
	if err != nil {
		return 0, err
	}
	dataFiles, err := openAll(data)
	if err != nil {
		return 0, err
	}
	defer closeAll(dataFiles)
	// The init says when it runs: bwrap reports the child's pid (on fd 3)
	// before it has finished building the sandbox, and entering it earlier
	// would find a half-made mount namespace. Then it waits for ever with
	// nothing but the sandbox's sh: reading a pipe (fd 4) of which it holds
	// the only write end (fd 5) besides bwrap's.
	filterArgs, filter, err := p.seccompArgs(6) // after the info pipe, 3, and the held pipe, 4 and 5
	if err != nil {
		return 0, err
	}
	if filter != nil {
		defer func() { _ = filter.Close() }()
	}
	args = append(args, filterArgs...)
	args = append(args, "--info-fd", "3", "--", "/bin/sh", "-c", initScript, "sh", strconv.Itoa(lim.OpenFiles))
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer func() { _ = holdR.Close(); _ = holdW.Close() }()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer func() { _ = infoR.Close() }()
	logf, err := os.OpenFile(filepath.Join(p.sandboxDir(id), "bwrap.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		_ = infoW.Close()
		return 0, err
	}
	defer func() { _ = logf.Close() }()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		_ = infoW.Close()
		return 0, err
	}
	defer func() { _ = readyR.Close() }()
	//nolint:noctx // the sandbox outlives the request that creates it, and Tether itself
	cmd := exec.Command(p.bwrap, args...)
	cmd.Stdout, cmd.Stderr = readyW, logf
	cmd.ExtraFiles = []*os.File{infoW, holdR, holdW}
	if filter != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, filter)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, dataFiles...)
	cmd.Env = sandboxEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: sandboxCredential(uid)}
	// Started in the sandbox's groups (cgroups.enter): its init, and all
	// it will ever start, counted against its limits from the first.
	var groups []string
	if p.cg != nil && lim.Pids > 0 {
		groups = p.cg.dirs(id)
	}
	if err := startSandbox(id, prm, func() error {
		if len(groups) > 0 {
			done, err := p.cg.enter(groups, cmd.SysProcAttr)
			if err != nil {
				return err
			}
			defer done()
		}
		return cmd.Start()
	}); err != nil {
		_ = infoW.Close()
		_ = readyW.Close()
		return 0, err
	}
	_ = infoW.Close()
	_ = readyW.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reap bwrap when its sandbox ends
		close(done)
	}()
	p.mu.Lock()
	p.waiters[id] = done
	p.mu.Unlock()

	var info struct {
		ChildPID int `json:"child-pid"`
	}
	failed := func() (int, error) {
		if info.ChildPID > 0 {
			_ = syscall.Kill(info.ChildPID, syscall.SIGKILL) // the sandbox's init, and all in it
		}
		_ = cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(p.sandboxDir(id), "bwrap.log"))
		return 0, fmt.Errorf("bwrap did not start the sandbox: %s", strings.TrimSpace(string(log)))
	}
	if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPID <= 0 {
		return failed()
	}
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(readyR, line); err != nil || string(line) != "ready\n" {
		return failed()
	}
	return info.ChildPID, nil
}

// Destroy implements sandbox.Provider.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !sandbox.ValidID(sandboxID) {
		return fmt.Errorf("local: destroy: invalid sandbox id %q", sandboxID)
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	return p.destroyLocked(ctx, sandboxID)
}

// destroyLocked kills the sandbox's init, which takes every process of its
// pid namespace with it, waits for it to go, removes its network and
// control groups, unmounts its workspace and removes the sandbox's folder.
// Nothing to destroy is success.
func (p *Provider) destroyLocked(ctx context.Context, id string) error {
	dir := p.sandboxDir(id)
	procs, err := p.sandboxProcesses()
	if err != nil {
		return fmt.Errorf("local: destroy: finding the sandbox's processes: %w", err)
	}
	pids := procs[id]
	m, metaErr := p.readMeta(id)
	if metaErr == nil && m.alive() {
		pids = append(pids, m.InitPID)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("local: destroy: kill: %w", err)
		}
	}
	for _, pid := range pids {
		for processRunning(pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("local: destroy: waiting for the sandbox to exit: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	p.mu.Lock()
	done := p.waiters[id]
	delete(p.waiters, id)
	p.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("local: destroy: waiting for bwrap to exit: %w", ctx.Err())
		}
	}
	if err := p.teardownEgress(ctx, id); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	if p.cg != nil {
		if err := p.cg.remove(id); err != nil {
			return fmt.Errorf("local: destroy: %w", err)
		}
	}
	// Unmounted first: removing the folder would otherwise empty the
	// workspace file by file and then fail on its mount point.
	if err := clearWorkspace(ctx, dir); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("local: destroy: %w", err)
	}
	// Only now, with nothing of it left, may another sandbox take its uid.
	// (Without meta.json the claim, whose folder is gone, is taken back
	// when its turn comes.)
	if metaErr == nil {
		if err := releaseUID(m.UID, dir); err != nil {
			return fmt.Errorf("local: destroy: %w", err)
		}
	}
	p.unreserve(id)
	return nil
}

// List implements sandbox.Provider.
func (p *Provider) List(context.Context) ([]sandbox.Resource, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("local: list: %w", err)
	}
	procs, err := p.sandboxProcesses()
	if err != nil {
		return nil, fmt.Errorf("local: list: %w", err)
	}
	out := make([]sandbox.Resource, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() || !sandbox.ValidID(e.Name()) {
			continue
		}
		delete(procs, e.Name())
		m, err := p.readMeta(e.Name())
		if err != nil {
			// A folder without metadata is the start of a create, or its
			// remains: it is held, not running.
			m = meta{SandboxID: e.Name()}
			if info, err := e.Info(); err == nil {
				m.CreatedAt = info.ModTime().UTC()
			}
		}
		out = append(out, p.resource(m))
	}
	// Sandboxes that run without a folder: started by a Tether that died
	// before recording them, their folder since removed; and workspaces
	// whose loop device outlived their folder. Never a live sandbox's, so
	// the janitor destroys them.
	for id := range workspaceLeftovers(p.dir) {
		if _, err := os.Lstat(p.sandboxDir(id)); errors.Is(err, fs.ErrNotExist) {
			procs[id] = nil
		}
	}
	for id := range procs {
		out = append(out, sandbox.Resource{SandboxID: id, ProviderID: "local-orphan"})
	}
	return out, nil
}
