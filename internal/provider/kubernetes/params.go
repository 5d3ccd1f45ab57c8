//go:build kubernetes

package kubernetes

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/allowlist"
	"github.com/tetherhq/tether/provider"
)

// Params are the kubernetes provider's create params.
type Params struct {
	// CPUMillis, MemoryMB and EphemeralStorageMB ask for other resources
	// than the defaults, within the operator's maxima.
	CPUMillis          int64 `json:"cpu_millis,omitempty"`
	MemoryMB           int64 `json:"memory_mb,omitempty"`
	EphemeralStorageMB int64 `json:"ephemeral_storage_mb,omitempty"`
	// Network is "none" (default: no egress at all) or "allowlist" (only
	// what Allow names). Either is a NetworkPolicy, which only a CNI that
	// enforces NetworkPolicies makes true.
	Network string `json:"network,omitempty"`
	// Allow lists what an "allowlist" sandbox may reach: IPv4 addresses or
	// CIDRs, each with an optional ":port" (TCP). A NetworkPolicy cannot
	// name hosts.
	Allow []string `json:"allow,omitempty"`
}

const networkAllowlist = "allowlist"

// maxAllow is the most entries params.allow may hold.
const maxAllow = allowlist.MaxEntries

// allowEntry is one parsed params.allow entry.
type allowEntry struct {
	prefix netip.Prefix
	port   int32 // 0: every port
}

// parseParams decodes and checks create params against the maxima.
func (p *Provider) parseParams(raw json.RawMessage) (Params, []allowEntry, error) {
	var prm Params
	if err := provider.DecodeParams(Name, raw, &prm, "cpu_millis, memory_mb, ephemeral_storage_mb, network, allow"); err != nil {
		return prm, nil, err
	}
	for _, r := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"cpu_millis", prm.CPUMillis, minResources.CPUMillis, p.cfg.Maxima.CPUMillis},
		{"memory_mb", prm.MemoryMB, minResources.MemoryMB, p.cfg.Maxima.MemoryMB},
		{"ephemeral_storage_mb", prm.EphemeralStorageMB, minResources.EphemeralStorageMB, p.cfg.Maxima.EphemeralStorageMB},
	} {
		if r.v != 0 && (r.v < r.lo || r.v > r.hi) {
			return prm, nil, provider.Errorf(provider.CodeInvalidRequest, "params.%s must be between %d and %d (the operator's maximum)", r.name, r.lo, r.hi)
		}
	}
	switch prm.Network {
	case "", "none":
		if len(prm.Allow) > 0 {
			return prm, nil, provider.Errorf(provider.CodeInvalidRequest, "params.allow needs params.network \"allowlist\"")
		}
		return prm, nil, nil
	case networkAllowlist:
	default:
		return prm, nil, provider.Errorf(provider.CodeInvalidRequest, "params.network must be \"none\" or \"allowlist\" (got %q)", prm.Network)
	}
	if len(prm.Allow) == 0 || len(prm.Allow) > maxAllow {
		return prm, nil, provider.Errorf(provider.CodeInvalidRequest, "params.allow must hold 1 to %d entries for params.network \"allowlist\"", maxAllow)
	}
	entries := make([]allowEntry, 0, len(prm.Allow))
	for _, s := range prm.Allow {
		e, err := parseAllow(s)
		if err != nil {
			return prm, nil, err
		}
		entries = append(entries, e)
	}
	return prm, entries, nil
}

// parseAllow parses "10.1.2.3", "10.0.0.0/8", either with ":port".
func parseAllow(s string) (allowEntry, error) {
	bad := func(why string) (allowEntry, error) {
		return allowEntry{}, provider.Errorf(provider.CodeInvalidRequest, "params.allow entry %q: %s", s, why)
	}
	addr, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		addr, port = s[:i], s[i+1:]
	}
	var e allowEntry
	if port != "" || strings.HasSuffix(s, ":") {
		n, err := strconv.ParseInt(port, 10, 32)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port must be 1 to 65535")
		}
		e.port = int32(n)
	}
	var err error
	if strings.Contains(addr, "/") {
		e.prefix, err = netip.ParsePrefix(addr)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(addr)
		e.prefix = netip.PrefixFrom(a, 32)
	}
	if err != nil || !e.prefix.Addr().Is4() {
		return bad("not an IPv4 address or CIDR (a NetworkPolicy cannot name hosts)")
	}
	e.prefix = e.prefix.Masked()
	if d, ok := allowlist.Containing(e.prefix, allowlist.Denied); ok {
		return bad("inside " + d.String() + ", which no sandbox reaches")
	}
	return e, nil
}

// excepted are the ranges to cut out of an entry's CIDR: the denied ones
// (allowlist.Denied), and the private ones (allowlist.Private) it does not
// lie within, where they lie inside it (a NetworkPolicy's except must lie
// inside its cidr), as the local provider's allow-list.
func (e allowEntry) excepted() []string {
	var out []string
	for _, r := range slices.Concat(allowlist.Denied, allowlist.Private) {
		if r.Bits() > e.prefix.Bits() && e.prefix.Contains(r.Addr()) {
			out = append(out, r.String())
		}
	}
	return out
}

// resourcesFor are a sandbox's resources: the defaults, or what prm asks.
func (p *Provider) resourcesFor(prm Params) Resources {
	r := p.cfg.Defaults
	if prm.CPUMillis != 0 {
		r.CPUMillis = prm.CPUMillis
	}
	if prm.MemoryMB != 0 {
		r.MemoryMB = prm.MemoryMB
	}
	if prm.EphemeralStorageMB != 0 {
		r.EphemeralStorageMB = prm.EphemeralStorageMB
	}
	return r
}

// ValidateParams implements provider.Provider.
func (p *Provider) ValidateParams(raw json.RawMessage) error {
	_, _, err := p.parseParams(raw)
	return err
}
