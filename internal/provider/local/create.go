package local

// Create, as a list of steps: each makes one thing of the sandbox, in an
// order that lets a destroy find and remove all of it (the folder first,
// then the uid recorded in meta.json, the workspace, /etc, the control
// groups, the network, the init and its keeper, setup); the first step to
// fail ends the create, and one rollback removes what the earlier ones
// made.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/internal/host/uidpool"
	"github.com/tetherhq/tether/provider"
)

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	if p.problem != "" {
		return provider.Resource{}, fmt.Errorf("local: provider unavailable: %s", p.problem)
	}
	if !provider.ValidSandboxID(spec.SandboxID) {
		return provider.Resource{}, fmt.Errorf("local: create: invalid sandbox id %q", spec.SandboxID)
	}
	prm, err := p.parseParams(spec.Params)
	if err != nil {
		return provider.Resource{}, err
	}
	unlock := p.lock(spec.SandboxID)
	defer unlock()

	if m, err := p.readMeta(spec.SandboxID); err == nil && m.Ready && m.alive() {
		return p.resource(m), nil // idempotent: it exists already
	}
	if err := p.clearInterrupted(ctx, spec.SandboxID); err != nil {
		return provider.Resource{}, err
	}
	lim := p.limitsFor(prm)
	var from snapshotSpec
	if spec.FromSnapshot != "" {
		// The workspace is the snapshot's image, of its size.
		if from, err = p.fromSnapshot(spec.FromSnapshot); err != nil {
			return provider.Resource{}, err
		}
		lim.WorkspaceMB = from.WorkspaceMB
	}
	if err := p.reserve(spec.SandboxID, spec.Tenant, lim, "create"); err != nil {
		return provider.Resource{}, err
	}
	c := &creation{p: p, ctx: ctx, spec: spec, prm: prm, dir: p.sandboxDir(spec.SandboxID),
		m: meta{SandboxID: spec.SandboxID, Env: spec.Env, Tenant: spec.Tenant, Limits: lim, Image: prm.Image}}
	c.ws = filepath.Join(c.dir, "workspace")
	done := false
	defer func() {
		if !done {
			c.rollback()
		}
	}()
	for _, step := range []func() error{
		c.makeFolder, c.claimUID, c.makeWorkspace, c.writeEtc, c.makeGroups,
		c.makeNetwork, c.startInit, c.startKeeper, c.runSetup, c.markReady,
	} {
		if err := step(); err != nil {
			return provider.Resource{}, err
		}
	}
	done = true
	return p.resource(c.m), nil
}

