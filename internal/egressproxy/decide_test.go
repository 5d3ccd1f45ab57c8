package egressproxy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// newTestProxy is a proxy (not started) resolving names from hosts.
func newTestProxy(t *testing.T, hosts map[string][]netip.Addr, allowPrivate bool) *Proxy {
	t.Helper()
	p, err := New(Config{Policy: &MemoryPolicy{}, Lookup: StaticLookup(hosts), AllowPrivate: allowPrivate, ListenAddr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p.Deny(netip.MustParsePrefix("10.250.0.0/16"))
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

func mustRules(t *testing.T, p *Proxy, allow ...string) Rules {
	t.Helper()
	r, err := p.Parser().Parse(allow)
	if err != nil {
		t.Fatal(err)
	}
	return Rules{Allow: r}
}

// hostIPv4 is an IPv4 address of one of the host's interfaces, not
// loopback.
func hostIPv4(t *testing.T) netip.Addr {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && ipn.IP.To4() != nil && !x.IsLoopback() {
				return x
			}
		}
	}
	t.Skip("the host has no IPv4 address but loopback")
	return netip.Addr{}
}

// TestDecide: the verdict on connections by name and by address, the
// dialled address checked against the name's, and the addresses no rule
// reaches.
func TestDecide(t *testing.T) {
	t.Parallel()
	pub, other, priv := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.20"), netip.MustParseAddr("10.1.2.3")
	hosts := map[string][]netip.Addr{
		"pypi.org": {pub}, "files.pythonhosted.org": {other}, "db.internal": {priv},
		"loop.example": {netip.MustParseAddr("127.0.0.1")}, "v6.example": {netip.MustParseAddr("2606:4700::1")},
	}
	p := newTestProxy(t, hosts, false)
	sb := &sandboxState{Sandbox: Sandbox{ID: "sbx_a"}}
	at := netip.AddrPortFrom
	self := hostIPv4(t)
	cases := []struct {
		what  string
		rules []string
		name  string
		dst   netip.AddrPort
		rule  string // "" for refused
		why   string // a word of the refusal
	}{
		{"a name at its address", []string{"pypi.org"}, "pypi.org", at(pub, 443), "pypi.org", ""},
		{"a name on its port", []string{"pypi.org:443"}, "pypi.org", at(pub, 443), "pypi.org:443", ""},
		{"a name on another port", []string{"pypi.org:443"}, "pypi.org", at(pub, 22), "", "not allowed"},
		{"a wildcard below", []string{"*.pythonhosted.org"}, "files.pythonhosted.org", at(other, 443), "*.pythonhosted.org", ""},
		{"a wildcard's apex", []string{"*.pythonhosted.org"}, "pythonhosted.org", at(other, 443), "", "not allowed"},
		{"a name not listed", []string{"pypi.org"}, "evil.example", at(pub, 443), "", "not allowed"},
		{"a name at another's address (rebinding, forged answer)", []string{"pypi.org"}, "pypi.org", at(other, 443), "", "not an address of pypi.org"},
		{"a name at another's address an address rule allows", []string{"pypi.org", "198.18.0.0/24"}, "pypi.org", at(other, 443), "198.18.0.0/24", ""},
		{"another name at a listed name's address (fronting)", []string{"pypi.org"}, "evil.example", at(pub, 443), "", "not allowed"},
		{"an address of a listed name, no name said", []string{"pypi.org:22"}, "", at(pub, 22), "pypi.org:22", ""},
		{"an address of a listed name, another port", []string{"pypi.org:22"}, "", at(pub, 80), "", "not allowed"},
		{"an address rule", []string{"198.18.0.0/24:80"}, "", at(other, 80), "198.18.0.0/24:80", ""},
		{"a Host naming the dialled address", []string{"198.18.0.0/24"}, "198.18.0.20", at(other, 80), "198.18.0.0/24", ""},
		{"a Host naming another address", []string{"198.18.0.0/24"}, "198.18.0.10", at(other, 80), "", "names 198.18.0.10"},
		{"a private name without a private rule", []string{"db.internal"}, "db.internal", at(priv, 5432), "", "no address the sandbox may reach"},
		{"a private name with a private rule", []string{"db.internal", "10.0.0.0/8"}, "db.internal", at(priv, 5432), "db.internal", ""},
		{"a private address, everything allowed", []string{"0.0.0.0/0"}, "", at(priv, 5432), "", "not an address sandboxes may reach"},
		{"a loopback name", []string{"loop.example", "10.0.0.0/8"}, "loop.example", at(netip.MustParseAddr("127.0.0.1"), 80), "", "no address"},
		{"a missing name", []string{"nope.example"}, "nope.example", at(pub, 80), "", "no address the sandbox may reach"},
		{"the metadata address", []string{"0.0.0.0/0"}, "", at(netip.MustParseAddr("169.254.169.254"), 80), "", "not an address"},
		{"the pool", []string{"10.0.0.0/8"}, "", at(netip.MustParseAddr("10.250.0.2"), 80), "", "not an address"},
		{"the host itself", []string{"0.0.0.0/0", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}, "", at(self, 22), "", "not an address"},
		{"an IPv4-mapped spelling", []string{"198.18.0.0/24"}, "", at(netip.MustParseAddr("::ffff:198.18.0.20"), 80), "", "not allowed"},
	}
	for _, c := range cases {
		v := p.decide(t.Context(), sb, mustRules(t, p, c.rules...), c.name, c.dst)
		switch {
		case c.rule != "" && (!v.allowed || v.rule != c.rule || v.upstream != c.dst):
			t.Errorf("%s: %+v; want allowed by %q to %s", c.what, v, c.rule, c.dst)
		case c.rule == "" && (v.allowed || !strings.Contains(v.reason, c.why)):
			t.Errorf("%s: %+v; want refused saying %q", c.what, v, c.why)
		}
	}
	// What the proxy's DNS told the sandbox counts as the name's address,
	// for a while, even once the name resolves elsewhere.
	sb.remember("pypi.org", []netip.Addr{other})
	if v := p.decide(t.Context(), sb, mustRules(t, p, "pypi.org"), "pypi.org", at(other, 443)); !v.allowed {
		t.Errorf("a name at the address the DNS answered: %+v", v)
	}
	if v := p.decide(t.Context(), sb, mustRules(t, p, "pypi.org:443"), "", at(other, 443)); !v.allowed || v.name != "pypi.org" {
		t.Errorf("an address the DNS answered for a listed name: %+v", v)
	}
	// With private addresses allowed, loopback and the host itself are
	// reached; the pool and metadata never.
	open := newTestProxy(t, hosts, true)
	for dst, want := range map[netip.AddrPort]bool{at(netip.MustParseAddr("127.0.0.1"), 80): true, at(self, 22): true,
		at(priv, 5432): true, at(netip.MustParseAddr("10.250.0.2"), 80): false, at(netip.MustParseAddr("169.254.169.254"), 80): false} {
		if v := open.decide(t.Context(), sb, mustRules(t, open, "0.0.0.0/0"), "", dst); v.allowed != want {
			t.Errorf("with private addresses allowed, %s: %+v; want allowed %v", dst, v, want)
		}
	}
}

// TestDNSAnswers: the proxy's DNS answers A questions for allowed names
// with the addresses a sandbox may reach, AAAA with none, NXDOMAIN for
// other names and for allowed ones without a reachable address alike, and
// REFUSED to a sandbox without rules.
func TestDNSAnswers(t *testing.T) {
	t.Parallel()
	hosts := map[string][]netip.Addr{
		"pypi.org":               {netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("2606:4700::1")},
		"files.pythonhosted.org": {netip.MustParseAddr("198.18.0.11")},
		"db.internal":            {netip.MustParseAddr("10.1.2.3")},
		"evil.example":           {netip.MustParseAddr("198.18.0.66")},
	}
	p := newTestProxy(t, hosts, false)
	pol := p.cfg.Policy.(*MemoryPolicy)
	pol.Set("sbx_a", mustRules(t, p, "pypi.org:443", "*.pythonhosted.org", "db.internal"))
	sb := &sandboxState{Sandbox: Sandbox{ID: "sbx_a"}}
	ask := func(sb *sandboxState, name string, typ dnsmessage.Type) (dnsmessage.RCode, []string) {
		t.Helper()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		var m dnsmessage.Message
		if err := m.Unpack(p.answer(sb, q)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.ID != 7 || !m.Response || len(m.Questions) != 1 {
			t.Fatalf("%s: answer %+v", name, m.Header)
		}
		var out []string
		for _, a := range m.Answers {
			if r, ok := a.Body.(*dnsmessage.AResource); ok {
				out = append(out, netip.AddrFrom4(r.A).String())
			}
		}
		return m.RCode, out
	}
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		addrs string
	}{
		{"pypi.org.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "198.18.0.10"},
		{"PyPI.org.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "198.18.0.10"},
		{"pypi.org.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, ""},
		{"pypi.org.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, ""},
		{"files.pythonhosted.org.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "198.18.0.11"},
		{"pythonhosted.org.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"evil.example.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"db.internal.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"nope.pythonhosted.org.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"localhost.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
	} {
		rcode, addrs := ask(sb, c.name, c.typ)
		if rcode != c.rcode || strings.Join(addrs, ",") != c.addrs {
			t.Errorf("%s %v: %v %v; want %v %q", c.name, c.typ, rcode, addrs, c.rcode, c.addrs)
		}
	}
	if rcode, _ := ask(&sandboxState{Sandbox: Sandbox{ID: "sbx_none"}}, "pypi.org.", dnsmessage.TypeA); rcode != dnsmessage.RCodeRefused {
		t.Errorf("a sandbox without rules: %v; want REFUSED", rcode)
	}
	if resp := p.answer(sb, []byte{1, 2, 3}); resp != nil {
		t.Errorf("an answer to garbage: %x", resp)
	}
}
