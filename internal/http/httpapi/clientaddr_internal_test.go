package httpapi

import (
	"net/http"
	"net/netip"
	"testing"
)

// TestClientAddr: X-Forwarded-For is read only from a trusted peer, from
// the right, up to the first hop that is not trusted; IPv6 clients count
// by their /64.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		trusted    []netip.Prefix
		want       string
	}{
		{"no proxy trusted", "192.0.2.1:5555", []string{"203.0.113.9"}, nil, "192.0.2.1"},
		{"an untrusted peer's header", "192.0.2.1:5555", []string{"203.0.113.9"}, trusted, "192.0.2.1"},
		{"a trusted proxy", "10.1.2.3:5555", []string{"203.0.113.9"}, trusted, "203.0.113.9"},
		{"the right-most untrusted hop", "10.1.2.3:5555", []string{"198.51.100.1, 203.0.113.9, 10.9.9.9"}, trusted, "203.0.113.9"},
		{"headers joined", "10.1.2.3:5555", []string{"198.51.100.1", "203.0.113.9", "10.9.9.9"}, trusted, "203.0.113.9"},
		{"a forged left part", "10.1.2.3:5555", []string{"10.5.5.5, 203.0.113.9"}, trusted, "203.0.113.9"},
		{"every hop trusted", "10.1.2.3:5555", []string{"10.7.7.7, 10.8.8.8"}, trusted, "10.7.7.7"},
		{"no header", "10.1.2.3:5555", nil, trusted, "10.1.2.3"},
		{"garbage stops the walk", "10.1.2.3:5555", []string{"203.0.113.9, nonsense, 10.8.8.8"}, trusted, "10.8.8.8"},
		{"ports and brackets", "10.1.2.3:5555", []string{"[2001:db8:1:2::7]:4711, 10.8.8.8:80"}, trusted, "2001:db8:1:2::/64"},
		{"IPv4-mapped", "[::ffff:10.1.2.3]:5555", []string{"::ffff:203.0.113.9"}, trusted, "203.0.113.9"},
		{"IPv6 by /64", "[2001:db8:1:2:aaaa::1]:5555", nil, nil, "2001:db8:1:2::/64"},
		{"a trusted IPv6 proxy", "[fd00::1]:5555", []string{"2001:db8:9:9::5"}, trusted, "2001:db8:9:9::/64"},
		{"not an address", "pipe", []string{"203.0.113.9"}, trusted, "pipe"},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientAddr(r, tc.trusted); got != tc.want {
			t.Errorf("%s: clientAddr = %q; want %q", tc.name, got, tc.want)
		}
	}
}
