// Package allowlist holds what every provider's "allowlist" network mode
// shares, whatever enforces it (nftables on the host for local, a
// NetworkPolicy for kubernetes): how many entries params.allow may hold,
// the ranges no sandbox reaches whatever its list says, and the private
// ranges it reaches only through an entry that names an address inside
// them. It imports nothing but the standard library, so a provider that
// is not on the host may use it.
package allowlist

import "net/netip"

// MaxEntries is the most entries params.allow may hold.
const MaxEntries = 64

// Denied and Private are the ranges no sandbox reaches (this network,
// loopback, link-local with the cloud metadata address, multicast and
// reserved), and the ranges it reaches only where an entry names an
// address or CIDR inside one. They are not to be changed.
var (
	Denied = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("224.0.0.0/3"),
	}
	Private = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
	}
)

// Containing returns the first of ranges that pfx lies inside (equal to
// it, or a part of it), and whether there is one.
func Containing(pfx netip.Prefix, ranges []netip.Prefix) (netip.Prefix, bool) {
	for _, r := range ranges {
		if r.Bits() <= pfx.Bits() && r.Contains(pfx.Addr()) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// Within reports whether pfx lies inside one of ranges.
func Within(pfx netip.Prefix, ranges []netip.Prefix) bool {
	_, ok := Containing(pfx, ranges)
	return ok
}
