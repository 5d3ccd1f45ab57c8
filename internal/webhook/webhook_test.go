package webhook_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/webhook"
)

// TestForbiddenClasses: each class of address a delivery must not reach is
// refused, in its IPv4, IPv6, mapped and NAT64 spellings; public addresses
// pass.
func TestForbiddenClasses(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"169.254.169.254": "metadata", "fd00:ec2::254": "metadata", "100.100.100.200": "metadata",
		"169.254.1.1": "link-local", "fe80::1": "link-local", "fe80::1%eth0": "link-local",
		"10.1.2.3": "private", "172.16.0.1": "private", "172.31.255.255": "private", "192.168.1.1": "private",
		"fc00::1": "private", "fd12:3456::1": "private", "100.64.0.1": "private", "::ffff:10.0.0.1": "private",
		"64:ff9b::a00:1": "private", // NAT64 of 10.0.0.1
		"0.0.0.0":        "unspecified", "::": "unspecified", "0.1.2.3": "unspecified",
		"224.0.0.1": "multicast", "239.255.255.250": "multicast", "ff02::1": "multicast",
		"255.255.255.255": "reserved", "240.0.0.1": "reserved", "192.0.2.1": "reserved", "2002:7f00:1::1": "loopback",
		"8.8.8.8": "", "1.1.1.1": "", "2606:4700:4700::1111": "", "172.32.0.1": "", "64:ff9b::808:808": "",
		// Every IPv6 form that carries an IPv4 address, by what it reaches.
		"::127.0.0.1": "loopback", "::10.0.0.1": "private", "::169.254.169.254": "metadata", "::0.0.0.0": "unspecified",
		"::8.8.8.8":          "reserved",                                 // IPv4-compatible: deprecated, whatever it embeds
		"::ffff:0:127.0.0.1": "loopback", "::ffff:0:8.8.8.8": "reserved", // IPv4-translated
		"64:ff9b::7f00:1": "loopback", "64:ff9b::a9fe:a9fe": "metadata", // NAT64
		"2002:a00:1::1": "private", "2002:a9fe:a9fe::": "metadata", "2002:808:808::1": "reserved", // 6to4
		"2001:0:4136:e378:8000:63bf:80ff:fffe": "loopback", // Teredo, its client 127.0.0.1 (inverted)
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7": "reserved", // Teredo, its client 8.8.8.8
		"fec0::1":                              "private", "192.88.99.1": "reserved",
	}
	for addr, want := range cases {
		if got := webhook.Forbidden(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Forbidden(%s) = %q; want %q", addr, got, want)
		}
	}
}

// staticResolver answers every lookup with ip, through a DNS server on
// loopback the test runs (so CheckURL's real resolution path is used).
func resolverFor(t *testing.T, ip netip.Addr) *net.Resolver {
	t.Helper()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		client, server := net.Pipe()
		go serveDNS(server, ip)
		return client, nil
	}}
}

// serveDNS answers DNS queries on conn (a stream, so each message has a
// two-byte length first) with one A or AAAA record of ip.
func serveDNS(conn net.Conn, ip netip.Addr) {
	defer func() { _ = conn.Close() }()
	for {
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return
		}
		q := make([]byte, int(l[0])<<8|int(l[1]))
		if _, err := io.ReadFull(conn, q); err != nil || len(q) < 12 {
			return
		}
		// Question section ends after the name, type and class.
		i := 12
		for i < len(q) && q[i] != 0 {
			i += int(q[i]) + 1
		}
		i += 5
		if i > len(q) {
			return
		}
		qtype := uint16(q[i-4])<<8 | uint16(q[i-3])
		resp := append([]byte{}, q[:i]...)
		resp[2], resp[3] = 0x81, 0x80 // response, recursion available
		resp[6], resp[7] = 0, 0       // no answers yet
		clear(resp[8:12])             // nor authority or additional records
		var rdata []byte
		switch {
		case qtype == 1 && ip.Is4():
			b := ip.As4()
			rdata = b[:]
		case qtype == 28 && ip.Is6():
			b := ip.As16()
			rdata = b[:]
		}
		if rdata != nil {
			resp[7] = 1
			resp = append(resp, 0xc0, 12, byte(qtype>>8), byte(qtype), 0, 1, 0, 0, 0, 60, 0, byte(len(rdata)))
			resp = append(resp, rdata...)
		}
		if _, err := conn.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...)); err != nil {
			return
		}
	}
}

// TestCheckURL: malformed URLs are INVALID_REQUEST; literal forbidden
// addresses and hosts that resolve to them are FORBIDDEN; public ones
// pass, and the operator's allowance lets any through.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	public := webhook.Guard{Resolver: resolverFor(t, netip.MustParseAddr("93.184.216.34"))}
	for _, raw := range []string{"", "ftp://example.com/", "example.com/hook", "http://", "https://user:pw@example.com/",
		"https://example.com/#frag", "mailto:a@example.com", "http://exa mple.com/", "https://example.com/" + strings.Repeat("x", 2100)} {
		if _, err := public.CheckURL(ctx, raw); domain.ErrorCode(err) != domain.CodeInvalidRequest {
			t.Errorf("CheckURL(%q) = %v; want INVALID_REQUEST", raw, err)
		}
	}
	for _, raw := range []string{"http://127.0.0.1:8080/", "http://[::1]/", "http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.5/", "http://[fe80::1%25eth0]/", "http://0.0.0.0/", "http://224.0.0.1/", "http://[::ffff:192.168.0.1]/",
		"http://localhost:9000/", "http://app.localhost/"} {
		if _, err := public.CheckURL(ctx, raw); domain.ErrorCode(err) != domain.CodeForbidden {
			t.Errorf("CheckURL(%q) = %v; want FORBIDDEN", raw, err)
		}
	}
	if _, err := public.CheckURL(ctx, "https://hooks.example.com/tether?x=1"); err != nil {
		t.Errorf("public host refused: %v", err)
	}
	// A name that resolves to a forbidden address is refused in the same
	// words whatever it resolved to: neither the address nor its kind is
	// told (the operator's DNS is not the tenant's to map).
	var first string
	for _, ip := range []string{"10.9.8.7", "169.254.169.254", "127.0.0.1", "fd00::1", "::127.0.0.1"} {
		g := webhook.Guard{Resolver: resolverFor(t, netip.MustParseAddr(ip))}
		_, err := g.CheckURL(ctx, "https://rebind.example.com/hook")
		if domain.ErrorCode(err) != domain.CodeForbidden || strings.Contains(err.Error(), ip) {
			t.Errorf("host resolving to %s: %v; want FORBIDDEN, without the address", ip, err)
			continue
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("host resolving to %s: %q; want the same words as for the others, %q", ip, err, first)
		}
	}
	allow := webhook.Guard{AllowPrivate: true}
	if _, err := allow.CheckURL(ctx, "http://127.0.0.1:8080/"); err != nil {
		t.Errorf("with AllowPrivate: %v", err)
	}
}

