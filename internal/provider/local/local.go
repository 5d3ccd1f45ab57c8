// Package local is the provider of real sandboxes on the host Tether runs
// on, isolated with Linux namespaces through bubblewrap (bwrap). It is a
// provider that composes the host packages of internal/host, each owning
// one kind of host object: cgroup (control groups), seccomp (the system
// call filter), egress (allow-list networking), workspace (size-limited
// /workspace), uidpool (a host uid per sandbox), image (the sandbox's
// root) and outputcap (exec output held to a limit).
//
// Each sandbox is a bwrap process tree with its own pid, mount, ipc and uts
// namespaces (and, unless params.network is "host", its own network
// namespace: with only loopback, or for "allowlist" one with a link to the
// host filtered outside the sandbox, see network.go). Its root holds the
// host's system folders and a curated /etc, read-only, or, with
// params.image, an image the operator registered (image.go); /workspace is
// a private writable folder kept under the provider's state directory, or,
// with a size limit, a file system of its own mounted there; /tmp is a
// private tmpfs. The sandbox's pid 1 (bwrap's init) lives until Destroy
// kills it, and with it every process in the sandbox, including background
// processes that exec started.
//
// The files: create.go makes a sandbox, step by step with one rollback;
// destroy.go removes it and lists them; bwrap.go builds bwrap's arguments
// and starts the init; keeper.go keeps the init alive; exec.go runs
// commands and moves files, execsock.go and execserver.go are exec's
// server; launch.go starts every process Tether runs for
// a sandbox; params.go, state.go, ceiling.go (the host share), network.go,
// uid.go, image.go and procmask.go hold the rest.
//
// State lives in the state directory, one folder per sandbox named by its
// id: meta.json (what is needed to find the sandbox again), workspace/ and,
// with a size limit, workspace.img; images/ holds unpacked tarball images.
// Sandboxes are not tied to the Tether process: they survive its crash and
// are found again by List, so the janitor can reconcile them.
//
// An exec's command starts from the sandbox's exec server, its first
// process (execserver.go, execsock.go); other commands, and exec where
// there is no server, run inside a sandbox through nsenter (util-linux).
// Either way the sandbox's /bin/sh runs them, with every capability
// dropped and no_new_privs set.
// Every process of a sandbox runs as a host uid of its own and under a
// seccomp filter; exec output comes through pipes, bounded in memory.
package local

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/host/cgroup"
	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/host/seccomp"
	"github.com/tetherhq/tether/internal/host/uidpool"
	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
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

	// locks serialise Create, Destroy, Pause and Resume per sandbox within
	// this process.
	locks idLocks
	// starts serialise starting a command in a sandbox with freezing it
	// (pause.go).
	starts idLocks

	// hostNetwork allows params.network "host" (see AllowHostNetwork).
	hostNetwork bool
	// egress runs params.network "allowlist" (network.go): its links go
	// to proxy, which asks egressRules for each sandbox's rules, set from
	// their creates' params with secrets from secrets.
	egress      egress.Egress
	proxy       *egressproxy.Proxy
	egressRules EgressRules
	secrets     SecretSource
	// workspace size-limits sandboxes' /workspace (internal/host/workspace).
	workspace workspace.FS
	// cg places sandboxes in control groups; nil when the host has none
	// Tether can manage and the operator allowed running without.
	cg *cgroup.Groups
	// limits are the defaults and the maxima of a sandbox's limits.
	limits, maxLimits Limits
	// hostShare is what all sandboxes together may reserve of the host,
	// tenantShare what one tenant's sandboxes and snapshots may, and
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
	// execFilter the one of the commands that enter it (seccomp.Filter);
	// nil on architectures without one.
	sandboxFilter, execFilter []unix.SockFilter
	// uids are the host uids sandboxes run as, one each (uid.go).
	uids uidpool.Pool
	// imageList are the images WithImages registered, images those ready
	// for sandboxes by name (image.go).
	imageList []Image
	images    map[string]*registered
	// execServer gives new sandboxes an exec server (WithExecServer);
	// serverExe is this binary, which becomes it, and serverStatic tells
	// whether it needs no C library (so runs in an image's root too).
	execServer   bool
	serverExe    *os.File
	serverStatic bool
	// procMax and procOutput are the supervisor's limits per sandbox
	// (WithProcessLimits).
	procMax    int
	procOutput int64
	// moved counts the commands' shells Tether had to move into their
	// exec groups (Adopt) because they had not moved themselves
	// (serverScript), for the tests.
	moved atomic.Int64
}

