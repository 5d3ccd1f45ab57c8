// Package microvm is the provider whose sandboxes are virtual machines:
// each a QEMU guest (machine type microvm) with Debian's kernel, an
// initramfs holding Tether's agent (cmd/tether-vmagent) and a root disk
// that is a copy-on-write overlay of one Debian root image, with the
// workspace on a disk of its own. Tether reaches the guest only through
// its agent, over a virtio-serial port (vmwire): no network, no shared
// folder, no host kernel module (vsock, vhost) is needed.
//
// Each VM's state lives in a folder of its own under the provider's
// state folder, named by the sandbox id: the disks, the sockets of the
// agent's port and of QEMU's monitor (QMP), QEMU's pid file and log, and
// meta.json. QEMU runs in a session of its own and outlives Tether: a
// restarted Tether finds its VMs by listing those folders (List), like
// local's sandboxes, and the provider is host-bound.
//
// Where KVM can run a stock kernel, guests run under KVM; elsewhere under
// QEMU's own emulation (TCG), much slower but the same guest (Info says
// which, and why). A host whose /dev/kvm is PVM's (kvm_pvm: KVM without
// hardware virtualisation, inside another VM) boots a stock kernel in
// minutes rather than a second, so there TCG is the default too.
package microvm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/provider"
)

// Name is the provider's name.
const Name = "microvm"

// WorkDir is the sandbox's working directory, on its workspace disk.
const WorkDir = "/workspace"

// Accelerators.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Config is what the provider needs.
type Config struct {
	// StateDir holds a folder per VM.
	StateDir string
	// ImageDir holds vmlinuz, initramfs.cpio and rootfs.ext4, as
	// scripts/microvm.sh builds them.
	ImageDir string
	// QEMU and QEMUImg are the programs (found on PATH when empty).
	QEMU, QEMUImg string
	// Accel is AccelAuto, AccelKVM or AccelTCG.
	Accel string
	// Defaults and maxima of a sandbox's params.
	DefaultMemoryMB, MaxMemoryMB       int
	DefaultCPUs, MaxCPUs               int
	DefaultWorkspaceMB, MaxWorkspaceMB int
}

// Provider is the microvm provider.
type Provider struct {
	cfg       Config
	qemu      string
	qemuImg   string
	mkfs      string
	accel     string
	accelNote string
	// unavailable says why no VM can be made here; "" when they can.
	unavailable string
	// tscKHz is the host's TSC rate, for guests under TCG.
	tscKHz int
	// boots holds a token per VM booting.
	boots chan struct{}

	mu     sync.Mutex
	agents map[string]*agentConn
	locks  map[string]*sync.Mutex
	// waiters reap the QEMU processes this Provider started.
	waiters sync.WaitGroup
}

// New returns the provider. A host where VMs cannot run is not an
// error: the provider reports itself unavailable, with the reason.
func New(cfg Config) (*Provider, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("microvm: state directory not set")
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("microvm: state directory: %w", err)
	}
	cfg.StateDir = abs
	if err := os.MkdirAll(filepath.Join(abs, "vms"), 0o700); err != nil {
		return nil, fmt.Errorf("microvm: state directory: %w", err)
	}
	// Go opens its own descriptors close-on-exec, not those this process
	// inherited: mark them, so that no QEMU gets one.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("microvm: inherited descriptors: %w", err)
	}
	cfg.DefaultMemoryMB = cmp.Or(cfg.DefaultMemoryMB, 256)
	cfg.MaxMemoryMB = cmp.Or(cfg.MaxMemoryMB, 2048)
	cfg.DefaultCPUs = cmp.Or(cfg.DefaultCPUs, 1)
	cfg.MaxCPUs = cmp.Or(cfg.MaxCPUs, 2)
	cfg.DefaultWorkspaceMB = cmp.Or(cfg.DefaultWorkspaceMB, 1024)
	cfg.MaxWorkspaceMB = cmp.Or(cfg.MaxWorkspaceMB, 16384)
	p := &Provider{
		cfg: cfg, agents: map[string]*agentConn{}, locks: map[string]*sync.Mutex{},
		tscKHz: hostTSCKHz(), boots: make(chan struct{}, max(1, runtime.NumCPU())),
	}
	p.probe()
	return p, nil
}

// probe finds the programs, the image and the accelerator.
func (p *Provider) probe() {
	var missing []string
	find := func(name, given string) string {
		path, err := exec.LookPath(cmp.Or(given, name))
		if err != nil {
			missing = append(missing, name)
		}
		return path
	}
	p.qemu = find("qemu-system-x86_64", p.cfg.QEMU)
	p.qemuImg = find("qemu-img", p.cfg.QEMUImg)
	p.mkfs = find("mkfs.ext4", "")
	if len(missing) > 0 {
		p.unavailable = fmt.Sprintf("missing %v (Debian packages qemu-system-x86, qemu-utils, e2fsprogs)", missing)
		return
	}
	for _, f := range []string{"vmlinuz", "initramfs.cpio", "rootfs.ext4"} {
		if _, err := os.Stat(filepath.Join(p.cfg.ImageDir, f)); err != nil {
			p.unavailable = fmt.Sprintf("no guest image in %q (%s missing): build it with scripts/microvm.sh", p.cfg.ImageDir, f)
			return
		}
	}
	p.accel, p.accelNote, p.unavailable = chooseAccel(p.cfg.Accel)
}