// TestDialGuard: the client refuses to connect to a forbidden address even
// when the URL was accepted (the guard checks the address dialled), and
// follows no redirect.
func TestDialGuard(t *testing.T) {
	t.Parallel()
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/target", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	guarded := webhook.Guard{}.Client(5 * time.Second)
	res, err := guarded.Post(srv.URL+"/", "application/json", strings.NewReader("{}"))
	if err == nil {
		_ = res.Body.Close()
	}
	if !errors.Is(err, webhook.ErrForbiddenAddress) {
		t.Fatalf("POST to loopback through the guard: %v; want ErrForbiddenAddress", err)
	}
	if hits != 0 {
		t.Fatalf("the receiver was reached %d times", hits)
	}
	// The other spellings of the receiver's loopback address are refused
	// by the guard itself, before any route is tried.
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, host := range []string{"[::127.0.0.1]", "[::ffff:127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::1]"} {
		res, err := guarded.Post("http://"+host+port+"/", "application/json", strings.NewReader("{}"))
		if err == nil {
			_ = res.Body.Close()
		}
		if !errors.Is(err, webhook.ErrForbiddenAddress) {
			t.Errorf("POST to %s through the guard: %v; want ErrForbiddenAddress", host, err)
		}
	}

	open := webhook.Guard{AllowPrivate: true}.Client(5 * time.Second)
	res, err = open.Post(srv.URL+"/redirect", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusFound || hits != 1 {
		t.Errorf("redirect: status %d after %d requests; want 302 after 1 (not followed)", res.StatusCode, hits)
	}
}

// TestSignature: a signature verifies with the secret and the exact body;
// a tampered body, another secret, a stale timestamp or a malformed header
// does not.
func TestSignature(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	if !strings.HasPrefix(secret, webhook.SecretPrefix) || secret == webhook.NewSecret() {
		t.Fatalf("secret %q", secret)
	}
	body := []byte(`{"id":"whd_x","events":[]}`)
	now := time.Unix(1_800_000_000, 0)
	h := webhook.Sign(secret, now, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if err := webhook.Verify(secret, h, body, 5*time.Minute, now.Add(time.Minute)); err != nil {
		t.Fatalf("valid signature refused: %v", err)
	}
	if err := webhook.Verify(secret, "v1=deadbeef, "+h, body, 0, now); err != nil {
		t.Errorf("one matching v1 among several refused: %v", err)
	}
	bad := map[string]func() error{
		"tampered body": func() error { return webhook.Verify(secret, h, []byte(`{"id":"whd_y","events":[]}`), 0, now) },
		"other secret":  func() error { return webhook.Verify(webhook.NewSecret(), h, body, 0, now) },
		"stale":         func() error { return webhook.Verify(secret, h, body, 5*time.Minute, now.Add(time.Hour)) },
		"no v1":         func() error { return webhook.Verify(secret, "t=1800000000", body, 0, now) },
		"no t":          func() error { return webhook.Verify(secret, strings.Split(h, ",")[1], body, 0, now) },
		"garbage":       func() error { return webhook.Verify(secret, "nonsense", body, 0, now) },
		"other t": func() error {
			return webhook.Verify(secret, "t=1800000001,"+strings.Split(h, ",")[1], body, 0, now)
		},
	}
	for name, f := range bad {
		if err := f(); !errors.Is(err, webhook.ErrSignature) {
			t.Errorf("%s: %v; want ErrSignature", name, err)
		}
	}
}

// TestFilter: empty lists match everything; each list narrows.
func TestFilter(t *testing.T) {
	t.Parallel()
	ended := domain.Event{To: domain.StateTerminated, Reason: domain.ReasonOwnerExpired}
	ready := domain.Event{To: domain.StateReady}
	f := webhook.Filter{}
	if !f.Match(ended) || !f.Match(ready) {
		t.Error("empty filter refused an event")
	}
	f = webhook.Filter{States: []domain.State{domain.StateTerminated}}
	if !f.Match(ended) || f.Match(ready) {
		t.Error("states filter")
	}
	f = webhook.Filter{Reasons: []domain.Reason{domain.ReasonOwnerExpired}}
	if !f.Match(ended) || f.Match(ready) {
		t.Error("reasons filter")
	}
	f = webhook.Filter{States: []domain.State{domain.StateReady}, Reasons: []domain.Reason{domain.ReasonOwnerExpired}}
	if f.Match(ended) || f.Match(ready) {
		t.Error("both lists must match")
	}
}