// WithExecServer sets whether new sandboxes get an exec server
// (execserver.go), through which exec starts commands without entering
// the sandbox anew; on by default. Off, or where it cannot run (a binary
// linked against the C library, in a sandbox of an image), or once the
// sandbox's user killed it, exec enters the sandbox through nsenter.
func WithExecServer(on bool) Option {
	return func(p *Provider) { p.execServer = on }
}

// serverFor reports whether a sandbox of prm gets an exec server.
func (p *Provider) serverFor(prm Params) bool {
	return p.execServer && p.serverExe != nil && (prm.Image == "" || p.serverStatic)
}

// openServerExe opens this binary for sandboxes' exec servers, and tells
// whether it is static (has no ELF interpreter).
func (p *Provider) openServerExe() {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return
	}
	e, err := elf.NewFile(f)
	if err != nil {
		_ = f.Close()
		return
	}
	p.serverExe, p.serverStatic = f, true
	for _, prog := range e.Progs {
		if prog.Type == elf.PT_INTERP {
			p.serverStatic = false
		}
	}
}

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

// stateDir makes the state folder, traversable but not readable by the
// sandbox user, and keeps what Tether inherited out of every sandbox.
func stateDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("local: state directory not set")
	}
	// Go opens its own descriptors close-on-exec, but not the ones this
	// process inherited (a lock file a wrapper such as flock(1) holds, a
	// supervisor's socket): every sandbox process would get those. Mark
	// them all close-on-exec before the first sandbox starts.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return "", fmt.Errorf("local: inherited descriptors: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("local: state directory: %w", err)
	}
	// Traversable, not readable, by the sandbox user: bwrap, which runs as
	// that user, must reach each workspace, and no one else may list them.
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return "", fmt.Errorf("local: state directory: %w", err)
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return "", fmt.Errorf("local: state directory: %w", err)
	}
	return abs, nil
}

// New returns a provider keeping its sandboxes under dir. A host without
// bubblewrap (or where it cannot create namespaces) still gets a provider:
// it reports itself unavailable, with the reason, and refuses to create.
// An image (WithImages) that cannot be used is an error.
func New(dir string, opts ...Option) (*Provider, error) {
	abs, err := stateDir(dir)
	if err != nil {
		return nil, err
	}
	p := &Provider{dir: abs, maxSetup: 8 << 10, waiters: map[string]chan struct{}{},
		limits:    Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB, WorkspaceMB: DefaultWorkspaceMB, OpenFiles: DefaultOpenFiles},
		maxLimits: Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: DefaultMaxWorkspaceMB, OpenFiles: DefaultMaxOpenFiles},
		uids:      uidpool.Pool{Base: DefaultUIDBase, Count: DefaultUIDCount}, cgroupParent: defaultCgroupParent,
		execServer: true, procMax: DefaultProcessMax, procOutput: DefaultProcessOutput}
	p.sandboxFilter, p.execFilter = seccomp.Filter(false), seccomp.Filter(true)
	for _, opt := range opts {
		opt(p)
	}
	if p.execServer {
		p.openServerExe()
	}
	p.deriveShares()
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
	cg, cgErr := cgroup.Detect(p.cgroupParent)
	if cgErr == nil {
		cgErr = cg.SetCeiling(p.hostShare.Pids, p.hostShare.MemoryMB)
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
	p.detectEgress()
	p.workspace.Detect(p.dir, p.problem)
	return p, nil
}

