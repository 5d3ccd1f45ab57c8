// Package egress runs the "allowlist" network mode of sandboxes on the
// host: per sandbox a network namespace, a veth pair to the host with a
// /30 of the egress pool, and an nftables table that sends everything the
// sandbox says to the host's egress proxy and nothing anywhere else
// (Setup, Redirect), all removed again whoever made them (Teardown). It
// owns those kernel objects and the single check of the pool's size
// (CheckPool). What the proxy lets through is internal/egressproxy's.
package egress

// Such a sandbox runs in a network namespace of its own that Tether makes
// before the sandbox starts (ip netns add tether-<id>, owned by the host's
// user namespace, so nothing inside can change it), linked to the host by
// a veth pair (tth<the id's last 12 characters> on the host, eth0 inside)
// with a /30 taken from the egress pool, the host's end its gateway. An
// nftables table of the sandbox's own (inet tether_<id>), outside the
// sandbox's reach, decides what becomes of its packets:
//
//   - its DNS (UDP and TCP to port 53, whatever the address) is
//     redirected to the proxy's DNS port, and every other TCP connection
//     to the proxy's TCP port, on the host's end of its link; the proxy
//     learns where each was going from conntrack;
//   - the host accepts from the link only those redirected connections,
//     and only from the sandbox's own address: a packet with another
//     source (which nothing in the sandbox can send: it has no
//     capabilities in the namespace) is refused;
//   - nothing is forwarded: every other packet (UDP, ICMP, IPv6, anything
//     to another sandbox) is refused at once, TCP with a reset, the rest
//     with "administratively prohibited".
//
// Destroy removes the table, the veth and the namespace, whoever created
// them.

import (
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
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// ErrTemporary marks failures that may pass if retried (the host's tools
// failing).
var ErrTemporary = errors.New("temporary")

type temporaryError struct{ err error }

func (t temporaryError) Error() string   { return t.err.Error() }
func (t temporaryError) Unwrap() []error { return []error{t.err, ErrTemporary} }
func temporary(err error) error          { return temporaryError{err} }

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
	NetnsDir = "/var/run/netns"
	// egressLockPath serialises the choice of a /30 between Tether
	// processes on the host (each pool is shared by every state folder).
	egressLockPath = "/run/tether-egress.lock"
	// vethPrefix starts the host side of every sandbox's veth.
	vethPrefix = "tth"
)

// NetnsName is the name of sandbox id's network namespace.
func NetnsName(id string) string { return "tether-" + id }

// VethName is the name of the host's end of sandbox id's veth pair: 15
// bytes, the most a name may have.
func VethName(id string) string { return vethPrefix + id[len(id)-12:] }

// TableName is the name of sandbox id's nftables table (inet).
func TableName(id string) string { return "tether_" + id }

// Ports are where a sandbox's traffic goes on the host: its TCP to the
// egress proxy's TCP port, its DNS to the proxy's DNS port (UDP and TCP).
type Ports struct{ TCP, DNS uint16 }

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
}

// Detect finds the tools and checks that the host can run the mode; the
// provider's own problem, if any, makes it unavailable too.
func (e *Egress) Detect(providerProblem string) {
	if !e.Pool.IsValid() {
		e.Pool = netip.MustParsePrefix(DefaultPool)
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
	lock, err := os.OpenFile(egressLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Sprintf("cannot open %s: %v", egressLockPath, err)
	}
	_ = lock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := "probe_" + hostos.RandomSuffix()
	link := Link{Host: e.Pool.Addr().Next(), Sandbox: e.Pool.Addr().Next().Next()}
	if err := e.run(ctx, ruleset(id, link, Ports{TCP: 1, DNS: 2}), e.nft, "-c", "-f", "-"); err != nil {
		return fmt.Sprintf("nftables cannot hold a sandbox's rules here (it needs nf_tables with NAT): %v", err)
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

// Link is a sandbox's /30: the host's end and the sandbox's.
type Link struct{ Host, Sandbox netip.Addr }

// Setup gives sandbox id its network before its init starts: the
// namespace, the veth and the table that sends its TCP and DNS to ports.
// What it made is removed by Teardown, which the caller runs when it
// fails.
func (e *Egress) Setup(ctx context.Context, id string, ports Ports) (Link, error) {
	link, err := e.addLink(ctx, id)
	if err != nil {
		return link, temporary(fmt.Errorf("network: %w", err))
	}
	if err := e.Redirect(ctx, id, link, ports); err != nil {
		return link, err
	}
	return link, nil
}

// Redirect replaces the table of sandbox id (whose link is link) with one
// that sends its TCP and DNS to ports: a new proxy's, after a restart.
func (e *Egress) Redirect(ctx context.Context, id string, link Link, ports Ports) error {
	if err := e.run(ctx, ruleset(id, link, ports), e.nft, "-f", "-"); err != nil {
		return temporary(fmt.Errorf("network rules: %w", err))
	}
	return nil
}

// SandboxLink is the link of sandbox id, read from its veth.
func SandboxLink(id string) (Link, error) {
	ifc, err := net.InterfaceByName(VethName(id))
	if err != nil {
		return Link{}, fmt.Errorf("network: the sandbox's veth: %w", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return Link{}, fmt.Errorf("network: the sandbox's veth: %w", err)
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() {
			return Link{Host: pfx.Addr(), Sandbox: pfx.Addr().Next()}, nil
		}
	}
	return Link{}, fmt.Errorf("network: the veth %s has no IPv4 address", VethName(id))
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

// ruleset is the sandbox's nftables table (see the top of this file),
// declared empty and deleted first, so that it replaces the table whole.
func ruleset(id string, link Link, ports Ports) string {
	table, veth := TableName(id), VethName(id)
	return fmt.Sprintf(`table inet %[1]s {}
delete table inet %[1]s
table inet %[1]s {
	chain sbx_prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname %[2]q meta nfproto ipv4 meta l4proto { tcp, udp } th dport 53 redirect to :%[5]d
		iifname %[2]q meta nfproto ipv4 meta l4proto tcp redirect to :%[4]d
	}
	chain sbx_input {
		type filter hook input priority filter; policy accept;
		iifname %[2]q ip saddr %[3]s ct status dnat tcp dport { %[4]d, %[5]d } accept
		iifname %[2]q ip saddr %[3]s ct status dnat udp dport %[5]d accept
		iifname %[2]q jump deny
	}
	chain sbx_forward {
		type filter hook forward priority filter; policy accept;
		iifname %[2]q jump deny
		oifname %[2]q jump deny
	}
	chain deny {
		meta l4proto tcp reject with tcp reset
		reject with icmpx type admin-prohibited
	}
}
`, table, veth, link.Sandbox, ports.TCP, ports.DNS)
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
