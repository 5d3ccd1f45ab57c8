package allowlist

import "net/netip"

// Class is what kind of destination an address is, as an egress proxy
// judges it: whether any rule may open it, and which.
type Class int

// The classes of Classify, from the one rules open freely to the ones
// nothing opens.
const (
	// Public addresses are reached wherever a rule allows them.
	Public Class = iota
	// PrivateNet addresses (Private, and IPv6's unique local fc00::/7)
	// are reached only through a rule that names an address or range
	// inside one, or where the operator allows private addresses.
	PrivateNet
	// Loopback and LinkLocal are reached only where the operator allows
	// private addresses.
	Loopback
	LinkLocal
	// Never are reached by nothing: the unspecified address, multicast,
	// reserved and documentation ranges, the cloud metadata addresses,
	// and the IPv6 forms that embed an IPv4 address without routing to
	// it the same way (6to4, Teredo, the deprecated ones).
	Never
)

// String names the class as messages say it.
func (c Class) String() string {
	switch c {
	case PrivateNet:
		return "private"
	case Loopback:
		return "loopback"
	case LinkLocal:
		return "link-local"
	case Never:
		return "never reachable"
	}
	return "public"
}

// classified are the ranges Classify knows, the narrower first.
var classified = []struct {
	prefix netip.Prefix
	class  Class
}{
	{netip.MustParsePrefix("169.254.169.254/32"), Never}, // cloud instance metadata
	{netip.MustParsePrefix("100.100.100.200/32"), Never}, // Alibaba Cloud's
	{netip.MustParsePrefix("fd00:ec2::254/128"), Never},  // AWS's over IPv6
	{netip.MustParsePrefix("0.0.0.0/8"), Never},
	{netip.MustParsePrefix("127.0.0.0/8"), Loopback},
	{netip.MustParsePrefix("169.254.0.0/16"), LinkLocal},
	{netip.MustParsePrefix("224.0.0.0/3"), Never}, // multicast, reserved, broadcast
	{netip.MustParsePrefix("10.0.0.0/8"), PrivateNet},
	{netip.MustParsePrefix("100.64.0.0/10"), PrivateNet},
	{netip.MustParsePrefix("172.16.0.0/12"), PrivateNet},
	{netip.MustParsePrefix("192.168.0.0/16"), PrivateNet},
	{netip.MustParsePrefix("::1/128"), Loopback},
	{netip.MustParsePrefix("::/128"), Never},
	{netip.MustParsePrefix("::/96"), Never},           // IPv4-compatible (deprecated)
	{netip.MustParsePrefix("::ffff:0:0:0/96"), Never}, // IPv4-translated (SIIT)
	{netip.MustParsePrefix("fe80::/10"), LinkLocal},
	{netip.MustParsePrefix("fec0::/10"), Never}, // site-local (deprecated)
	{netip.MustParsePrefix("fc00::/7"), PrivateNet},
	{netip.MustParsePrefix("ff00::/8"), Never},
	{netip.MustParsePrefix("100::/64"), Never},       // discard
	{netip.MustParsePrefix("2001:db8::/32"), Never},  // documentation
	{netip.MustParsePrefix("2002::/16"), Never},      // 6to4: may embed any IPv4 address
	{netip.MustParsePrefix("2001::/32"), Never},      // Teredo: likewise
	{netip.MustParsePrefix("64:ff9b:1::/48"), Never}, // local-use NAT64
}

// nat64 is the well-known NAT64 prefix: an address in it reaches the IPv4
// address of its last four bytes, and is judged as that address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Classify is the class of a, judged by where it leads: an IPv4-mapped
// IPv6 address (::ffff:a.b.c.d) and a NAT64 one (64:ff9b::a.b.c.d) as the
// IPv4 address they carry; a zone is ignored.
func Classify(a netip.Addr) Class {
	a = a.WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return PrefixClass(netip.PrefixFrom(a, a.BitLen()))
}

// PrefixClass is the class of the first classified range that holds all of
// pfx, or Public when none does (0.0.0.0/0 is Public: it holds public
// addresses, and the others in it keep their own classes).
func PrefixClass(pfx netip.Prefix) Class {
	for _, c := range classified {
		if c.prefix.Bits() <= pfx.Bits() && c.prefix.Contains(pfx.Addr()) {
			return c.class
		}
	}
	return Public
}
