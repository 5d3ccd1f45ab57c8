package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/host/hostos"
)

// TestCheckPool: the one check of a pool's size and form.
func TestCheckPool(t *testing.T) {
	t.Parallel()
	for pool, ok := range map[string]bool{
		"10.250.0.0/16": true, "10.0.0.0/28": true, "192.168.7.0/24": true,
		"10.0.0.0/29": false, "10.0.0.0/30": false, "10.0.0.1/16": false, "fd00::/64": false,
	} {
		if err := CheckPool(netip.MustParsePrefix(pool)); (err == nil) != ok {
			t.Errorf("CheckPool(%s) = %v; want ok %v", pool, err, ok)
		}
	}
	if err := CheckPool(netip.Prefix{}); err == nil {
		t.Error("CheckPool of no pool passed")
	}
}

// TestParseAllow: entries are host names, IPv4 addresses or CIDRs with an
// optional port; IPv6, denied ranges and the pool itself are refused as the
// caller's fault (InvalidError).
func TestParseAllow(t *testing.T) {
	t.Parallel()
	e := &Egress{Pool: netip.MustParsePrefix(DefaultPool)}
	good, err := e.parseAllow([]string{"pypi.org", "1.2.3.4:443", "10.0.0.0/8", "Files.PythonHosted.org:443"})
	if err != nil {
		t.Fatal(err)
	}
	if good[0].host != "pypi.org" || good[1].prefix != netip.MustParsePrefix("1.2.3.4/32") || good[1].port != 443 ||
		good[2].prefix.Bits() != 8 || good[3].host != "files.pythonhosted.org" {
		t.Errorf("parsed %+v", good)
	}
	for _, bad := range []string{"", "pypi", "::1", "[::1]:80", "127.0.0.1", "169.254.169.254:80", "10.250.1.0/24",
		"1.2.3.4:0", "1.2.3.4:99999", "10.0.0.1/8", "under_score.org", "1.2.3.4/33"} {
		_, err := e.parseAllow([]string{bad})
		var invalid *InvalidError
		if !errors.As(err, &invalid) {
			t.Errorf("parseAllow(%q) = %v; want an InvalidError", bad, err)
		}
	}
	if _, err := e.parseAllow(nil); err == nil {
		t.Error("an empty list passed")
	}
	if _, err := e.parseAllow(make([]string, MaxAllow+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a list too long: %v", err)
	}
}

// TestResolve: names resolve to the addresses a sandbox may reach; a name
// that does not exist is the caller's fault, a lookup that fails otherwise
// may be retried.
func TestResolve(t *testing.T) {
	t.Parallel()
	e := &Egress{Pool: netip.MustParsePrefix(DefaultPool), Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "mixed.example.com":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")}, nil
		case "loopback.example.com":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.250.0.9")}, nil
		case "gone.example.com":
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return nil, &net.DNSError{Err: "timeout", Name: host, IsTimeout: true}
	}}
	entries, err := e.parseAllow([]string{"mixed.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.resolve(t.Context(), entries)
	if err != nil || len(got["mixed.example.com"]) != 1 || got["mixed.example.com"][0] != netip.MustParseAddr("93.184.216.34") {
		t.Errorf("resolve = %v, %v; want only the public address", got, err)
	}
	// A name that does not exist and one of only unreachable addresses are
	// refused alike, and neither message says what the operator's DNS
	// answered (the tenant sees it as the sandbox's error).
	gone, _ := e.parseAllow([]string{"gone.example.com"})
	var invalid *InvalidError
	_, goneErr := e.resolve(t.Context(), gone)
	if !errors.As(goneErr, &invalid) {
		t.Errorf("a name that does not exist: %v; want an InvalidError", goneErr)
	}
	unreachable, _ := e.parseAllow([]string{"loopback.example.com"})
	_, err = e.resolve(t.Context(), unreachable)
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "no address a sandbox may reach") {
		t.Errorf("a name of only unreachable addresses: %v; want an InvalidError", err)
	}
	if err != nil && goneErr != nil && strings.ReplaceAll(goneErr.Error(), "gone", "loopback") != err.Error() {
		t.Errorf("a missing name and an unreachable one are told apart: %q, %q", goneErr, err)
	}
	if err != nil && (strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "10.250.0.9")) {
		t.Errorf("the refusal echoes what the name resolved to: %v", err)
	}
	slow, _ := e.parseAllow([]string{"slow.example.com"})
	if _, err := e.resolve(t.Context(), slow); !errors.Is(err, ErrTemporary) || strings.Contains(err.Error(), "timeout") {
		t.Errorf("a lookup that timed out: %v; want ErrTemporary, without the resolver's words", err)
	}
}