// chooseAccel picks the accelerator and says why.
func chooseAccel(want string) (accel, note, unavailable string) {
	kvmErr := kvmUsable()
	_, pvmErr := os.Stat("/sys/module/kvm_pvm")
	pvm := pvmErr == nil
	switch want {
	case AccelKVM:
		if kvmErr != nil {
			return "", "", "MICROVM_ACCEL=kvm, but " + kvmErr.Error()
		}
		return AccelKVM, "guests run under KVM", ""
	case AccelTCG:
		return AccelTCG, "guests run under QEMU's emulation (TCG), as MICROVM_ACCEL says: correct but slow", ""
	}
	switch {
	case kvmErr != nil:
		return AccelTCG, "guests run under QEMU's emulation (TCG), much slower than KVM: " + kvmErr.Error(), ""
	case pvm:
		return AccelTCG, "guests run under QEMU's emulation (TCG): this host's /dev/kvm is PVM's (kvm_pvm, KVM without hardware virtualisation), which boots a stock kernel in minutes; MICROVM_ACCEL=kvm forces it", ""
	default:
		return AccelKVM, "guests run under KVM", ""
	}
}

func kvmUsable() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm does not open: %w", err)
	}
	return f.Close()
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// HostBound implements provider.HostBound: a VM is a process of this host.
func (p *Provider) HostBound() bool { return true }

// Info implements provider.Provider.
func (p *Provider) Info(context.Context) provider.Info {
	info := provider.Info{
		Name:      Name,
		Available: p.unavailable == "",
		Reason:    p.unavailable,
		Exec:      true,
		Files:     true,
		WorkDir:   WorkDir,
	}
	if p.unavailable == "" {
		info.Notes = []string{
			p.accelNote,
			"each sandbox is a VM with its own kernel (Debian's), a copy-on-write root and a workspace disk; no network",
			"memory snapshots ({\"memory\": true}) save the whole machine; sandboxes created from them resume its processes (forks)",
		}
	}
	return info
}

// Params are a sandbox's create params.
type Params struct {
	MemoryMB    int    `json:"memory_mb,omitempty"`
	CPUs        int    `json:"cpus,omitempty"`
	WorkspaceMB int    `json:"workspace_mb,omitempty"`
	Network     string `json:"network,omitempty"`
}

// ValidateParams implements provider.Provider.
func (p *Provider) ValidateParams(raw json.RawMessage) error {
	_, err := p.params(raw)
	return err
}

func (p *Provider) params(raw json.RawMessage) (Params, error) {
	var ps Params
	if err := provider.DecodeParams(Name, raw, &ps, "memory_mb, cpus, workspace_mb, network"); err != nil {
		return ps, err
	}
	bad := func(format string, args ...any) (Params, error) {
		return ps, provider.Errorf(provider.CodeInvalidRequest, "microvm: "+format, args...)
	}
	forbidden := func(format string, args ...any) (Params, error) {
		return ps, provider.Errorf(provider.CodeForbidden, "microvm: "+format, args...)
	}
	switch {
	case ps.MemoryMB < 0 || ps.CPUs < 0 || ps.WorkspaceMB < 0:
		return bad("memory_mb, cpus and workspace_mb must be positive")
	case ps.MemoryMB != 0 && ps.MemoryMB < 128:
		return bad("memory_mb %d: a guest needs at least 128", ps.MemoryMB)
	case ps.WorkspaceMB != 0 && ps.WorkspaceMB < 16:
		return bad("workspace_mb %d: at least 16", ps.WorkspaceMB)
	case ps.MemoryMB > p.cfg.MaxMemoryMB:
		return forbidden("memory_mb %d is over the operator's maximum, %d", ps.MemoryMB, p.cfg.MaxMemoryMB)
	case ps.CPUs > p.cfg.MaxCPUs:
		return forbidden("cpus %d is over the operator's maximum, %d", ps.CPUs, p.cfg.MaxCPUs)
	case ps.WorkspaceMB > p.cfg.MaxWorkspaceMB:
		return forbidden("workspace_mb %d is over the operator's maximum, %d", ps.WorkspaceMB, p.cfg.MaxWorkspaceMB)
	case ps.Network != "" && ps.Network != "none":
		return bad("network %q: a microvm sandbox has no network yet (only \"none\")", ps.Network)
	}
	ps.MemoryMB = cmp.Or(ps.MemoryMB, p.cfg.DefaultMemoryMB)
	ps.CPUs = cmp.Or(ps.CPUs, p.cfg.DefaultCPUs)
	ps.WorkspaceMB = cmp.Or(ps.WorkspaceMB, p.cfg.DefaultWorkspaceMB)
	return ps, nil
}

// lock serialises the calls for one sandbox.
func (p *Provider) lock(id string) func() {
	p.mu.Lock()
	l, ok := p.locks[id]
	if !ok {
		l = &sync.Mutex{}
		p.locks[id] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// agent returns the agent connection of a VM.
func (p *Provider) agent(id string) *agentConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.agents[id]
	if !ok {
		a = &agentConn{socket: func() (string, error) { return p.socket(id, agentSocket) }}
		p.agents[id] = a
	}
	return a
}

// socket returns a path to one of a running VM's sockets short enough
// for a socket address (108 bytes, which a state folder's path may pass):
// through its QEMU's working directory, the VM's folder.
func (p *Provider) socket(id, name string) (string, error) {
	pid, alive := p.running(id)
	if !alive {
		return "", provider.Errorf(provider.CodeProviderUnavailable, "microvm: sandbox %s no longer runs", id)
	}
	return "/proc/" + strconv.Itoa(pid) + "/cwd/" + name, nil
}

func (p *Provider) forget(id string) {
	p.mu.Lock()
	a := p.agents[id]
	delete(p.agents, id)
	p.mu.Unlock()
	if a != nil {
		a.close()
	}
}
