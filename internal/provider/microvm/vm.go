package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/provider"
)

// Files of a VM's folder.
const (
	agentSocket = "agent.sock"
	qmpSocket   = "qmp.sock"
	pidFile     = "qemu.pid"
	logFile     = "qemu.log"
	consoleFile = "console.log"
	metaFile    = "meta.json"
	rootDisk    = "root.qcow2"
	wsDisk      = "workspace.img"
	pausedFile  = "paused"
)

// bootTimeout bounds a boot: from QEMU's start to the agent's first
// answer (emulated guests boot in seconds, not milliseconds).
const bootTimeout = 90 * time.Second

// meta is what a VM's folder records of it.
type meta struct {
	SandboxID string            `json:"sandbox_id"`
	CreatedAt time.Time         `json:"created_at"`
	Env       map[string]string `json:"env,omitempty"`
	Params    Params            `json:"params"`
	// FromSnapshot is the snapshot whose workspace the VM started with.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// KernelArgs is the guest kernel's command line: its own, or, for a
	// VM restored from a memory snapshot, the snapshot's VM's (QEMU
	// restores a guest only into the machine it was saved from).
	KernelArgs string `json:"kernel_args"`
}

func (p *Provider) vmDir(id string) string { return filepath.Join(p.cfg.StateDir, "vms", id) }

func (p *Provider) readMeta(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(p.vmDir(id), metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("microvm: %s of %s: %w", metaFile, id, err)
	}
	return m, nil
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	if p.unavailable != "" {
		return provider.Resource{}, provider.Errorf(provider.CodeProviderUnavailable, "microvm: %s", p.unavailable)
	}
	if !provider.ValidSandboxID(spec.SandboxID) {
		return provider.Resource{}, provider.Errorf(provider.CodeInvalidRequest, "microvm: %q is not a sandbox id", spec.SandboxID)
	}
	ps, err := p.params(spec.Params)
	if err != nil {
		return provider.Resource{}, err
	}
	var from *snapshotRecord
	if spec.FromSnapshot != "" {
		rec, err := p.snapshotRecord(spec.FromSnapshot)
		if err != nil {
			return provider.Resource{}, err
		}
		from = &rec
	}
	unlock := p.lock(spec.SandboxID)
	defer unlock()
	if m, err := p.readMeta(spec.SandboxID); err == nil {
		if _, alive := p.running(spec.SandboxID); alive {
			if err := p.waitBoot(ctx, spec.SandboxID); err != nil {
				return provider.Resource{}, err
			}
			return p.resource(m), nil
		}
	}
	// Nothing, or the remains of a create that did not finish: start anew.
	if err := p.remove(ctx, spec.SandboxID); err != nil {
		return provider.Resource{}, err
	}
	m := meta{SandboxID: spec.SandboxID, CreatedAt: time.Now().UTC(), Env: spec.Env, Params: ps, FromSnapshot: spec.FromSnapshot}
	m.KernelArgs = p.kernelArgs(m)
	if err := p.makeVM(ctx, m, from); err != nil {
		_ = p.remove(context.WithoutCancel(ctx), spec.SandboxID)
		return provider.Resource{}, err
	}
	if spec.Setup != "" {
		res, err := p.Exec(ctx, spec.SandboxID, provider.ExecRequest{Command: spec.Setup, Timeout: 10 * time.Minute, MaxOutput: 4096})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("microvm: the setup script exited %d: %s", res.ExitCode, res.Output)
		}
		if err != nil {
			_ = p.remove(context.WithoutCancel(ctx), spec.SandboxID)
			return provider.Resource{}, err
		}
	}
	return p.resource(m), nil
}

// makeVM makes the VM's folder and starts it: booted, or restored from
// from, its memory snapshot (nil: none).
func (p *Provider) makeVM(ctx context.Context, m meta, from *snapshotRecord) error {
	if from != nil && from.Memory {
		return p.restore(ctx, m, *from)
	}
	if err := p.prepare(ctx, m); err != nil {
		return err
	}
	return p.boot(ctx, m, nil)
}

