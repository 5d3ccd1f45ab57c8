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

	"github.com/tetherhq/tether/internal/sandbox"
)

// blocked are the networks a delivery never goes to unless the operator
// allows private addresses (WEBHOOK_ALLOW_PRIVATE), with what each is.
// IPv4-mapped IPv6 addresses are checked as the IPv4 address they map,
// and NAT64 ones (64:ff9b::/96) as the IPv4 address they embed.
var blocked = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"}, // "this network"; 0.0.0.0 reaches the host
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
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
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Forbidden returns the class of address ip belongs to if deliveries must
// not go there (loopback, link-local, metadata, private, unspecified,
// multicast, reserved), or "" if they may.
func Forbidden(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
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
		return nil, sandbox.Errorf(sandbox.CodeInvalidRequest, "url must be an absolute http:// or https:// URL with a host, at most %d bytes", maxURL)
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, sandbox.Errorf(sandbox.CodeInvalidRequest, "url must not carry user information or a fragment (receivers authenticate deliveries by their signature)")
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
		return forbidden(host, netip.MustParseAddr("127.0.0.1"), "loopback")
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return sandbox.Errorf(sandbox.CodeInvalidRequest, "url's host %q does not resolve", host)
	}
	for _, ip := range ips {
		if class := Forbidden(ip); class != "" {
			return forbidden(host, ip, class)
		}
	}
	return nil
}

func forbidden(host string, ip netip.Addr, class string) error {
	return sandbox.Errorf(sandbox.CodeForbidden,
		"url's host %s is a %s address (%s): deliveries go only to public addresses unless the operator sets WEBHOOK_ALLOW_PRIVATE", host, class, ip)
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
	if class := Forbidden(ap.Addr()); class != "" {
		return fmt.Errorf("%w: %s is a %s address", ErrForbiddenAddress, ap.Addr(), class)
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
