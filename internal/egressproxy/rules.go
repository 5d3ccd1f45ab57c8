package egressproxy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/internal/allowlist"
)

// MaxRules is the most entries an allow list may hold.
const MaxRules = allowlist.MaxEntries

// Rule is one entry of a sandbox's allow list: a host name, a wildcard
// (every name below a domain), or an IPv4 or IPv6 address or CIDR, with
// an optional port.
type Rule struct {
	// Text is the entry as parsed, lower case: how records name it.
	Text string
	// name is an exact host name, or for a wildcard the suffix every
	// matching name ends with (".pythonhosted.org").
	name     string
	wildcard bool
	// prefix is an address rule's range.
	prefix netip.Prefix
	// port is the one TCP port the rule opens; 0 opens every port.
	port uint16
}

// matchName reports whether the rule allows host name (lower case, no
// final dot) on port. A wildcard matches every name below its domain,
// however deep, and not the domain itself.
func (r Rule) matchName(name string, port uint16) bool {
	if r.name == "" || (r.port != 0 && r.port != port) {
		return false
	}
	if r.wildcard {
		return len(name) > len(r.name) && strings.HasSuffix(name, r.name)
	}
	return name == r.name
}

// matchAddr reports whether the rule is an address rule that allows a on
// port.
func (r Rule) matchAddr(a netip.Addr, port uint16) bool {
	return r.prefix.IsValid() && r.prefix.Contains(a) && (r.port == 0 || r.port == port)
}

// Credential is what the proxy adds to every request a sandbox makes to
// Host over TLS (the proxy then terminates that TLS with the sandbox's
// CA): the header Header with Format's "{secret}" replaced by Secret, or,
// with Username, "Authorization: Basic" of Username and Secret (git over
// HTTPS). The secret never enters the sandbox.
type Credential struct {
	// Host is the exact host name (no wildcard) the credential is for; a
	// rule must allow it too.
	Host string
	// Header is the header's name; "Authorization" with Username.
	Header string
	// Format is the header's value, "{secret}" standing for Secret once;
	// "" is "{secret}". Unused with Username.
	Format string
	// Username, if set, makes the value basic authentication.
	Username string
	// Secret is the value the sandbox never sees.
	Secret string
	// Suspended, if set, says why the credential is not in force now (its
	// sandbox's owner lease lapsed, its secret is gone): the proxy still
	// terminates TLS to Host, and refuses each request with this reason
	// rather than send it on without the credential.
	Suspended string
}

// headerName and value are the header the credential sets.
func (c Credential) headerName() string {
	if c.Username != "" && c.Header == "" {
		return "Authorization"
	}
	return c.Header
}

func (c Credential) value() string {
	if c.Username != "" {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Secret))
	}
	format := c.Format
	if format == "" {
		format = secretPlaceholder
	}
	return strings.Replace(format, secretPlaceholder, c.Secret, 1)
}

// ErrNoSecret is the error for a credential's secret the tenant does not
// have, or that does not open.
var ErrNoSecret = errors.New("no such secret")

// secretPlaceholder stands for the secret in a Credential's Format.
const secretPlaceholder = "{secret}"

// headersNeverSet are headers a credential may not set: they frame the
// request or name its destination.
var headersNeverSet = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"upgrade": true, "te": true, "trailer": true, "keep-alive": true, "proxy-connection": true,
}