func (p *Provider) resource(m meta) provider.Resource {
	return provider.Resource{SandboxID: m.SandboxID, ProviderID: "microvm-" + m.SandboxID, WorkDir: WorkDir, CreatedAt: m.CreatedAt}
}

// prepare makes the VM's folder: its disks and meta.json, the last
// written last, so that a folder without it is never taken for a VM.
func (p *Provider) prepare(ctx context.Context, m meta) error {
	dir := p.vmDir(m.SandboxID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	base := filepath.Join(p.cfg.ImageDir, "rootfs.ext4")
	if err := p.tool(ctx, p.qemuImg, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, filepath.Join(dir, rootDisk)); err != nil {
		return err
	}
	if err := p.workspace(ctx, m, filepath.Join(dir, wsDisk)); err != nil {
		return err
	}
	return p.writeMeta(m)
}

// writeMeta writes the VM's meta.json, last of its folder.
func (p *Provider) writeMeta(m meta) error {
	dir := p.vmDir(m.SandboxID)
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, metaFile+".tmp"), b, 0o600); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	return os.Rename(filepath.Join(dir, metaFile+".tmp"), filepath.Join(dir, metaFile))
}

// workspace makes the VM's workspace disk: a copy of its snapshot's, or
// a new sparse ext4 disk of its size.
func (p *Provider) workspace(ctx context.Context, m meta, ws string) error {
	if m.FromSnapshot != "" { // its record checked by Create
		return p.tool(ctx, "cp", "--sparse=always", filepath.Join(p.snapshotDir(m.FromSnapshot), wsDisk), ws)
	}
	if err := os.WriteFile(ws, nil, 0o600); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	if err := os.Truncate(ws, int64(m.Params.WorkspaceMB)<<20); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	return p.tool(ctx, p.mkfs, "-q", "-F", "-L", "workspace", "-m", "0", ws)
}

// tool runs a host tool with nothing of Tether's environment.
func (p *Provider) tool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = hostEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("microvm: %s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(out))
	}
	return nil
}

// hostEnv is the whole environment of every host process the provider
// starts.
func hostEnv() []string { return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"} }

// qemuArgs are the arguments of a VM's QEMU, which runs in the VM's
// folder: its files are named relative to it (a socket's path must be
// short, and a state folder's may not be).
func (p *Provider) qemuArgs(m meta) []string {
	accel := []string{"-accel", "kvm", "-cpu", "host"}
	if p.accel == AccelTCG {
		accel = []string{"-accel", "tcg,thread=multi,tb-size=128", "-cpu", "max"}
	}
	args := []string{
		"-name", "tether-" + m.SandboxID,
		"-M", "microvm,x-option-roms=off,rtc=off",
	}
	args = append(args, accel...)
	return append(args,
		"-m", strconv.Itoa(m.Params.MemoryMB), "-smp", strconv.Itoa(m.Params.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", filepath.Join(p.cfg.ImageDir, "vmlinuz"),
		"-initrd", filepath.Join(p.cfg.ImageDir, "initramfs.cpio"),
		"-append", m.KernelArgs,
		"-serial", "file:"+consoleFile,
		"-drive", "id=root,file="+rootDisk+",format=qcow2,if=none,discard=unmap",
		"-device", "virtio-blk-device,drive=root,serial=tether-root",
		"-drive", "id=ws,file="+wsDisk+",format=raw,if=none",
		"-device", "virtio-blk-device,drive=ws,serial=tether-workspace",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,path="+agentSocket+",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=tether",
		"-device", "virtio-rng-device",
		"-qmp", "unix:"+qmpSocket+",server=on,wait=off",
		"-pidfile", pidFile,
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	)
}

// kernelArgs is the guest kernel's command line. Under TCG the guest's
// TSC is the host's, and its calibration against the emulated PIT fails
// on a busy host (the boot then stalls for minutes): the host's rate is
// given instead.
func (p *Provider) kernelArgs(m meta) string {
	args := "console=ttyS0 quiet panic=-1 reboot=t tether.hostname=" + hostname(m.SandboxID)
	if p.accel == AccelTCG && p.tscKHz > 0 {
		args += " tsc_early_khz=" + strconv.Itoa(p.tscKHz)
	}
	return args
}

// hostTSCKHz is the host's TSC rate in kHz as /proc/cpuinfo says, 0 if
// it does not.
func hostTSCKHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0
		}
		return int(mhz * 1000)
	}
	return 0
}