// TestRuleset: the table denies the pool and the denied ranges first,
// names private ranges only through entries inside them, and lets replies
// in only with the sandbox's mark.
func TestRuleset(t *testing.T) {
	t.Parallel()
	e := &Egress{Pool: netip.MustParsePrefix(DefaultPool)}
	entries, err := e.parseAllow([]string{"10.1.0.0/16", "1.2.3.4:443"})
	if err != nil {
		t.Fatal(err)
	}
	const id = "sbx_0123456789abcdef"
	link := Link{Host: netip.MustParseAddr("10.250.0.1"), Sandbox: netip.MustParseAddr("10.250.0.2")}
	rules, err := e.ruleset(id, link, entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"ip daddr 10.250.0.0/16 jump deny", "ip daddr { 10.1.0.0/16 }", "ip daddr { 10.0.0.0/8,", "ip daddr { 1.2.3.4 } meta l4proto { tcp, udp } th dport 443"}
	at := 0
	for _, want := range order {
		i := strings.Index(rules[at:], want)
		if i < 0 {
			t.Fatalf("ruleset lacks %q after offset %d:\n%s", want, at, rules)
		}
		at += i
	}
	if !strings.Contains(rules, "table inet "+TableName(id)) || !strings.Contains(rules, `iifname "`+VethName(id)+`" jump deny`) ||
		!strings.Contains(rules, "ct state established,related ct mark") {
		t.Errorf("ruleset:\n%s", rules)
	}
}

// TestSetupAndTeardown: on a host that runs the mode, Setup makes the
// sandbox's namespace, veth and table and pins its names; Teardown removes
// them all, and a second Teardown finds nothing to do.
func TestSetupAndTeardown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the allow-list mode needs root")
	}
	e := &Egress{Lookup: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}}
	e.Detect("")
	if e.Problem() != "" {
		t.Skipf("the allow-list mode is unavailable here: %s", e.Problem())
	}
	id := "sbx_test" + hostos.RandomSuffix()
	hosts := filepath.Join(t.TempDir(), "hosts")
	t.Cleanup(func() { _ = e.Teardown(context.Background(), id) })
	if err := e.Setup(t.Context(), id, []string{"example.com:443", "192.0.2.0/24"}, hosts); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(hosts); err != nil || !strings.Contains(string(b), "93.184.216.34\texample.com") {
		t.Errorf("hosts = %q, %v", b, err)
	}
	present := func() []string {
		var out []string
		if _, err := os.Stat(filepath.Join(NetnsDir, NetnsName(id))); err == nil {
			out = append(out, "netns")
		}
		if _, err := os.Lstat(filepath.Join("/sys/class/net", VethName(id))); err == nil {
			out = append(out, "veth")
		}
		if exec.Command("nft", "list", "table", "inet", TableName(id)).Run() == nil {
			out = append(out, "table")
		}
		return out
	}
	if got := present(); len(got) != 3 {
		t.Fatalf("after Setup: %v; want netns, veth and table", got)
	}
	for range 2 {
		if err := e.Teardown(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	if got := present(); len(got) != 0 {
		t.Errorf("after Teardown: %v left", got)
	}
}
