// Package egress runs the "allowlist" network mode of sandboxes: per
// sandbox a network namespace, a veth pair to the host with a /30 of the
// egress pool, and an nftables table that lets through only what the
// sandbox's list names (Setup), all removed again whoever made them
// (Teardown). It owns those kernel objects, the host's forwarding guard and
// the single check of the pool's size (CheckPool).
package egress

// The "allowlist" network mode: a sandbox that may reach only what its
// create names in params.allow.
//
// Such a sandbox runs in a network namespace of its own that Tether makes
// before the sandbox starts (ip netns add tether-<id>, owned by the host's
// user namespace, so nothing inside can change it), linked to the host by
// a veth pair (tth<the id's last 12 characters> on the host, eth0 inside)
// with a /30 taken from the egress pool. The host forwards and masquerades
// the sandbox's traffic, and an nftables table of the sandbox's own
// (inet tether_<id>) decides what passes, outside the sandbox's reach:
//
//   - never the host itself: everything that arrives from the sandbox's veth
//     for the host (any of its addresses) is rejected in the input hook;
//   - never link-local (169.254.0.0/16, the cloud metadata address), this
//     network and loopback (0.0.0.0/8, 127.0.0.0/8), multicast and reserved
//     (224.0.0.0/3), nor the egress pool, where the other sandboxes are;
//   - private ranges (10/8, 172.16/12, 192.168/16, 100.64/10) only for
//     entries that name an address or CIDR inside one: "10.0.0.0/8" opens
//     it, "0.0.0.0/0" and host names do not;
//   - everything else in the list, then nothing: every other packet is
//     rejected, IPv6 included.
//
// Host names are resolved by Tether when the sandbox is created and pinned
// in the sandbox's /etc/hosts; the sandbox has no DNS. Destroy removes the
// table, the veth and the namespace, whoever created them.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/allowlist"
	"github.com/tetherhq/tether/internal/host/hostos"
)

// InvalidError is an allow list (or a host name in it) that a create may
// not ask for: the caller's fault, not the host's.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// ErrTemporary marks failures that may pass if retried (a lookup that
// timed out, the host's tools failing).
var ErrTemporary = errors.New("temporary")

type temporaryError struct{ err error }

func (t temporaryError) Error() string   { return t.err.Error() }
func (t temporaryError) Unwrap() []error { return []error{t.err, ErrTemporary} }
func temporary(err error) error          { return temporaryError{err} }

// Limits of params.allow.
const (
	// MaxAllow is the most entries params.allow may hold.
	MaxAllow = allowlist.MaxEntries
	// maxAddrsPerName bounds the addresses pinned for one host name.
	maxAddrsPerName = 16
	// resolveTimeout bounds the resolution of a create's host names.
	resolveTimeout = 10 * time.Second
)

// DefaultPool is where allow-list sandboxes take their /30 links from
// unless the operator says otherwise: 16384 sandboxes at once.
const DefaultPool = "10.250.0.0/16"

// minPoolBits is the longest prefix a pool may have: a /28, four
// sandboxes.
const minPoolBits = 28

// CheckPool is the one check of an egress pool: an IPv4 network, its
// host bits clear, of /28 or larger (four sandboxes' /30s). The operator's
// configuration and Detect both use it.
func CheckPool(pool netip.Prefix) error {
	if !pool.IsValid() || !pool.Addr().Is4() || pool.Bits() > minPoolBits || pool != pool.Masked() {
		return fmt.Errorf("the egress pool %s is not an IPv4 network of /%d or larger", pool, minPoolBits)
	}
	return nil
}

// Where the kernel objects live and what they are called.
const (
	// NetnsDir is ip netns' folder, where each sandbox's namespace is.
	NetnsDir      = "/var/run/netns"
	ipForwardPath = "/proc/sys/net/ipv4/ip_forward"
	// egressLockPath serialises the choice of a /30 between Tether
	// processes on the host (each pool is shared by every state folder).
	egressLockPath = "/run/tether-egress.lock"
	// vethPrefix starts the host side of every sandbox's veth.
	vethPrefix = "tth"
	// guardTable keeps the host from forwarding anything but sandbox
	// traffic when Tether is the one that turned forwarding on.
	guardTable = "tether_forward_guard"
)

// NetnsName is the name of sandbox id's network namespace.
func NetnsName(id string) string { return "tether-" + id }

