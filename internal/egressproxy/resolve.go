package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// LookupFunc resolves a host name to its addresses.
type LookupFunc func(ctx context.Context, name string) ([]netip.Addr, error)

// errNotFound is a name that does not exist.
var errNotFound = errors.New("no such host")

// HostLookup resolves names with the host's resolver.
func HostLookup(ctx context.Context, name string) ([]netip.Addr, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return nil, errNotFound
	}
	return addrs, err
}

// StaticLookup resolves names from hosts alone (EGRESS_HOSTS): a name it
// does not hold does not exist, and no question leaves the host.
func StaticLookup(hosts map[string][]netip.Addr) LookupFunc {
	return func(_ context.Context, name string) ([]netip.Addr, error) {
		if addrs, ok := hosts[name]; ok {
			return slices.Clone(addrs), nil
		}
		return nil, errNotFound
	}
}

// ParseHosts parses EGRESS_HOSTS: "name=address" pairs separated by
// commas (or blanks); a name given more than once has every address given.
func ParseHosts(s string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for pair := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		name, addr, ok := strings.Cut(pair, "=")
		a, err := netip.ParseAddr(strings.TrimSpace(addr))
		host := normalName(strings.TrimSpace(name))
		if !ok || err != nil || a.Zone() != "" || host == "" {
			return nil, fmt.Errorf("%q is not name=address (pypi.org=192.0.2.10)", pair)
		}
		out[host] = append(out[host], a.Unmap())
	}
	return out, nil
}

// resolver is the proxy's own resolution of names, cached for a while so
// that a sandbox's DNS question and its connection right after it cost
// one lookup.
type resolver struct {
	lookup LookupFunc
	ttl    time.Duration

	mu    sync.Mutex
	cache map[string]resolved
}

type resolved struct {
	addrs []netip.Addr
	err   error
	until time.Time
}

// Bounds of the resolver.
const (
	maxCached     = 4096
	negativeTTL   = 5 * time.Second
	lookupTimeout = 5 * time.Second
	maxAddrs      = 16
)

// resolve returns name's addresses (at most maxAddrs, unmapped), or
// errNotFound, or another error for a lookup that failed.
func (r *resolver) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	now := time.Now()
	r.mu.Lock()
	c, ok := r.cache[name]
	r.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.addrs, c.err
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := r.lookup(ctx, name)
	var keep []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() && !slices.Contains(keep, a) && len(keep) < maxAddrs {
			keep = append(keep, a)
		}
	}
	ttl := r.ttl
	switch {
	case err == nil && len(keep) == 0:
		err = errNotFound
		fallthrough
	case errors.Is(err, errNotFound):
		ttl = min(ttl, negativeTTL)
	case err != nil:
		return nil, fmt.Errorf("looking up %s: %w", name, err) // not cached
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxCached {
		for k, v := range r.cache {
			if now.After(v.until) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= maxCached {
			clear(r.cache)
		}
	}
	if r.cache == nil {
		r.cache = map[string]resolved{}
	}
	r.cache[name] = resolved{addrs: keep, err: err, until: now.Add(ttl)}
	return keep, err
}
