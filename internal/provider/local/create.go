package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tetherhq/tether/internal/host/uidpool"
	"github.com/tetherhq/tether/internal/sandbox"
)

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
	uid, err := p.uids.Claim(dir)
	if err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		return sandbox.Resource{}, sandbox.Retryable(fmt.Errorf("local: create: %w", err))
	}
	m := meta{SandboxID: spec.SandboxID, UID: uid, Env: spec.Env, Tenant: spec.Tenant, Limits: lim, Image: prm.Image, CreatedAt: time.Now().UTC()}
	// Recorded at once, so that whatever fails next, destroy frees the uid.
	if err := p.writeMeta(m); err != nil {
		_ = p.destroyLocked(context.WithoutCancel(ctx), spec.SandboxID)
		_ = uidpool.Release(uid, dir)
		return sandbox.Resource{}, fmt.Errorf("local: create: %w", err)
	}
	if m.Limits.WorkspaceMB > 0 {
		if err := p.workspace.Create(ctx, dir, uid, m.Limits.WorkspaceMB); err != nil {
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
		if err := p.cg.Create(spec.SandboxID, m.Limits.Pids, m.Limits.MemoryMB); err != nil {
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