// VethName is the name of the host's end of sandbox id's veth pair: 15
// bytes, the most a name may have.
func VethName(id string) string { return vethPrefix + id[len(id)-12:] }

// TableName is the name of sandbox id's nftables table (inet).
func TableName(id string) string { return "tether_" + id }

// Egress is what the allow-list mode needs, found once by Detect.
type Egress struct {
	// Pool is where each sandbox's /30 comes from (DefaultPool if unset).
	// It must not overlap a network the host uses (the mode is unavailable
	// if it does); sandboxes never reach addresses inside it.
	Pool netip.Prefix
	// ip and nft are the paths of iproute2's ip and of nft.
	ip, nft string
	// problem says why the mode is unavailable on this host, if it is.
	problem string
	// Lookup resolves a host name to its IPv4 addresses (the host's
	// resolver if unset); tests replace it.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// forwarding serialises turning the host's forwarding on.
	forwarding sync.Mutex
}

// Detect finds the tools and checks that the host can run the mode; the
// provider's own problem, if any, makes it unavailable too.
func (e *Egress) Detect(providerProblem string) {
	if !e.Pool.IsValid() {
		e.Pool = netip.MustParsePrefix(DefaultPool)
	}
	if e.Lookup == nil {
		e.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
		}
	}
	e.ip, _ = exec.LookPath("ip")
	e.nft, _ = exec.LookPath("nft")
	if providerProblem != "" {
		e.problem = "the local provider is unavailable"
		return
	}
	e.problem = e.probe()
}

// probe returns why the mode cannot work on this host, or "". It changes
// nothing that outlives it: the rules are only checked (nft -c), and the
// namespace and veth it makes are removed.
func (e *Egress) probe() string {
	if err := CheckPool(e.Pool); err != nil {
		return err.Error()
	}
	if missing := hostos.Missing(hostos.Tool{Path: e.ip, What: "ip (Debian package iproute2)"},
		hostos.Tool{Path: e.nft, What: "nft (Debian package nftables)"}); missing != "" {
		return missing
	}
	if clash := hostAddrIn(e.Pool); clash != "" {
		return fmt.Sprintf("the egress pool %s overlaps %s, which the host uses; choose another pool", e.Pool, clash)
	}
	b, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return fmt.Sprintf("cannot read %s: %v", ipForwardPath, err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		f, err := os.OpenFile(ipForwardPath, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Sprintf("IPv4 forwarding is off and cannot be turned on (%v)", err)
		}
		_ = f.Close()
	}
	lock, err := os.OpenFile(egressLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Sprintf("cannot open %s: %v", egressLockPath, err)
	}
	_ = lock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := "probe_" + hostos.RandomSuffix()
	link := Link{Host: e.Pool.Addr().Next(), Sandbox: e.Pool.Addr().Next().Next()}
	rules, err := e.ruleset(id, link, []allowEntry{{prefix: netip.MustParsePrefix("192.0.2.0/24"), port: 443}}, nil)
	if err != nil {
		return err.Error()
	}
	if err := e.run(ctx, rules, e.nft, "-c", "-f", "-"); err != nil {
		return fmt.Sprintf("nftables cannot hold a sandbox's rules here: %v", err)
	}
	ns, veth := NetnsName(id), VethName(id)
	err = e.run(ctx, "netns add "+ns+"\nlink add "+veth+" type veth peer name eth0 netns "+ns+"\n", e.ip, "-batch", "-")
	_ = e.run(ctx, "link del "+veth+"\nnetns del "+ns+"\n", e.ip, "-force", "-batch", "-")
	if err != nil {
		return fmt.Sprintf("cannot make a network namespace and a veth pair: %v", err)
	}
	return ""
}

// hostAddrIn returns an address of the host's, other than a sandbox link's,
// that lies in pool (or "").
func hostAddrIn(pool netip.Prefix) string {
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if strings.HasPrefix(ifc.Name, vethPrefix) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			pfx, err := netip.ParsePrefix(ipn.String())
			if err == nil && pfx.Overlaps(pool) {
				return fmt.Sprintf("%s on %s", pfx, ifc.Name)
			}
		}
	}
	return ""
}

// Problem says why the mode is unavailable on this host, or "".
func (e *Egress) Problem() string { return e.problem }

