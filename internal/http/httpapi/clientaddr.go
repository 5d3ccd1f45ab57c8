package httpapi

import (
	"net/http"
	"net/netip"
	"strings"
)

// clientAddr is the address failed authentications are counted under:
// the TCP peer's; or, when the peer is a proxy the operator trusts
// (TRUSTED_PROXIES), the right-most address of X-Forwarded-For that is not
// a trusted proxy's (each proxy appends the address it was reached from,
// so what lies left of it may be the client's invention). An IPv6 address
// counts as its /64, which one host usually holds whole. With no proxy
// trusted, the header is never read.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := peer.Addr().Unmap().WithZone("")
	if isTrusted(a, trusted) {
		a = forwardedClient(r.Header.Values("X-Forwarded-For"), a, trusted)
	}
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// isTrusted reports whether a is in one of the trusted ranges.
func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient walks X-Forwarded-For from the right, starting from the
// trusted peer, and returns the first hop that is not trusted. A hop that
// is not an address stops the walk at the last one that was (a trusted
// proxy wrote everything right of it); when every hop is trusted, the
// left-most one is the client.
func forwardedClient(values []string, peer netip.Addr, trusted []netip.Prefix) netip.Addr {
	var hops []string
	for _, v := range values {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return client
		}
		client = a
		if !isTrusted(a, trusted) {
			return a
		}
	}
	return client
}

// parseHop reads one hop of X-Forwarded-For: an address, perhaps with a
// port ("192.0.2.7:4711", "[2001:db8::7]:4711") or in brackets.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}
