package local

// A sandbox's network: by default a namespace of its own with only
// loopback; params.network "host" shares the host's (if the operator
// allows it); "allowlist" reaches only what params.allow names, through a
// namespace, a veth pair and nftables rules that internal/host/egress
// makes and removes.

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"

	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/sandbox"
)

// networkAllowlist is the params.network of a sandbox that may reach only
// what params.allow names.
const networkAllowlist = "allowlist"

// MaxAllow is the most entries params.allow may hold.
const MaxAllow = egress.MaxAllow

// DefaultEgressPool is where allow-list sandboxes take their /30 links from
// unless EgressPool says otherwise: 16384 sandboxes at once.
const DefaultEgressPool = egress.DefaultPool

// EgressPool sets the IPv4 range each allow-list sandbox takes a /30 of
// for its link to the host (default DefaultEgressPool; egress.CheckPool
// says which are valid). It must not overlap a network the host uses (the
// mode is unavailable if it does); sandboxes never reach addresses inside
// it.
func EgressPool(pool netip.Prefix) Option {
	return func(p *Provider) { p.egress.Pool = pool }
}

func (p *Provider) networkNote() string {
	if p.hostNetwork {
		return "network: isolated (loopback only) by default; params.network=\"host\" shares the host's (enabled by the operator)"
	}
	return "network: isolated (loopback only); params.network=\"host\" is disabled by the operator"
}

// checkNetwork checks params.network and params.allow, including what the
// operator allows.
func (p *Provider) checkNetwork(prm Params) error {
	switch prm.Network {
	case "", "none":
	case networkAllowlist:
		return egressError(p.egress.CheckAllow(prm.Allow))
	case "host":
		if !p.hostNetwork {
			return sandbox.Errorf(sandbox.CodeForbidden,
				"params.network \"host\" is disabled on this server: it would share the host's network, and every service on its loopback, with the sandbox; only the operator can enable it")
		}
	default:
		return sandbox.Errorf(sandbox.CodeInvalidRequest, "params.network must be \"none\", \"host\" or \"allowlist\" (got %q)", prm.Network)
	}
	if prm.Allow != nil {
		return sandbox.Errorf(sandbox.CodeInvalidRequest, "params.allow applies only to params.network \"allowlist\"")
	}
	return nil
}

// egressError is err of the egress package as the sandbox API has it: a
// refused allow list is INVALID_REQUEST, a temporary failure retryable.
func egressError(err error) error {
	var invalid *egress.InvalidError
	switch {
	case errors.As(err, &invalid):
		return sandbox.Errorf(sandbox.CodeInvalidRequest, "%s", invalid.Error())
	case errors.Is(err, egress.ErrTemporary):
		return sandbox.Retryable(err)
	}
	return err
}

// setupEgress gives an allow-list sandbox its network before its init
// starts (egress.Setup). What it made is removed by Destroy (the caller
// destroys the sandbox when it fails).
func (p *Provider) setupEgress(ctx context.Context, id string, prm Params) error {
	if prm.Network != networkAllowlist {
		return nil
	}
	return egressError(p.egress.Setup(ctx, id, prm.Allow, filepath.Join(p.sandboxDir(id), "hosts")))
}

// egressHosts is the file that is an allow-list sandbox's own /etc/hosts,
// over the host's; "" for other sandboxes.
func egressHosts(workspace string, prm Params) string {
	if prm.Network != networkAllowlist {
		return ""
	}
	return filepath.Join(filepath.Dir(workspace), "hosts")
}

// startSandbox runs start, which starts the sandbox's bwrap, on an OS
// thread of its own (hostos.OnOwnThread): an allow-list sandbox's in the
// network namespace made for it.
func startSandbox(id string, prm Params, start func() error) error {
	if prm.Network != networkAllowlist {
		return hostos.OnOwnThread(start)
	}
	return egress.InNamespace(id, start)
}