// CheckCredential returns what is wrong with c, if anything: a host that
// is not an exact host name, a header that is not a token or frames the
// request, a format without exactly one "{secret}", or any value holding a
// line break.
func CheckCredential(c Credential) error {
	if err := checkHostname(c.Host); err != nil {
		return fmt.Errorf("host %q: %w", c.Host, err)
	}
	h := c.headerName()
	if !isToken(h) || headersNeverSet[strings.ToLower(h)] {
		return fmt.Errorf("header %q is not a header a credential may set", h)
	}
	if c.Username == "" && c.Format != "" && strings.Count(c.Format, secretPlaceholder) != 1 {
		return fmt.Errorf("format must hold %s exactly once", secretPlaceholder)
	}
	if c.Username != "" && (c.Format != "" || strings.Contains(c.Username, ":")) {
		return errors.New("a username makes the value basic authentication: no format, and no ':' in the username")
	}
	if strings.ContainsAny(c.Format+c.Username+c.Secret, "\r\n\x00") {
		return errors.New("the format, the username and the secret may not hold line breaks or NUL")
	}
	return nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// Rules are what a sandbox may reach, and the credentials the proxy adds
// on its way.
type Rules struct {
	Allow       []Rule
	Credentials []Credential
}

// nameRule returns the first rule that allows name on port.
func (rs Rules) nameRule(name string, port uint16) (Rule, bool) {
	for _, r := range rs.Allow {
		if r.matchName(name, port) {
			return r, true
		}
	}
	return Rule{}, false
}

// addrRule returns the first address rule that allows a on port.
func (rs Rules) addrRule(a netip.Addr, port uint16) (Rule, bool) {
	for _, r := range rs.Allow {
		if r.matchAddr(a, port) {
			return r, true
		}
	}
	return Rule{}, false
}

// namesAnyPort reports whether some rule allows name on some port: what
// the DNS answers.
func (rs Rules) namesAnyPort(name string) bool {
	for _, r := range rs.Allow {
		if r.matchName(name, r.port) {
			return true
		}
	}
	return false
}

// opensPrivate reports whether an address rule names a private range that
// holds a: the one way a rule opens a private address.
func (rs Rules) opensPrivate(a netip.Addr) bool {
	for _, r := range rs.Allow {
		if r.prefix.IsValid() && r.prefix.Contains(a) && allowlist.PrefixClass(r.prefix) == allowlist.PrivateNet {
			return true
		}
	}
	return false
}

// credential returns the credential for name, if the rules hold one.
func (rs Rules) credential(name string) (Credential, bool) {
	for _, c := range rs.Credentials {
		if c.Host == name {
			return c, true
		}
	}
	return Credential{}, false
}

// Parser parses allow lists for one proxy: what it never reaches, and
// whether the operator lets rules name private addresses, decide which
// address rules are refused.
type Parser struct {
	// AllowPrivate accepts rules for loopback and link-local addresses
	// (EGRESS_ALLOW_PRIVATE).
	AllowPrivate bool
	// Denied are ranges no rule may name (the sandboxes' own pool).
	Denied []netip.Prefix
}

// Parse parses an allow list, refusing it whole for one bad entry; the
// error names the entry by its index.
func (ps Parser) Parse(allow []string) ([]Rule, error) {
	if len(allow) > MaxRules {
		return nil, fmt.Errorf("%d entries; at most %d are allowed", len(allow), MaxRules)
	}
	out := make([]Rule, 0, len(allow))
	for i, s := range allow {
		r, err := ps.ParseRule(s)
		if err != nil {
			return nil, fmt.Errorf("[%d] %q: %w", i, s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseRule parses one entry: "name", "*.name", "a.b.c.d", "a.b.c.d/n",
// "2001:db8::1", "2001:db8::/32", each with an optional ":port" (an IPv6
// one in brackets: "[2001:db8::1]:443").
func (ps Parser) ParseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, errors.New("empty")
	}
	target, port, err := splitPort(strings.ToLower(s))
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Text: strings.ToLower(s), port: port}
	if strings.Contains(target, ":") || strings.Contains(target, "/") || isIPv4(target) {
		if r.prefix, err = parsePrefix(target); err != nil {
			return Rule{}, err
		}
		return r, ps.checkPrefix(r.prefix)
	}
	if rest, ok := strings.CutPrefix(target, "*."); ok {
		if !strings.Contains(rest, ".") {
			return Rule{}, errors.New("a wildcard must leave at least two labels (*.example.com, not *.com)")
		}
		if err := checkHostname(rest); err != nil {
			return Rule{}, err
		}
		r.name, r.wildcard = "."+rest, true
		return r, nil
	}
	if err := checkHostname(target); err != nil {
		return Rule{}, err
	}
	r.name = target
	return r, nil
}

// splitPort cuts an entry's ":port" off: the last colon of a name or IPv4
// entry, the one after "]" of a bracketed IPv6 one; an IPv6 entry without
// brackets has none.
func splitPort(s string) (string, uint16, error) {
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 || (end+1 < len(s) && s[end+1] != ':') {
			return "", 0, errors.New("a bracketed IPv6 entry is [address]:port")
		}
		host = s[1:end]
		if end+1 < len(s) {
			port = s[end+2:]
			if port == "" {
				return "", 0, errors.New("the port must be a number from 1 to 65535")
			}
		}
		if !strings.Contains(host, ":") {
			return "", 0, errors.New("only IPv6 addresses go in brackets")
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
		if port == "" {
			return "", 0, errors.New("the port must be a number from 1 to 65535")
		}
	}
	if port == "" {
		return host, 0, nil
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, errors.New("the port must be a number from 1 to 65535")
	}
	return host, uint16(n), nil
}

func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

// parsePrefix parses an address or a CIDR in canonical form.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("not a host name, an IP address or a CIDR, with an optional :port")
		}
		if a.Is4In6() {
			return netip.Prefix{}, fmt.Errorf("an IPv4-mapped IPv6 address: write the IPv4 address %s", a.Unmap())
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not a CIDR such as 10.0.0.0/8 or 2001:db8::/32")
	}
	if pfx.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("an IPv4-mapped IPv6 range: write the IPv4 range")
	}
	if pfx != pfx.Masked() {
		return netip.Prefix{}, fmt.Errorf("has bits set past the /%d (did you mean %s?)", pfx.Bits(), pfx.Masked())
	}
	return pfx, nil
}

// checkPrefix refuses an address rule inside what no sandbox reaches, and
// inside loopback or link-local unless private addresses are allowed.
func (ps Parser) checkPrefix(pfx netip.Prefix) error {
	denied := false
	for _, d := range ps.Denied {
		denied = denied || (d.Bits() <= pfx.Bits() && d.Contains(pfx.Addr()))
	}
	switch class := allowlist.PrefixClass(pfx); {
	case denied || class == allowlist.Never:
		return fmt.Errorf("sandboxes may never reach %s (the unspecified address, multicast, reserved or documentation ranges, metadata addresses, or the sandboxes' own pool)", pfx)
	case (class == allowlist.Loopback || class == allowlist.LinkLocal) && !ps.AllowPrivate:
		return fmt.Errorf("sandboxes may never reach %s (%s) unless the operator sets EGRESS_ALLOW_PRIVATE", pfx, class)
	}
	return nil
}

// checkHostname accepts a fully qualified DNS name: at least two labels of
// letters, digits and inner hyphens, the last one not all digits.
func checkHostname(h string) error {
	bad := errors.New("not a host name, an IP address or a CIDR, with an optional :port")
	if len(h) > 253 || !strings.Contains(h, ".") {
		if !strings.Contains(h, ".") && len(h) <= 63 && h != "" {
			return errors.New("a host name must be fully qualified (pypi.org, not pypi)")
		}
		return bad
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return bad
		}
		for _, c := range l {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return bad
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return bad
	}
	return nil
}

// normalName is a host name as rules match it: lower case, no final dot;
// "" when s is not a host name.
func normalName(s string) string {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if checkHostname(s) != nil {
		return ""
	}
	return s
}
