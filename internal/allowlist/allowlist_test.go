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