// Note is the mode's line in a provider's Info.
func (e *Egress) Note() string {
	if e.problem != "" {
		return "network \"allowlist\": unavailable on this host: " + e.problem
	}
	return fmt.Sprintf("network \"allowlist\": params.allow lists host names, IPv4 addresses or CIDRs, each with an optional :port (TCP and UDP), at most %d; "+
		"the sandbox reaches only those, through a network namespace of its own filtered by nftables on the host; host names are resolved at create and pinned in /etc/hosts (no DNS inside); "+
		"the host itself, 169.254.0.0/16 (metadata), loopback, multicast and other sandboxes are never reachable; private ranges only through entries that name an address inside them",
		MaxAllow)
}

// allowEntry is one entry of params.allow: a host name or an address
// prefix, and a port (0: every port and protocol).
type allowEntry struct {
	host   string
	prefix netip.Prefix
	port   uint16
}

// CheckAllow checks an allow list for a sandbox of the mode: an
// *InvalidError if the mode is unavailable or the list is refused.
func (e *Egress) CheckAllow(allow []string) error {
	if e.problem != "" {
		return invalidf("params.network \"allowlist\" is unavailable on this server: %s", e.problem)
	}
	_, err := e.parseAllow(allow)
	return err
}

// parseAllow parses params.allow, refusing it whole for one bad entry.
func (e *Egress) parseAllow(allow []string) ([]allowEntry, error) {
	switch {
	case len(allow) == 0:
		return nil, invalidf("params.allow must list at least one host name, IPv4 address or CIDR for params.network \"allowlist\"")
	case len(allow) > MaxAllow:
		return nil, invalidf("params.allow has %d entries; at most %d are allowed", len(allow), MaxAllow)
	}
	out := make([]allowEntry, 0, len(allow))
	for i, s := range allow {
		en, err := e.parseEntry(s)
		if err != nil {
			return nil, invalidf("params.allow[%d] %q: %s", i, s, err)
		}
		out = append(out, en)
	}
	return out, nil
}

// parseEntry parses "host[:port]", "a.b.c.d[:port]" or "a.b.c.d/n[:port]".
func (e *Egress) parseEntry(s string) (allowEntry, error) {
	var en allowEntry
	if s == "" {
		return en, errors.New("empty")
	}
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") > 1 {
		return en, errors.New("IPv6 is not supported: sandboxes have IPv4 only")
	}
	target := s
	if host, port, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return en, errors.New("the port must be a number from 1 to 65535")
		}
		target, en.port = host, uint16(n)
	}
	if strings.Contains(target, "/") {
		pfx, err := netip.ParsePrefix(target)
		if err != nil || !pfx.Addr().Is4() {
			return en, errors.New("not an IPv4 CIDR such as 10.0.0.0/8")
		}
		if pfx != pfx.Masked() {
			return en, fmt.Errorf("has bits set past the /%d (did you mean %s?)", pfx.Bits(), pfx.Masked())
		}
		en.prefix = pfx
	} else if addr, err := netip.ParseAddr(target); err == nil {
		if !addr.Is4() {
			return en, errors.New("IPv6 is not supported: sandboxes have IPv4 only")
		}
		en.prefix = netip.PrefixFrom(addr, 32)
	} else {
		host := strings.ToLower(target)
		if err := checkHostname(host); err != nil {
			return en, err
		}
		en.host = host
		return en, nil
	}
	if allowlist.Within(en.prefix, allowlist.Denied) || e.Pool.Contains(en.prefix.Addr()) && e.Pool.Bits() <= en.prefix.Bits() {
		return en, fmt.Errorf("sandboxes may never reach %s (loopback, link-local and metadata, multicast, reserved, or the sandboxes' own pool %s)", en.prefix, e.Pool)
	}
	return en, nil
}

