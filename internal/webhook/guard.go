package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// blocked are the networks a delivery never goes to unless the operator
// allows private addresses (WEBHOOK_ALLOW_PRIVATE), with what each is.
// An IPv6 address that carries an IPv4 one is also checked as that IPv4
// address (see embeddedIPv4), since that is where it routes.
var blocked = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"}, // "this network"; 0.0.0.0 reaches the host
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::/96"), "reserved"},              // IPv4-compatible (deprecated): ::a.b.c.d
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "reserved"},    // IPv4-translated (SIIT): ::ffff:0:a.b.c.d
	{netip.MustParsePrefix("fec0::/10"), "private"},           // site-local (deprecated)
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"}, // cloud instance metadata (also link-local)
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata"}, // Alibaba Cloud's
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},  // AWS's over IPv6
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("fc00::/7"), "private"},         // unique local
	{netip.MustParsePrefix("100.64.0.0/10"), "private"},    // shared address space (carrier NAT)
	{netip.MustParsePrefix("192.0.0.0/24"), "private"},     // IETF protocol assignments
	{netip.MustParsePrefix("198.18.0.0/15"), "private"},    // benchmarking
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},    //
	{netip.MustParsePrefix("ff00::/8"), "multicast"},       //
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},     // 255.255.255.255 (broadcast) included
	{netip.MustParsePrefix("2001:db8::/32"), "reserved"},   // documentation
	{netip.MustParsePrefix("100::/64"), "reserved"},        // discard
	{netip.MustParsePrefix("192.0.2.0/24"), "reserved"},    // documentation
	{netip.MustParsePrefix("198.51.100.0/24"), "reserved"}, // documentation
	{netip.MustParsePrefix("203.0.113.0/24"), "reserved"},  // documentation
	{netip.MustParsePrefix("2002::/16"), "reserved"},       // 6to4: may embed any IPv4 address
	{netip.MustParsePrefix("2001::/32"), "reserved"},       // Teredo: likewise
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved"},  // local-use NAT64
	{netip.MustParsePrefix("192.88.99.0/24"), "reserved"},  // 6to4 relays (deprecated)
}

// The IPv6 forms that carry an IPv4 address, where they carry it.
var (
	compatible = netip.MustParsePrefix("::/96")           // ::a.b.c.d, in its last 4 bytes
	translated = netip.MustParsePrefix("::ffff:0:0:0/96") // ::ffff:0:a.b.c.d, likewise
	nat64      = netip.MustParsePrefix("64:ff9b::/96")    // likewise
	sixToFour  = netip.MustParsePrefix("2002::/16")       // 2002:AABB:CCDD::/48, in bytes 2-5
	teredo     = netip.MustParsePrefix("2001::/32")       // the client's, inverted, in its last 4 bytes
	ipv6Own    = netip.MustParsePrefix("::/127")          // :: and ::1, which carry none
)

// embeddedIPv4 is the IPv4 address an IPv6 address reaches or names
// (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo's client), and
// whether it has one. :: and ::1 are IPv6's own.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() || ip.Is4In6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	switch {
	case compatible.Contains(ip) && !ipv6Own.Contains(ip),
		translated.Contains(ip), nat64.Contains(ip):
		return netip.AddrFrom4(last), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case teredo.Contains(ip):
		return netip.AddrFrom4([4]byte{^last[0], ^last[1], ^last[2], ^last[3]}), true
	}
	return netip.Addr{}, false
}

// Forbidden returns the class of address ip belongs to if deliveries must
// not go there (loopback, link-local, metadata, private, unspecified,
// multicast, reserved), or "" if they may. Every spelling of an address
// is judged by what it reaches: an IPv6 address that carries an IPv4 one
// is refused as that address's class (::127.0.0.1 and 2002:7f00:1:: are
// loopback), or as reserved where the form itself is (6to4, Teredo, the
// deprecated ones); NAT64 of a public address is public.
func Forbidden(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if v4, ok := embeddedIPv4(ip); ok {
		if class := blockedClass(v4); class != "" {
			return class
		}
	}
	return blockedClass(ip)
}

