package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/tetherhq/tether/internal/allowlist"
)

// verdict is the proxy's decision on a connection (or an HTTP request).
type verdict struct {
	allowed bool
	// rule is the rule's text that allowed it; reason why it was refused.
	rule, reason string
	// name is the destination's host name, if known.
	name string
	// upstream is where the proxy connects.
	upstream netip.AddrPort
}

func refused(name, format string, args ...any) verdict {
	return verdict{name: name, reason: fmt.Sprintf(format, args...)}
}

// decide rules on a connection of sb's that dialled dst and, if name is
// not "", asked for the host name (its TLS SNI or HTTP Host):
//
//   - a name is allowed by a name rule for its port, and then only if the
//     dialled address is one the proxy itself resolved for the name, or
//     gave the sandbox for it in a DNS answer: a sandbox that dials
//     another address with an allowed name (DNS rebinding, a forged
//     /etc/hosts, a Host or SNI that is not the address's) is refused;
//   - otherwise an address rule that holds the dialled address allows it
//     (whatever the name, since the sandbox may reach that address
//     anyway);
//   - a connection without a name (other TCP) is allowed by an address
//     rule, or by a name rule whose name the dialled address belongs to;
//   - never to an address that is not reachable (reachable).
//
// The proxy connects to the dialled address: it is the name's own, or
// one a rule allows by address.
func (p *Proxy) decide(ctx context.Context, sb *sandboxState, rules Rules, name string, dst netip.AddrPort) verdict {
	a, port := dst.Addr(), dst.Port()
	if ip, err := netip.ParseAddr(name); err == nil {
		if ip.Unmap() != a {
			return refused("", "it names %s but dialled %s", ip, a)
		}
		name = ""
	}
	if name == "" {
		return p.decideAddr(ctx, sb, rules, dst)
	}
	allow := func(r Rule) verdict { return verdict{allowed: true, rule: r.Text, name: name, upstream: dst} }
	r, ok := rules.nameRule(name, port)
	if !ok {
		if ar, ok := rules.addrRule(a, port); ok && p.reachable(a, rules) {
			return allow(ar)
		}
		return refused(name, "%s is not allowed", net.JoinHostPort(name, fmt.Sprint(port)))
	}
	addrs, err := p.res.resolve(ctx, name)
	if (err == nil && slices.Contains(addrs, a)) || sb.answeredFor(a, name) {
		if p.reachable(a, rules) {
			return allow(r)
		}
		return refused(name, "%s has no address the sandbox may reach", name)
	}
	if ar, ok := rules.addrRule(a, port); ok && p.reachable(a, rules) {
		return allow(ar)
	}
	switch {
	case err != nil && !isNotFound(err):
		return refused(name, "the lookup of %s failed", name)
	case !slices.ContainsFunc(addrs, func(x netip.Addr) bool { return p.reachable(x, rules) }):
		// The same words for a name that does not exist and for one
		// that resolves only to addresses the sandbox may not reach: the
		// answers of the operator's DNS are not the tenant's to map.
		return refused(name, "%s has no address the sandbox may reach", name)
	}
	return refused(name, "the sandbox dialled %s, which is not an address of %s (DNS rebinding, or a Host or SNI that is not the address's)", a, name)
}

// decideAddr rules on a connection known by its address alone.
func (p *Proxy) decideAddr(ctx context.Context, sb *sandboxState, rules Rules, dst netip.AddrPort) verdict {
	a, port := dst.Addr(), dst.Port()
	if !p.reachable(a, rules) {
		return refused("", "%s is not an address sandboxes may reach", a)
	}
	if r, ok := rules.addrRule(a, port); ok {
		return verdict{allowed: true, rule: r.Text, upstream: dst}
	}
	for _, n := range sb.namesAt(a) {
		if r, ok := rules.nameRule(n, port); ok {
			return verdict{allowed: true, rule: r.Text, name: n, upstream: dst}
		}
	}
	for _, r := range rules.Allow {
		if r.wildcard || r.name == "" || !r.matchName(r.name, port) {
			continue
		}
		if addrs, err := p.res.resolve(ctx, r.name); err == nil && slices.Contains(addrs, a) {
			return verdict{allowed: true, rule: r.Text, name: r.name, upstream: dst}
		}
	}
	return refused("", "%s is not allowed", dst)
}

func isNotFound(err error) bool { return errors.Is(err, errNotFound) }

// reachable reports whether the proxy may connect to a for a sandbox with
// rules: never to the denied ranges (the sandboxes' pool) or to what no
// rule reaches (allowlist.Never); to the host's own addresses, loopback
// and link-local only where the operator allows private addresses; to a
// private address where the operator does, or an address rule names a
// private range that holds it.
func (p *Proxy) reachable(a netip.Addr, rules Rules) bool {
	a = a.Unmap()
	if p.denied(a) {
		return false
	}
	class := allowlist.Classify(a)
	switch {
	case class == allowlist.Never:
		return false
	case p.cfg.AllowPrivate:
		return true
	case class == allowlist.Loopback || class == allowlist.LinkLocal || p.hostAddrs.has(a):
		return false
	case class == allowlist.PrivateNet:
		return rules.opensPrivate(a)
	}
	return true
}

// denied reports whether a lies in a range no sandbox reaches (Deny).
func (p *Proxy) denied(a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.deniedRanges {
		if d.Contains(a) {
			return true
		}
	}
	return false
}

// hostAddrs are the host's own addresses, looked up again at most once a
// second: a sandbox never reaches the host it runs on, even at a public
// address of the host's.
type hostAddrs struct {
	mu    sync.Mutex
	addrs []netip.Addr
	at    time.Time
}

func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.at) > time.Second {
		h.at = time.Now()
		h.addrs = h.addrs[:0]
		ifaddrs, _ := net.InterfaceAddrs()
		for _, ia := range ifaddrs {
			if ipn, ok := ia.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(ipn.IP); ok {
					h.addrs = append(h.addrs, x.Unmap())
				}
			}
		}
	}
	return slices.Contains(h.addrs, a)
}