// checkHostname accepts a fully qualified DNS name: at least two labels of
// letters, digits and inner hyphens, the last one not all digits.
func checkHostname(h string) error {
	bad := errors.New("not a host name, IPv4 address or CIDR, with an optional :port")
	if len(h) > 253 || !strings.Contains(h, ".") {
		if !strings.Contains(h, ".") && len(h) <= 63 {
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

// Link is a sandbox's /30: the host's end and the sandbox's.
type Link struct{ Host, Sandbox netip.Addr }

// Setup gives sandbox id, which may reach what allow names, its network
// before its init starts: it resolves the host names and pins them in the
// file hosts (the sandbox's /etc/hosts), then makes the namespace, the veth
// and the rules. What it made is removed by Teardown, which the caller
// runs when it fails.
func (e *Egress) Setup(ctx context.Context, id string, allow []string, hosts string) error {
	entries, err := e.parseAllow(allow)
	if err != nil {
		return err
	}
	resolved, err := e.resolve(ctx, entries)
	if err != nil {
		return err
	}
	if err := writeHosts(hosts, resolved); err != nil {
		return fmt.Errorf("pinning the allowed host names: %w", err)
	}
	if err := e.enableForwarding(ctx); err != nil {
		return temporary(fmt.Errorf("network: %w", err))
	}
	link, err := e.addLink(ctx, id)
	if err != nil {
		return temporary(fmt.Errorf("network: %w", err))
	}
	rules, err := e.ruleset(id, link, entries, resolved)
	if err != nil {
		return err
	}
	if err := e.run(ctx, rules, e.nft, "-f", "-"); err != nil {
		return temporary(fmt.Errorf("network rules: %w", err))
	}
	return nil
}

// resolve looks up the entries' host names and keeps, for each, the
// addresses a sandbox may reach: public ones, and private ones inside a
// range an entry names. A name left with none fails the create, as does a
// name that does not exist, with one message that names neither the
// addresses found nor which case it was; a lookup that fails otherwise
// may be retried.
func (e *Egress) resolve(ctx context.Context, entries []allowEntry) (map[string][]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var hosts []string
	for _, en := range entries {
		if en.host != "" && !slices.Contains(hosts, en.host) {
			hosts = append(hosts, en.host)
		}
	}
	found := make([][]netip.Addr, len(hosts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, h := range hosts {
		g.Go(func() error {
			addrs, err := e.Lookup(gctx, h)
			var dnsErr *net.DNSError
			switch {
			case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
				// Told as a name with no address a sandbox may reach, so
				// that a tenant cannot tell names of the operator's
				// network that exist from those that do not.
			case err != nil:
				// The cause names the host's DNS server: not the tenant's
				// to see.
				return temporary(fmt.Errorf("params.allow: the lookup of host %s failed; it is retried", h))
			}
			found[i] = addrs
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string][]netip.Addr, len(hosts))
	for i, h := range hosts {
		var keep []netip.Addr
		for _, a := range found[i] {
			a = a.Unmap()
			if a.Is4() && e.reachable(a, entries) && !slices.Contains(keep, a) && len(keep) < maxAddrsPerName {
				keep = append(keep, a)
			}
		}
		if len(keep) == 0 {
			// Says what is refused, never what the name resolved to: the
			// answers of the operator's DNS are not the tenant's to map.
			return nil, invalidf(
				"params.allow: host %s has no address a sandbox may reach (it must resolve to a public IPv4 address, or a private one inside a range an entry names by address)", h)
		}
		slices.SortFunc(keep, netip.Addr.Compare)
		out[h] = keep
	}
	return out, nil
}

// reachable reports whether a resolved address may be pinned: never a
// denied one, a private one only inside a prefix an entry names.
func (e *Egress) reachable(a netip.Addr, entries []allowEntry) bool {
	one := netip.PrefixFrom(a, 32)
	if allowlist.Within(one, allowlist.Denied) || e.Pool.Contains(a) {
		return false
	}
	if !allowlist.Within(one, allowlist.Private) {
		return true
	}
	for _, en := range entries {
		if en.host == "" && en.prefix.Contains(a) && allowlist.Within(en.prefix, allowlist.Private) {
			return true
		}
	}
	return false
}

// writeHosts writes the sandbox's /etc/hosts: loopback and the pinned names.
func writeHosts(path string, resolved map[string][]netip.Addr) error {
	var b strings.Builder
	b.WriteString("# Written by Tether: the host names of params.allow, resolved when the sandbox was created.\n# There is no DNS in this sandbox.\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	names := make([]string, 0, len(resolved))
	for h := range resolved {
		names = append(names, h)
	}
	slices.Sort(names)
	for _, h := range names {
		for _, a := range resolved[h] {
			fmt.Fprintf(&b, "%s\t%s\n", a, h)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// enableForwarding turns the host's IPv4 forwarding on if it is off, and
// then first installs a guard table that keeps dropping every forwarded
// packet that neither comes from nor goes to a sandbox link, so that the
// host routes nothing else than before. Neither is undone.
func (e *Egress) enableForwarding(ctx context.Context) error {
	e.forwarding.Lock()
	defer e.forwarding.Unlock()
	b, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	guard := fmt.Sprintf(`table inet %[1]s {}
delete table inet %[1]s
table inet %[1]s {
	chain guard {
		type filter hook forward priority filter; policy accept;
		iifname != "%[2]s*" oifname != "%[2]s*" drop
	}
}
`, guardTable, vethPrefix)
	if err := e.run(ctx, guard, e.nft, "-f", "-"); err != nil {
		return fmt.Errorf("forwarding guard: %w", err)
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("turning IPv4 forwarding on: %w", err)
	}
	return nil
}

// addLink makes the sandbox's namespace and veth pair and addresses them
// with a free /30 of the pool (the namespace first: while anything of the
// sandbox's network is left, so is its namespace, which teardown removes
// last).
func (e *Egress) addLink(ctx context.Context, id string) (Link, error) {
	var link Link
	lock, err := os.OpenFile(egressLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return link, err
	}
	defer func() { _ = lock.Close() }() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return link, fmt.Errorf("locking %s: %w", egressLockPath, err)
	}
	link, err = e.freeLink(id)
	if err != nil {
		return link, err
	}
	ns, veth := NetnsName(id), VethName(id)
	host := fmt.Sprintf(`netns add %[1]s
link add %[2]s type veth peer name eth0 netns %[1]s
addr add %[3]s/30 dev %[2]s
link set %[2]s up
`, ns, veth, link.Host)
	if err := e.run(ctx, host, e.ip, "-batch", "-"); err != nil {
		return link, err
	}
	inside := fmt.Sprintf("link set lo up\naddr add %s/30 dev eth0\nlink set eth0 up\nroute add default via %s\n", link.Sandbox, link.Host)
	if err := e.run(ctx, inside, e.ip, "-n", ns, "-batch", "-"); err != nil {
		return link, err
	}
	return link, nil
}

// freeLink picks the /30 of the pool for id: the first free one from a
// place that the id chooses. Taken ones hold a host address already.
func (e *Egress) freeLink(id string) (Link, error) {
	base4 := e.Pool.Addr().As4()
	base := binary.BigEndian.Uint32(base4[:])
	slots := uint32(1) << (30 - e.Pool.Bits())
	used := map[uint32]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return Link{}, fmt.Errorf("listing the host's addresses: %w", err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP.To4())
		if ok && e.Pool.Contains(ip) {
			v := ip.As4()
			used[(binary.BigEndian.Uint32(v[:])-base)/4] = true
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	start := h.Sum32() % slots
	for i := range slots {
		slot := (start + i) % slots
		if used[slot] {
			continue
		}
		var hostIP, sbxIP [4]byte
		binary.BigEndian.PutUint32(hostIP[:], base+4*slot+1)
		binary.BigEndian.PutUint32(sbxIP[:], base+4*slot+2)
		return Link{Host: netip.AddrFrom4(hostIP), Sandbox: netip.AddrFrom4(sbxIP)}, nil
	}
	return Link{}, fmt.Errorf("no free /30 left in the egress pool %s", e.Pool)
}

// ruleset is the sandbox's nftables table (see the top of this file). The
// connections it lets out carry a mark of the sandbox's, and only replies
// with that mark get in, so that a sandbox that later gets the same /30
// cannot receive what belonged to an earlier one.
func (e *Egress) ruleset(id string, link Link, entries []allowEntry, resolved map[string][]netip.Addr) (string, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	mark := h.Sum32() | 1
	var private, public []string
	for _, en := range entries {
		rule := func(dests []netip.Prefix) string {
			set := make([]string, len(dests))
			for i, d := range dests {
				set[i] = d.String()
				if d.Bits() == 32 {
					set[i] = d.Addr().String()
				}
			}
			r := "ip daddr { " + strings.Join(set, ", ") + " }"
			if en.port != 0 {
				r += " meta l4proto { tcp, udp } th dport " + strconv.Itoa(int(en.port))
			}
			return r + fmt.Sprintf(" ct mark set %#x accept", mark)
		}
		if en.host == "" {
			if allowlist.Within(en.prefix, allowlist.Private) {
				private = append(private, rule([]netip.Prefix{en.prefix}))
			} else {
				public = append(public, rule([]netip.Prefix{en.prefix}))
			}
			continue
		}
		var priv, pub []netip.Prefix
		for _, a := range resolved[en.host] {
			if one := netip.PrefixFrom(a, 32); allowlist.Within(one, allowlist.Private) {
				priv = append(priv, one)
			} else {
				pub = append(pub, one)
			}
		}
		if len(priv) > 0 {
			private = append(private, rule(priv))
		}
		if len(pub) > 0 {
			public = append(public, rule(pub))
		}
	}
	if len(private)+len(public) == 0 {
		return "", errors.New("params.allow leaves nothing to reach")
	}
	ranges := func(rs []netip.Prefix) string {
		s := make([]string, len(rs))
		for i, r := range rs {
			s[i] = r.String()
		}
		return "{ " + strings.Join(s, ", ") + " }"
	}
	// Refused at once, not dropped, so that a client fails fast: TCP with
	// a reset (ICMP errors are rate-limited per destination), the rest with
	// "administratively prohibited".
	const reject = "jump deny"
	var b bytes.Buffer
	table, veth := TableName(id), VethName(id)
	// Declared empty and deleted first: the table is replaced whole.
	fmt.Fprintf(&b, "table inet %[1]s {}\ndelete table inet %[1]s\ntable inet %[1]s {\n", table)
	fmt.Fprintf(&b, "\tchain sbx_forward {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tiifname %q jump from_sbx\n\t\toifname %q jump to_sbx\n\t}\n", veth, veth)
	fmt.Fprintf(&b, "\tchain from_sbx {\n\t\tip daddr %s %s\n\t\tip daddr %s %s\n", e.Pool, reject, ranges(allowlist.Denied), reject)
	for _, r := range private {
		fmt.Fprintf(&b, "\t\t%s\n", r)
	}
	fmt.Fprintf(&b, "\t\tip daddr %s %s\n", ranges(allowlist.Private), reject)
	for _, r := range public {
		fmt.Fprintf(&b, "\t\t%s\n", r)
	}
	fmt.Fprintf(&b, "\t\t%s\n\t}\n", reject)
	fmt.Fprintf(&b, "\tchain to_sbx {\n\t\tct state established,related ct mark %#x accept\n\t\t%s\n\t}\n", mark, reject)
	b.WriteString("\tchain deny {\n\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx type admin-prohibited\n\t}\n")
	fmt.Fprintf(&b, "\tchain sbx_input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tiifname %q %s\n\t}\n", veth, reject)
	fmt.Fprintf(&b, "\tchain sbx_nat {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\tip saddr %s oifname != %q masquerade\n\t}\n}\n", link.Sandbox, veth)
	return b.String(), nil
}

// Teardown removes the sandbox's rules, veth and namespace, in that
// order, whichever of them exist; nothing to remove is success. The
// namespace goes last, so while any of them is left, it is too, and the
// check for it keeps the teardown of other sandboxes free.
func (e *Egress) Teardown(ctx context.Context, id string) error {
	ns := NetnsName(id)
	if _, err := os.Stat(filepath.Join(NetnsDir, ns)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if e.ip == "" || e.nft == "" {
		return fmt.Errorf("network: ip or nft is missing: cannot remove %s", ns)
	}
	table := TableName(id)
	if err := e.run(ctx, fmt.Sprintf("table inet %[1]s {}\ndelete table inet %[1]s\n", table), e.nft, "-f", "-"); err != nil {
		return fmt.Errorf("network rules: %w", err)
	}
	var batch string
	if veth := VethName(id); linkExists(veth) {
		batch = "link del " + veth + "\n"
	}
	if err := e.run(ctx, batch+"netns del "+ns+"\n", e.ip, "-batch", "-"); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// run runs a network tool with stdin as its input (hostos.RunTool).
func (e *Egress) run(ctx context.Context, stdin, name string, args ...string) error {
	return hostos.RunTool(ctx, stdin, name, args...)
}

// InNamespace runs fn on an OS thread of its own that has joined sandbox
// id's network namespace (Setup's), so that a process fn starts, the
// sandbox's bwrap, is in it.
func InNamespace(id string, fn func() error) error {
	return InNetns(filepath.Join(NetnsDir, NetnsName(id)), fn)
}

// InNetns runs fn on an OS thread of its own (hostos.OnOwnThread) that has joined
// the network namespace at path, so that a process fn starts is in it
// (os/exec forks from the calling thread).
func InNetns(path string, fn func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the network namespace: %w", err)
	}
	defer func() { _ = ns.Close() }()
	return hostos.OnOwnThread(func() error {
		if err := setns(ns); err != nil {
			return fmt.Errorf("entering the network namespace: %w", err)
		}
		return fn()
	})
}

func setns(f *os.File) error { return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET) }
