package local

import (
	"encoding/json"
	"strings"

	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
)

// A sandbox's create params and resource limits: what a create may ask
// for, within the operator's maxima.

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

// Limits are the kernel-enforced resource limits of one sandbox. The
// control groups enforce Pids and MemoryMB (internal/host/cgroup); a file
// system of its own WorkspaceMB (internal/host/workspace).
type Limits struct {
	// Pids caps the processes and threads alive in the sandbox at once.
	Pids int `json:"pids"`
	// MemoryMB caps the sandbox's memory, its /tmp (a tmpfs, charged to
	// the same account) included, in MiB.
	MemoryMB int `json:"memory_mb"`
	// WorkspaceMB caps the size of the sandbox's /workspace, in MiB; 0 is
	// no limit (internal/host/workspace).
	WorkspaceMB int `json:"workspace_mb,omitempty"`
	// OpenFiles caps the files each process of the sandbox may hold open
	// (RLIMIT_NOFILE, soft and hard, set by the sandbox's own shell before
	// it runs anything); 0 leaves what the process inherits.
	OpenFiles int `json:"open_files,omitempty"`
}

// Defaults of the workspace size limit, unless WithLimits says otherwise:
// 1 GiB unless a create asks for another, and at most 100 GiB (both
// within a tenant's share of the disk, which the limits reserve).
const (
	DefaultWorkspaceMB    = 1024
	DefaultMaxWorkspaceMB = 102400
	// MinWorkspaceMB is the smallest limit a create may ask for.
	MinWorkspaceMB = workspace.MinMB
)

// Params are the local provider's create params.
type Params struct {
	// Network is "none" (default: a private network namespace with only
	// loopback), "host", or "allowlist" (only what Allow names; network.go).
	Network string `json:"network,omitempty"`
	// Allow lists what an "allowlist" sandbox may reach: host names,
	// wildcards, IPv4 and IPv6 addresses or CIDRs, each with an optional
	// ":port" (egressproxy.Parser).
	Allow []string `json:"allow,omitempty"`
	// Credentials are headers the egress proxy adds to an "allowlist"
	// sandbox's HTTPS requests to a host, their secrets named (network.go).
	Credentials []Credential `json:"credentials,omitempty"`
	// Policies name the tenant's network policies whose rules join
	// Allow's (their rules are the registry's: the provider checks only
	// the names).
	Policies []string `json:"policies,omitempty"`
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

// parseParams decodes and checks create params, including what the
// operator allows.
func (p *Provider) parseParams(raw json.RawMessage) (Params, error) {
	var prm Params
	if err := provider.DecodeParams(Name, raw, &prm, "network, allow, credentials, pids, memory_mb, workspace_mb, open_files, image"); err != nil {
		return prm, err
	}
	if err := p.checkNetwork(prm); err != nil {
		return prm, err
	}
	if prm.Image != "" && p.images[prm.Image] == nil {
		known := "none are registered on this server"
		if names := p.imageNames(); len(names) > 0 {
			known = "known: " + strings.Join(names, ", ")
		}
		return prm, provider.Errorf(provider.CodeInvalidRequest, "params.image %q is not an image of this server (%s)", prm.Image, known)
	}
	if err := p.checkLimits(prm); err != nil {
		return prm, err
	}
	return prm, nil
}

// checkLimits checks the limits a create asks for against the maxima.
func (p *Provider) checkLimits(prm Params) error {
	if prm.Pids != 0 && (prm.Pids < minPids || prm.Pids > p.maxLimits.Pids) {
		return provider.Errorf(provider.CodeInvalidRequest, "params.pids must be between %d and %d", minPids, p.maxLimits.Pids)
	}
	if prm.OpenFiles != 0 && (prm.OpenFiles < minOpenFiles || prm.OpenFiles > p.maxLimits.OpenFiles) {
		return provider.Errorf(provider.CodeInvalidRequest, "params.open_files must be between %d and %d", minOpenFiles, p.maxLimits.OpenFiles)
	}
	if prm.MemoryMB != 0 && (prm.MemoryMB < minMemMB || prm.MemoryMB > p.maxLimits.MemoryMB) {
		return provider.Errorf(provider.CodeInvalidRequest, "params.memory_mb must be between %d and %d", minMemMB, p.maxLimits.MemoryMB)
	}
	if prm.WorkspaceMB != 0 {
		if p.workspace.Problem() != "" {
			return provider.Errorf(provider.CodeInvalidRequest, "params.workspace_mb: /workspace size limits are unavailable on this host (%s)", p.workspace.Problem())
		}
		if prm.WorkspaceMB < MinWorkspaceMB || prm.WorkspaceMB > p.maxLimits.WorkspaceMB {
			return provider.Errorf(provider.CodeInvalidRequest, "params.workspace_mb must be between %d and %d", MinWorkspaceMB, p.maxLimits.WorkspaceMB)
		}
	}
	return nil
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
	if p.workspace.Problem() != "" {
		lim.WorkspaceMB = 0
	}
	return lim
}

// ValidateParams implements provider.Provider.
func (p *Provider) ValidateParams(raw json.RawMessage) error {
	_, err := p.parseParams(raw)
	return err
}