// blockedClass is the class of the first blocked network holding ip, or "".
func blockedClass(ip netip.Addr) string {
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			return b.class
		}
	}
	return ""
}

// Guard keeps deliveries off forbidden addresses: when an endpoint is
// created (CheckURL, which resolves its host) and again whenever a
// connection is made (Control, which sees the address actually dialled,
// so that a name that resolves elsewhere later gets nowhere: DNS
// rebinding).
type Guard struct {
	// AllowPrivate lets deliveries go anywhere (WEBHOOK_ALLOW_PRIVATE): for
	// receivers on the operator's own network, and tests.
	AllowPrivate bool
	// Resolver resolves hosts in CheckURL; nil: net.DefaultResolver.
	Resolver *net.Resolver
}

// maxURL is the longest endpoint URL, in bytes.
const maxURL = 2048

// resolveTimeout bounds CheckURL's lookup of a host.
const resolveTimeout = 5 * time.Second

// CheckURL parses an endpoint URL and refuses what deliveries must not go
// to: anything but an absolute http or https URL with a host (no user
// information, no fragment), INVALID_REQUEST; a host that is, or resolves
// to, a forbidden address, FORBIDDEN.
func (g Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := parseEndpointURL(raw)
	if err != nil || g.AllowPrivate {
		return u, err
	}
	if err := g.checkHost(ctx, u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// parseEndpointURL checks an endpoint URL's shape: absolute http(s) with a
// host, no user information, no fragment, no spaces.
func parseEndpointURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || len(raw) > maxURL || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.Opaque != "" || strings.ContainsAny(raw, " \t\r\n") {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "url must be an absolute http:// or https:// URL with a host, at most %d bytes", maxURL)
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "url must not carry user information or a fragment (receivers authenticate deliveries by their signature)")
	}
	return u, nil
}

// checkHost refuses a host that is, or resolves to, a forbidden address.
func (g Guard) checkHost(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		if class := Forbidden(ip); class != "" {
			return forbidden(host, ip, class)
		}
		return nil
	}
	if name := strings.ToLower(strings.TrimSuffix(host, ".")); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return forbiddenName(host)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return domain.Errorf(domain.CodeInvalidRequest, "url's host %q does not resolve", host)
	}
	for _, ip := range ips {
		if Forbidden(ip) != "" {
			return forbiddenName(host)
		}
	}
	return nil
}

func forbidden(host string, ip netip.Addr, class string) error {
	return domain.Errorf(domain.CodeForbidden,
		"url's host %s is a %s address (%s): deliveries go only to public addresses unless the operator sets WEBHOOK_ALLOW_PRIVATE", host, class, ip)
}

// forbiddenName refuses a host name that resolves to a forbidden address.
// It says what is refused, never what the name resolved to or which kind
// of address that is: the answers of the operator's DNS are not the
// tenant's to map.
func forbiddenName(host string) error {
	return domain.Errorf(domain.CodeForbidden,
		"url's host %s resolves to an address deliveries may not go to (loopback, private, link-local, metadata, multicast, unspecified or reserved): deliveries go only to public addresses unless the operator sets WEBHOOK_ALLOW_PRIVATE", host)
}

// ErrForbiddenAddress is what a connection to a forbidden address fails
// with.
var ErrForbiddenAddress = errors.New("webhook: forbidden address")

// Control is a net.Dialer Control hook that refuses connections to
// forbidden addresses: it sees the address the dialer is about to connect
// to, after resolution.
func (g Guard) Control(_, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
	}
	if Forbidden(ap.Addr()) != "" {
		// The delivery's recorded error, which the tenant reads: it says
		// what is refused, not the address the operator's DNS answered.
		return fmt.Errorf("%w: the receiver's host resolved to an address deliveries may not go to (loopback, private, link-local, metadata, multicast, unspecified or reserved)", ErrForbiddenAddress)
	}
	return nil
}

// Client returns the HTTP client deliveries are sent with: connections
// only through the guard (no proxy from the environment, which would
// dial for it), no redirects followed (a 3xx is a failed attempt), each
// attempt bounded by timeout.
func (g Guard) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: g.Control}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