// clearInterrupted destroys the leftovers of an interrupted create, so
// that this one starts over. Only where its folder is: an attempt makes
// the folder before anything else of the sandbox (its uid, groups,
// workspace, network, processes) and a destroy removes it after all of
// those, so without it there is nothing to clear, and no need to look
// through /proc for processes.
func (p *Provider) clearInterrupted(ctx context.Context, id string) error {
	if _, err := os.Lstat(p.sandboxDir(id)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := p.destroyLocked(ctx, id); err != nil {
		return provider.Retryable(fmt.Errorf("local: create: clearing an interrupted attempt: %w", err))
	}
	return nil
}

// creation is one Create under way: what its steps made so far.
type creation struct {
	p    *Provider
	ctx  context.Context
	spec provider.CreateSpec
	prm  Params
	// dir is the sandbox's folder, ws its workspace folder in it.
	dir, ws string
	m       meta
	// folder is set once the sandbox's folder exists, recorded once
	// meta.json names its uid (so that a destroy frees it).
	folder, recorded bool
}

// rollback removes what the steps made: a destroy, which frees the
// reservation too, once the folder exists (and the uid, if meta.json does
// not name it yet); before that, only the reservation.
func (c *creation) rollback() {
	if !c.folder {
		c.p.unreserve(c.spec.SandboxID)
		return
	}
	_ = c.p.destroyLocked(context.WithoutCancel(c.ctx), c.spec.SandboxID)
	if c.m.UID != 0 && !c.recorded {
		_ = uidpool.Release(c.m.UID, c.dir)
	}
}

func createErr(err error) error { return fmt.Errorf("local: create: %w", err) }

func retryableCreateErr(err error) error { return provider.Retryable(createErr(err)) }

// makeFolder makes the sandbox's folder, traversable by its user (bwrap
// runs as that user and must reach the workspace), and its workspace.
func (c *creation) makeFolder() error {
	if err := os.MkdirAll(c.ws, 0o700); err != nil {
		return createErr(err)
	}
	c.folder = true
	if err := os.Chmod(c.dir, 0o711); err != nil {
		return createErr(err)
	}
	return nil
}

// claimUID takes the sandbox's uid and records it at once, so that
// whatever fails next, destroy frees it.
func (c *creation) claimUID() error {
	uid, err := c.p.uids.Claim(c.dir)
	if err != nil {
		return retryableCreateErr(err)
	}
	c.m.UID, c.m.CreatedAt = uid, time.Now().UTC()
	if err := c.p.writeMeta(c.m); err != nil {
		return createErr(err)
	}
	c.recorded = true
	return nil
}

// makeWorkspace gives the workspace its file system, if it has a size
// limit, and hands the folder, or that file system's root, to the sandbox
// user.
func (c *creation) makeWorkspace() error {
	switch mb := c.m.Limits.WorkspaceMB; {
	case c.spec.FromSnapshot != "":
		img := filepath.Join(c.p.snapshotDir(c.spec.FromSnapshot), "workspace.img")
		if err := c.p.workspace.Restore(c.ctx, c.dir, img, c.m.UID); err != nil {
			return retryableCreateErr(err)
		}
	case mb > 0:
		if err := c.p.workspace.Create(c.ctx, c.dir, c.m.UID, mb); err != nil {
			return retryableCreateErr(err)
		}
	}
	if err := os.Chown(c.ws, c.m.UID, c.m.UID); err != nil {
		return createErr(err)
	}
	if err := os.Chmod(c.ws, 0o700); err != nil {
		return createErr(err)
	}
	return nil
}

// writeEtc writes the sandbox's own /etc/passwd and /etc/group.
func (c *creation) writeEtc() error {
	if err := writeSandboxEtc(c.dir, c.m.UID, c.m.Limits); err != nil {
		return createErr(err)
	}
	return nil
}

// makeGroups makes the sandbox's control groups with its limits.
func (c *creation) makeGroups() error {
	if c.p.cg == nil {
		return nil
	}
	if err := c.p.cg.Create(c.spec.SandboxID, c.m.Limits.Pids, c.m.Limits.MemoryMB); err != nil {
		return retryableCreateErr(err)
	}
	return nil
}

// makeNetwork gives an allow-list sandbox its network namespace.
func (c *creation) makeNetwork() error {
	if err := c.p.setupEgress(c.ctx, c.spec.SandboxID, c.spec.Tenant, c.prm); err != nil {
		return createErr(err)
	}
	return nil
}

// startInit starts the sandbox's bwrap and so its init.
func (c *creation) startInit() error {
	pid, err := c.p.start(c.spec.SandboxID, c.m.UID, c.prm, c.m.Limits)
	if err != nil {
		return retryableCreateErr(err)
	}
	c.m.InitPID = pid
	if c.m.InitStart, err = processStart(pid); err != nil {
		return retryableCreateErr(fmt.Errorf("sandbox exited at once: %w", err))
	}
	if c.p.serverFor(c.prm) {
		c.m.ServerFDs, c.m.Supervisor = requestFDs, supervisorVersion
	}
	return nil
}

// startKeeper starts the init's keeper before anything of the sandbox's
// runs: then nothing in it can end it by killing the init's other
// children.
func (c *creation) startKeeper() error {
	if err := c.p.startKeeper(c.m.InitPID, c.m.Limits); err != nil {
		return retryableCreateErr(err)
	}
	return nil
}

// runSetup runs the create's setup command, if it has one, after
// recording the running sandbox. Without setup, the sandbox is ready at
// once and recorded once, by markReady. (Tether dying before that leaves
// a folder whose processes destroy finds by their command line.)
func (c *creation) runSetup() error {
	if c.spec.Setup == "" {
		return nil
	}
	if err := c.p.writeMeta(c.m); err != nil {
		return createErr(err)
	}
	timeout := 10 * time.Minute
	if dl, ok := c.ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := c.p.exec(c.ctx, c.m, provider.ExecRequest{Command: c.spec.Setup, Timeout: timeout, MaxOutput: c.p.maxSetup})
	switch {
	case err != nil:
		return fmt.Errorf("local: setup: %w", err)
	case res.TimedOut:
		return fmt.Errorf("setup timed out; output:\n%s", strings.ToValidUTF8(res.Output, "\uFFFD"))
	case res.ExitCode != 0:
		return fmt.Errorf("setup exited with status %d; output:\n%s", res.ExitCode, strings.ToValidUTF8(res.Output, "\uFFFD"))
	}
	return nil
}

// markReady records the sandbox as ready.
func (c *creation) markReady() error {
	c.m.Ready = true
	if err := c.p.writeMeta(c.m); err != nil {
		return createErr(err)
	}
	return nil
}

func (p *Provider) resource(m meta) provider.Resource {
	return provider.Resource{
		SandboxID:  m.SandboxID,
		ProviderID: "local-" + strconv.Itoa(m.InitPID),
		WorkDir:    WorkDir,
		CreatedAt:  m.CreatedAt,
		Defunct:    !m.alive(),
	}
}
