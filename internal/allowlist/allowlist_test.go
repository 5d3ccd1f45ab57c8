package allowlist

import (
	"net/netip"
	"testing"
)

func TestContaining(t *testing.T) {
	for _, c := range []struct {
		pfx    string
		ranges []netip.Prefix
		want   string // "": none
	}{
		{"127.0.0.1/32", Denied, "127.0.0.0/8"},
		{"169.254.169.254/32", Denied, "169.254.0.0/16"},
		{"224.0.0.0/3", Denied, "224.0.0.0/3"},
		{"0.0.0.0/0", Denied, ""}, // holds denied ranges, is not inside one
		{"8.8.8.8/32", Denied, ""},
		{"10.1.0.0/16", Private, "10.0.0.0/8"},
		{"100.64.0.1/32", Private, "100.64.0.0/10"},
		{"172.32.0.1/32", Private, ""},
		{"192.168.0.0/15", Private, ""},
	} {
		got, ok := Containing(netip.MustParsePrefix(c.pfx), c.ranges)
		if (c.want == "") == ok || ok && got.String() != c.want {
			t.Errorf("Containing(%s) = %s, %v; want %q", c.pfx, got, ok, c.want)
		}
		if Within(netip.MustParsePrefix(c.pfx), c.ranges) != ok {
			t.Errorf("Within(%s) disagrees with Containing", c.pfx)
		}
	}
}

// TestClassify: every spelling of an address is judged by where it
// leads.
func TestClassify(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]Class{
		"8.8.8.8":                Public,
		"198.18.0.1":             Public,
		"2606:4700::1111":        Public,
		"64:ff9b::8.8.8.8":       Public, // NAT64 of a public address
		"10.1.2.3":               PrivateNet,
		"100.64.0.1":             PrivateNet,
		"172.31.255.255":         PrivateNet,
		"192.168.1.1":            PrivateNet,
		"fd12::1":                PrivateNet,
		"::ffff:10.1.2.3":        PrivateNet,
		"64:ff9b::10.1.2.3":      PrivateNet,
		"127.0.0.1":              Loopback,
		"127.255.0.9":            Loopback,
		"::1":                    Loopback,
		"::ffff:127.0.0.1":       Loopback,
		"64:ff9b::127.0.0.1":     Loopback,
		"169.254.10.1":           LinkLocal,
		"fe80::1":                LinkLocal,
		"fe80::1%eth0":           LinkLocal,
		"169.254.169.254":        Never,
		"::ffff:169.254.169.254": Never,
		"fd00:ec2::254":          Never,
		"100.100.100.200":        Never,
		"0.0.0.0":                Never,
		"::":                     Never,
		"::127.0.0.1":            Never, // IPv4-compatible
		"::ffff:0:127.0.0.1":     Never, // IPv4-translated
		"2002:7f00:1::":          Never, // 6to4 of 127.0.0.1
		"2001:0:4136:e378::":     Never, // Teredo
		"224.0.0.1":              Never,
		"255.255.255.255":        Never,
		"ff02::1":                Never,
		"2001:db8::1":            Never,
	} {
		if got := Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %v; want %v", addr, got, want)
		}
	}
	for pfx, want := range map[string]Class{
		"0.0.0.0/0": Public, "::/0": Public, "10.0.0.0/8": PrivateNet, "10.1.0.0/16": PrivateNet,
		"8.0.0.0/6": Public, "127.0.0.0/8": Loopback, "fe80::/64": LinkLocal, "224.0.0.0/4": Never,
	} {
		if got := PrefixClass(netip.MustParsePrefix(pfx)); got != want {
			t.Errorf("PrefixClass(%s) = %v; want %v", pfx, got, want)
		}
	}
}
