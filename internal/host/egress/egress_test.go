package egress

import (
	"context"
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

// TestRuleset: the table redirects the sandbox's DNS and TCP to the
// proxy's ports, lets in only what was redirected from the sandbox's own
// address, and refuses everything else, forwarding included.
func TestRuleset(t *testing.T) {
	t.Parallel()
	const id = "sbx_0123456789abcdef"
	link := Link{Host: netip.MustParseAddr("10.250.0.1"), Sandbox: netip.MustParseAddr("10.250.0.2")}
	rules := ruleset(id, link, Ports{TCP: 4100, DNS: 4200})
	veth := `iifname "` + VethName(id) + `"`
	order := []string{
		"table inet " + TableName(id) + " {}\ndelete table inet " + TableName(id),
		veth + " meta nfproto ipv4 meta l4proto { tcp, udp } th dport 53 redirect to :4200",
		veth + " meta nfproto ipv4 meta l4proto tcp redirect to :4100",
		veth + " ip saddr 10.250.0.2 ct status dnat tcp dport { 4100, 4200 } accept",
		veth + " ip saddr 10.250.0.2 ct status dnat udp dport 4200 accept",
		veth + " jump deny",
		"chain sbx_forward",
		veth + " jump deny",
		`oifname "` + VethName(id) + `" jump deny`,
	}
	at := 0
	for _, want := range order {
		i := strings.Index(rules[at:], want)
		if i < 0 {
			t.Fatalf("ruleset lacks %q after offset %d:\n%s", want, at, rules)
		}
		at += i
	}
}

// TestSetupAndTeardown: on a host that runs the mode, Setup makes the
// sandbox's namespace, veth and table, and SandboxLink finds its link
// again; Teardown removes them all, and a second Teardown finds nothing
// to do.
func TestSetupAndTeardown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the allow-list mode needs root")
	}
	e := &Egress{}
	e.Detect("")
	if e.Problem() != "" {
		t.Skipf("the allow-list mode is unavailable here: %s", e.Problem())
	}
	id := "sbx_test" + hostos.RandomSuffix()
	t.Cleanup(func() { _ = e.Teardown(context.Background(), id) })
	link, err := e.Setup(t.Context(), id, Ports{TCP: 4100, DNS: 4200})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Pool.Contains(link.Host) || link.Sandbox != link.Host.Next() {
		t.Errorf("link %+v; want a /30 of %s", link, e.Pool)
	}
	if got, err := SandboxLink(id); err != nil || got != link {
		t.Errorf("SandboxLink = %+v, %v; want %+v", got, err, link)
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