// hostname is the guest's name: the sandbox id's last twelve characters.
func hostname(id string) string {
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return "sb-" + strings.ToLower(id)
}

// start starts the VM's QEMU in a session of its own, so that it
// outlives Tether; a waiter reaps it while this process lives.
func (p *Provider) start(m meta, incoming *os.File) error {
	dir := p.vmDir(m.SandboxID)
	log, err := os.OpenFile(filepath.Join(dir, logFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	defer func() { _ = log.Close() }()
	args := p.qemuArgs(m)
	if incoming != nil {
		// The saved state, read from descriptor 3; the guest runs on
		// from where it was once it is loaded.
		args = append(args, "-incoming", "fd:3")
	}
	cmd := exec.Command(p.qemu, args...) //nolint:noctx // the VM outlives the call
	if incoming != nil {
		cmd.ExtraFiles = []*os.File{incoming}
	}
	cmd.Env = hostEnv()
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("microvm: starting QEMU: %w", err)
	}
	p.waiters.Go(func() { _ = cmd.Wait() })
	return nil
}

// boot starts the VM and waits for its agent, at most as many boots at
// once as the host has CPUs: a boot is CPU-bound (under TCG, seconds of
// it), and a host that boots more at once only makes all of them late.
func (p *Provider) boot(ctx context.Context, m meta, incoming *os.File) error {
	select {
	case p.boots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("microvm: waiting for a boot slot: %w", ctx.Err())
	}
	defer func() { <-p.boots }()
	if err := p.start(m, incoming); err != nil {
		return err
	}
	if incoming != nil {
		if err := p.runLoaded(ctx, m.SandboxID); err != nil {
			return err
		}
	}
	return p.waitBoot(ctx, m.SandboxID)
}

// runLoaded waits until QEMU has loaded a saved state, then runs the
// guest: a state saved from a stopped VM (as memory snapshots are) stays
// stopped when loaded.
func (p *Provider) runLoaded(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	for {
		err := p.tryRunLoaded(ctx, id)
		if err == nil {
			return nil
		}
		if _, alive := p.running(id); !alive && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
				continue
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("microvm: loading the saved VM: %w (%s)", err, p.lastWords(id))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errLoading says QEMU is still loading the state.
var errLoading = errors.New("still loading")

func (p *Provider) tryRunLoaded(ctx context.Context, id string) error {
	socket, err := p.socket(id, qmpSocket)
	if err != nil {
		return err
	}
	mon, err := dialQMP(ctx, socket)
	if err != nil {
		return err
	}
	defer mon.close()
	st, err := mon.status()
	switch {
	case err != nil:
		return err
	case st == "inmigrate":
		return errLoading
	case st == "running":
		return nil
	}
	_, err = mon.run("cont", nil, nil)
	return err
}

// waitBoot waits until the VM's agent answers, or its QEMU ends.
func (p *Provider) waitBoot(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	a := p.agent(id)
	start := time.Now()
	for {
		// QEMU writes its pid file as it starts and removes it as it
		// exits: none for a while is a QEMU that ended.
		if _, alive := p.running(id); !alive && time.Since(start) > 3*time.Second {
			return fmt.Errorf("microvm: the VM ended while it booted: %s", p.lastWords(id))
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := a.ping(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		a.close()
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return provider.Retryable(fmt.Errorf("microvm: the guest did not answer within %s: %s", bootTimeout, p.lastWords(id)))
			}
			return fmt.Errorf("microvm: waiting for the guest: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastWords is the end of a VM's QEMU log and console, for errors.
func (p *Provider) lastWords(id string) string {
	var parts []string
	for _, f := range []string{logFile, consoleFile} {
		b, _ := os.ReadFile(filepath.Join(p.vmDir(id), f))
		b = bytes.TrimSpace(b)
		if len(b) > 400 {
			b = b[len(b)-400:]
		}
		if len(b) > 0 {
			parts = append(parts, f+": "+string(b))
		}
	}
	if len(parts) == 0 {
		return "no output"
	}
	return strings.Join(parts, "; ")
}

// running returns the pid of the VM's QEMU if it runs.
func (p *Provider) running(id string) (int, bool) {
	dir := p.vmDir(id)
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, isQEMUOf(pid, dir)
}

// isQEMUOf reports whether pid is a live (not zombie) QEMU of the VM in
// dir: a QEMU whose working directory is the VM's folder.
func isQEMUOf(pid int, dir string) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte("\x00-name\x00tether-")) {
		return false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return err == nil && cwd == dir
}

// Destroy implements provider.Provider.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !provider.ValidSandboxID(sandboxID) {
		return nil
	}
	unlock := p.lock(sandboxID)
	defer unlock()
	return p.remove(ctx, sandboxID)
}

// remove kills the VM's QEMU, waits for it to be gone and removes its
// folder.
func (p *Provider) remove(ctx context.Context, id string) error {
	p.forget(id)
	if pid, alive := p.running(id); alive {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for isQEMUOf(pid, p.vmDir(id)) {
			select {
			case <-ctx.Done():
				return provider.Retryable(fmt.Errorf("microvm: waiting for QEMU %d to end: %w", pid, ctx.Err()))
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if err := os.RemoveAll(p.vmDir(id)); err != nil {
		return fmt.Errorf("microvm: removing the VM's folder: %w", err)
	}
	return nil
}

// List implements provider.Provider.
func (p *Provider) List(context.Context) ([]provider.Resource, error) {
	entries, err := os.ReadDir(filepath.Join(p.cfg.StateDir, "vms"))
	if err != nil {
		return nil, fmt.Errorf("microvm: listing VMs: %w", err)
	}
	var out []provider.Resource
	for _, e := range entries {
		id := e.Name()
		if !provider.ValidSandboxID(id) {
			continue
		}
		m, err := p.readMeta(id)
		if err != nil {
			// A create that stopped before its meta.json: remains only.
			info, _ := e.Info()
			r := provider.Resource{SandboxID: id, ProviderID: "microvm-" + id, Defunct: true, Reason: "an unfinished create's remains"}
			if info != nil {
				r.CreatedAt = info.ModTime()
			}
			out = append(out, r)
			continue
		}
		r := p.resource(m)
		if _, alive := p.running(id); !alive {
			r.Defunct, r.Reason = true, "the VM's QEMU process is gone"
		}
		out = append(out, r)
	}
	return out, nil
}

// live checks that a sandbox's VM runs, for the data plane.
func (p *Provider) live(id string) (meta, error) {
	m, err := p.readMeta(id)
	if err != nil {
		return m, provider.Errorf(provider.CodeProviderUnavailable, "microvm: no sandbox %s here", id)
	}
	if _, alive := p.running(id); !alive {
		return m, provider.Errorf(provider.CodeProviderUnavailable, "microvm: sandbox %s no longer runs", id)
	}
	if _, err := os.Stat(filepath.Join(p.vmDir(id), pausedFile)); err == nil {
		return m, provider.Errorf(provider.CodeStateConflict, "microvm: sandbox %s is paused", id)
	}
	return m, nil
}