// limitsNote says which resource limits are in force, for Info.
func (p *Provider) limitsNote() string {
	files := fmt.Sprintf("open files %d per process (params.open_files, at most %d)", p.limits.OpenFiles, p.maxLimits.OpenFiles)
	if p.cg == nil {
		return "resource limits: none of the control groups' enforced on this host (the operator allowed sandboxes without them); " + files
	}
	kind := "cgroup v1"
	if p.cg.V2() {
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
	if reason := p.uids.Check(); reason != "" {
		return reason
	}
	if blocked := hostos.Untraversable(p.dir); blocked != "" {
		return fmt.Sprintf("the state folder %s is not reachable by the sandbox users (uids %d to %d): %s needs o+x (chmod o+x %s), or set LOCAL_STATE_DIR to a folder below reachable ones",
			p.dir, p.uids.Base, p.uids.Last(), blocked, blocked)
	}
	if reason := p.probeSandbox(Params{}); reason != "" {
		return reason
	}
	// Commands enter sandboxes under the exec filter, from a thread that
	// holds it: that must work here too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	//nolint:noctx // run kills it when ctx ends
	cmd := exec.Command(p.sh, "-c", "true")
	cmd.Env = sandboxEnv() // never Tether's own, which holds its secrets
	if _, err := p.run(ctx, &sandboxCmd{Cmd: cmd}); err != nil {
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
	uid, err := p.uids.Claim(dir)
	if err != nil {
		return fmt.Sprintf("cannot take a sandbox uid: %v", err)
	}
	defer func() { _ = uidpool.Release(uid, dir) }()
	if err := os.Chown(ws, uid, uid); err != nil {
		return fmt.Sprintf("cannot hand a workspace to uid %d (Tether must run as root for the local provider): %v", uid, err)
	}
	if err := writeSandboxEtc(dir, uid, Limits{}); err != nil {
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: uidpool.Credential(uid)}
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

// sandboxEnv is the whole environment of every process Tether starts for a
// sandbox (bwrap and so the sandbox's init, nsenter, the probe).
// Tether's own environment holds its secrets (DATABASE_URL,
// BOOTSTRAP_API_KEY) and must never be inherited: a process in the sandbox
// can read the environment of every other one through /proc.
func sandboxEnv() []string {
	env := baseEnv()
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// baseEnv is sandboxEnv by name: what a command entering a sandbox starts
// from, before the sandbox's own environment and the request's.
func baseEnv() map[string]string {
	return map[string]string{"PATH": hostos.DefaultPath, "HOME": WorkDir, "LANG": "C.UTF-8", "TERM": "dumb"}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// HostBound is true: a local sandbox lives on the host that made it.
func (p *Provider) HostBound() bool { return true }

// Info implements provider.Provider.
func (p *Provider) Info(context.Context) provider.Info {
	var images []provider.Image
	for _, name := range p.imageNames() {
		images = append(images, provider.Image{Name: name, Source: p.images[name].Source()})
	}
	return provider.Info{
		Name:      Name,
		Available: p.problem == "",
		Reason:    p.problem,
		Exec:      true,
		Files:     true,
		Processes: p.serverExe != nil,
		PTY:       p.serverExe != nil,
		Watch:     p.serverExe != nil,
		WorkDir:   WorkDir,
		Images:    images,
		Notes: []string{
			"isolation: bubblewrap; own user, pid, mount, ipc and uts namespaces; processes run without capabilities; the root holds the host's system folders (/usr, /bin, /lib*, /sbin) and a curated /etc, read-only, and nothing else of the host's, or an image (params.image); private /workspace and /tmp",
			p.imageNote(),
			p.uidNote(),
			seccomp.Note(),
			p.networkNote(),
			p.egressNote(),
			p.limitsNote(),
			p.pauseNote(),
			p.shareNote(),
			p.workspace.Note(p.limits.WorkspaceMB, p.maxLimits.WorkspaceMB),
			outputNote,
			portsNote,
			p.processesNote(),
		},
	}
}
