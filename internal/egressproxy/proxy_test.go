package egressproxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// TestProxyByName: an allow-list sandbox's HTTPS reaches the names its
// rules allow, passed through untouched (the client verifies the server's
// own certificate), and no other name; a wildcard reaches the names below
// its domain and not the domain; a rule changed through the Policy is in
// force at the next connection; and every connection and DNS question is
// recorded with its verdict, its rule and its bytes.
func TestProxyByName(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mirrorCA, err := NewCA("mirror")
	if err != nil {
		t.Fatal(err)
	}
	roots := pool(mirrorCA)
	u1, u2 := newUpstream(t), newUpstream(t)
	u1.serve(t, 443, mirrorCA, echoHost("u1"))
	u1.serve(t, 80, nil, echoHost("u1"))
	u2.serve(t, 443, mirrorCA, echoHost("u2"))
	for _, n := range []string{"pypi.org", "files.pythonhosted.org", "deep.cdn.pythonhosted.org", "pythonhosted.org"} {
		w.hosts.set(n, u1.addr)
	}
	w.hosts.set("evil.example", u2.addr)
	s := w.sandbox(t, "pypi.org:443", "*.pythonhosted.org")

	for url, want := range map[string]string{
		"https://pypi.org/":                  "u1 pypi.org",
		"https://files.pythonhosted.org/":    "u1 files.pythonhosted.org",
		"https://deep.cdn.pythonhosted.org/": "u1 deep.cdn.pythonhosted.org",
		"https://pythonhosted.org/":          "",
		"https://evil.example/":              "",
		"http://pypi.org/":                   "",
	} {
		status, body, err := s.get(roots, url)
		switch {
		case want != "" && (err != nil || status != 200 || body != want):
			t.Errorf("GET %s = %d %q, %v; want %q", url, status, body, err, want)
		case want == "" && err == nil && status == 200:
			t.Errorf("GET %s = %d %q; want it refused", url, status, body)
		}
	}
	// The rules change: the next connection is decided by the new ones.
	s.setRules(t, "evil.example:443")
	if status, body, err := s.get(roots, "https://evil.example/"); err != nil || status != 200 || body != "u2 evil.example" {
		t.Errorf("after the rule was added: GET https://evil.example/ = %d %q, %v", status, body, err)
	}
	if _, _, err := s.get(roots, "https://pypi.org/"); err == nil {
		t.Error("after its rule was removed, pypi.org is still reached")
	}

	recs := w.records.wait(s.id, 1, func(c ConnRecord) bool { return c.Proto == ProtoTLS && c.Host == "pypi.org" && c.Allowed })
	if len(recs) == 0 {
		t.Fatal("no record of the connection to pypi.org")
	}
	if r := recs[0]; r.Rule != "pypi.org:443" || r.Upstream != netip.AddrPortFrom(u1.addr, 443) || r.BytesOut < 100 || r.BytesIn < 100 || !r.End.After(r.Start) {
		t.Errorf("record of pypi.org: %+v", r)
	}
	refused := w.records.wait(s.id, 1, func(c ConnRecord) bool { return c.Proto == ProtoDNS && c.Host == "pythonhosted.org" })
	if len(refused) == 0 || refused[0].Allowed || refused[0].Reason == "" {
		t.Errorf("records of the DNS question for pythonhosted.org: %+v", refused)
	}
	http80 := w.records.wait(s.id, 1, func(c ConnRecord) bool { return c.Proto == ProtoHTTP && c.Host == "pypi.org" })
	if len(http80) == 0 || http80[0].Allowed || !strings.Contains(http80[0].Reason, "pypi.org:80 is not allowed") {
		t.Errorf("records of http://pypi.org/: %+v", http80)
	}
	after := w.records.wait(s.id, 1, func(c ConnRecord) bool { return c.Proto == ProtoDNS && c.Host == "pypi.org" && !c.Allowed })
	if len(after) == 0 {
		t.Error("no record of pypi.org refused once its rule was removed")
	}
}

// TestProxyTricks: a sandbox cannot reach an address by naming an allowed
// host: not with a forged answer (DNS rebinding inside the sandbox, a
// Host or SNI that is not the dialled address's), not with a Host header
// for another name, not with a second request for another host on a kept
// connection; and a name that rebinds to loopback or a private address
// resolves to nothing.
func TestProxyTricks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mirrorCA, _ := NewCA("mirror")
	roots := pool(mirrorCA)
	u1, u2 := newUpstream(t), newUpstream(t)
	u1.serve(t, 443, mirrorCA, echoHost("u1"))
	u1.serve(t, 80, nil, echoHost("u1"))
	u2.serve(t, 443, mirrorCA, echoHost("u2"))
	u2.serve(t, 80, nil, echoHost("u2"))
	w.hosts.set("pypi.org", u1.addr)
	w.hosts.set("evil.example", u2.addr)
	s := w.sandbox(t, "pypi.org:443", "pypi.org:80")
	ctx := t.Context()

	// TLS for pypi.org dialled at evil's address.
	c, err := s.dial(ctx, netip.AddrPortFrom(u2.addr, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "pypi.org", RootCAs: roots})
	if err := tc.HandshakeContext(ctx); err == nil {
		t.Error("a ClientHello for pypi.org at evil's address was let through")
	}
	_ = tc.Close()
	// A client that says nothing at first (as for a protocol where the
	// server speaks first) is decided by address, pypi.org's; the
	// ClientHello for evil.example it sends later is checked all the same.
	c, err = s.dial(ctx, netip.AddrPortFrom(u1.addr, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * firstBytesWait)
	late := tls.Client(c, &tls.Config{ServerName: "evil.example", RootCAs: roots})
	if err := late.HandshakeContext(ctx); err == nil {
		t.Error("a late ClientHello for evil.example at pypi.org's address was let through")
	}
	_ = late.Close()
	// HTTP with Host pypi.org at evil's address, and Host evil at pypi's.
	for _, tc := range []struct{ url, host string }{
		{"http://" + u2.addr.String() + "/", "pypi.org"},
		{"http://" + u1.addr.String() + "/", "evil.example"},
		{"http://" + u1.addr.String() + "/", "pypi.org:8080"},
	} {
		status, body, err := s.get(nil, tc.url, "Host", tc.host)
		if err != nil || status < 400 || !strings.HasPrefix(body, "tether egress: ") {
			t.Errorf("GET %s with Host %s = %d %q, %v; want the proxy's refusal", tc.url, tc.host, status, body, err)
		}
	}
	// Two requests on one connection, the second for another host.
	c, err = s.dial(ctx, netip.AddrPortFrom(u1.addr, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	br := bufio.NewReader(c)
	for i, want := range []int{200, http.StatusMisdirectedRequest} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want || (i == 1 && strings.Contains(string(body), "u2")) {
			t.Errorf("response %d: %d %q; want %d", i, resp.StatusCode, body, want)
		}
	}
	_ = c.Close()
	// The name rebinds to loopback, then to a private address: the
	// sandbox's DNS has no answer, and a connection by name is refused.
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254"} {
		w.hosts.set("pypi.org", netip.MustParseAddr(a))
		time.Sleep(5 * time.Millisecond) // past the proxy's ResolveTTL
		if addrs, err := s.resolver().LookupNetIP(ctx, "ip4", "pypi.org"); err == nil {
			t.Errorf("pypi.org rebound to %s resolves in the sandbox to %v", a, addrs)
		}
		if status, body, err := s.get(roots, "https://pypi.org/"); err == nil {
			t.Errorf("pypi.org rebound to %s: GET = %d %q", a, status, body)
		}
	}
	recs := w.records.wait(s.id, 1, func(c ConnRecord) bool { return strings.Contains(c.Reason, "not an address of pypi.org") })
	if len(recs) == 0 {
		t.Error("no record says why the ClientHello at evil's address was refused")
	}
}

// TestProxyCredential: for a host with a credential the proxy terminates
// the sandbox's TLS with the sandbox's CA, adds the header (replacing the
// sandbox's placeholder) over a new TLS connection it verifies, and for
// every other host, and every other sandbox, passes TLS through untouched. A request for another
// host on such a connection is refused; a credential taken away is not
// added to the next request, even on a kept connection; the records name
// the header, never the secret.
func TestProxyCredential(t *testing.T) {
	t.Parallel()
	mirrorCA, _ := NewCA("mirror")
	w := newWorld(t, func(c *Config) { c.RootCAs = pool(mirrorCA) })
	u1 := newUpstream(t)
	var mu sync.Mutex
	seen := map[string][]string{}
	u1.serve(t, 443, mirrorCA, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Host] = append(seen[r.Host], r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = fmt.Fprintf(rw, "hello %s", r.Host)
	}))
	for _, n := range []string{"api.example", "plain.example", "git.example"} {
		w.hosts.set(n, u1.addr)
	}
	const secret = "s3cr3t-VALUE-0123"
	s := w.sandbox(t, "api.example:443", "plain.example:443", "git.example:443")
	rules, _ := w.policy.Lookup(t.Context(), s.id)
	rules.Credentials = []Credential{
		{Host: "api.example", Header: "Authorization", Format: "Bearer {secret}", Secret: secret},
		{Host: "git.example", Username: "x-access-token", Secret: secret},
	}
	w.policy.Set(s.id, rules)
	sandboxRoots, mirrorRoots := pool(s.ca), pool(mirrorCA)

	if status, body, err := s.get(sandboxRoots, "https://api.example/", "Authorization", "Bearer placeholder"); err != nil || status != 200 || body != "hello api.example" {
		t.Fatalf("GET https://api.example/ trusting the sandbox's CA = %d %q, %v", status, body, err)
	}
	if _, _, err := s.get(mirrorRoots, "https://api.example/"); err == nil {
		t.Error("api.example's TLS was not the proxy's (a client trusting only the server's CA got through)")
	}
	if status, _, err := s.get(mirrorRoots, "https://plain.example/"); err != nil || status != 200 {
		t.Errorf("plain.example through untouched: %d, %v", status, err)
	}
	if _, _, err := s.get(sandboxRoots, "https://plain.example/"); err == nil {
		t.Error("plain.example's TLS was terminated by the proxy")
	}
	if status, _, err := s.get(sandboxRoots, "https://git.example/"); err != nil || status != 200 {
		t.Errorf("git.example: %d, %v", status, err)
	}
	status, body, err := s.get(sandboxRoots, "https://api.example/", "Host", "plain.example")
	if err != nil || status != http.StatusMisdirectedRequest {
		t.Errorf("another Host on api.example's connection = %d %q, %v; want 421", status, body, err)
	}
	// Another sandbox allowed the same host gets no credential: its TLS
	// passes through, and nothing is added.
	other := w.sandbox(t, "api.example:443")
	if status, _, err := other.get(mirrorRoots, "https://api.example/"); err != nil || status != 200 {
		t.Errorf("another sandbox's GET https://api.example/ = %d, %v; want it passed through", status, err)
	}
	mu.Lock()
	got := fmt.Sprint(seen)
	mu.Unlock()
	want := fmt.Sprintf("map[api.example:[Bearer %s ] git.example:[Basic eC1hY2Nlc3MtdG9rZW46czNjcjN0LVZBTFVFLTAxMjM=] plain.example:[]]", secret)
	if got != want {
		t.Errorf("the server saw %s; want %s", got, want)
	}

	// Taken away while a connection is kept: the next request on it is
	// refused.
	client := s.client(sandboxRoots)
	client.Transport.(*http.Transport).DisableKeepAlives = false
	first, err := client.Get("https://api.example/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, first.Body)
	_ = first.Body.Close()
	rules.Credentials = nil
	w.policy.Set(s.id, rules)
	second, err := client.Get("https://api.example/")
	if err != nil || second.StatusCode != http.StatusForbidden {
		t.Errorf("a request once the credential was taken away: %v, %v; want 403", second, err)
	}
	if second != nil {
		_ = second.Body.Close()
	}
	for _, r := range w.records.wait(s.id, 3, func(c ConnRecord) bool { return c.Proto == ProtoTLS }) {
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("a record holds the secret: %+v", r)
		}
		if r.Host == "api.example" && r.Allowed && r.Credential != "Authorization" {
			t.Errorf("record of api.example: %+v; want the credential's header named", r)
		}
	}
}

// TestProxyCredentialUpstreamUnverified: the proxy refuses to send a
// credential to a server whose certificate it cannot verify.
func TestProxyCredentialUpstreamUnverified(t *testing.T) {
	t.Parallel()
	w := newWorld(t) // the host's roots: the test server's CA is not among them
	mirrorCA, _ := NewCA("mirror")
	u1 := newUpstream(t)
	var hits sync.WaitGroup
	u1.serve(t, 443, mirrorCA, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	w.hosts.set("api.example", u1.addr)
	s := w.sandbox(t, "api.example:443")
	rules, _ := w.policy.Lookup(t.Context(), s.id)
	rules.Credentials = []Credential{{Host: "api.example", Header: "X-Key", Secret: "k"}}
	w.policy.Set(s.id, rules)
	status, body, err := s.get(pool(s.ca), "https://api.example/")
	if err != nil || status != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("GET = %d %q, %v; want 502 for the server's certificate", status, body, err)
	}
}

// TestProxyAbuse: bad requests, slow clients, huge headers and too many
// connections are cut off within their limits, and never keep the proxy
// from serving the next request at once.
func TestProxyAbuse(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(c *Config) { c.HeaderTimeout = time.Second; c.MaxConnsPerSandbox = 20 })
	u1 := newUpstream(t)
	u1.serve(t, 80, nil, echoHost("u1"))
	w.hosts.set("pypi.org", u1.addr)
	s := w.sandbox(t, "pypi.org:80")
	ctx := t.Context()
	target := netip.AddrPortFrom(u1.addr, 80).String()
	ok := func(what string) {
		t.Helper()
		start := time.Now()
		status, body, err := s.get(nil, "http://pypi.org/")
		if err != nil || status != 200 || body != "u1 pypi.org" || time.Since(start) > 2*time.Second {
			t.Errorf("after %s: GET = %d %q, %v in %v", what, status, body, err, time.Since(start))
		}
	}
	// ends is how a connection fed payload ends: the proxy's answer, if
	// any, and how long it took to close it.
	ends := func(payload string) (string, time.Duration) {
		t.Helper()
		c, err := s.dial(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		start := time.Now()
		_, _ = io.WriteString(c, payload)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		return string(b), time.Since(start)
	}
	for _, tc := range []struct {
		what, payload, answer string
		within                time.Duration
	}{
		{"a slow request header", "GET / HTTP/1.1\r\nHost: pypi.org\r\nX-Slow: ", "", 3 * time.Second},
		{"a slow ClientHello", "\x16\x03\x01\x02\x00\x01", "", 3 * time.Second},
		{"a damaged ClientHello", "\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", "", time.Second},
		{"a huge header", "GET / HTTP/1.1\r\nHost: pypi.org\r\nX-Big: " + strings.Repeat("a", 200<<10) + "\r\n\r\n", "431", 3 * time.Second},
		{"a request without a host", "GET / HTTP/1.1\r\n\r\n", "400", time.Second},
		{"a bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "400", time.Second},
		{"CONNECT", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", "405", time.Second},
		{"an absolute URL for another host", "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", "403", time.Second},
		{"a request line of garbage", "GET /\x00\x01 HTTP/1.1\r\nHost: pypi.org\r\n\r\n", "400", time.Second},
	} {
		answer, took := ends(tc.payload)
		if !strings.Contains(answer, tc.answer) || took > tc.within {
			t.Errorf("%s: answered %.40q, closed after %v; want %q within %v", tc.what, answer, took, tc.answer, tc.within)
		}
		ok(tc.what)
	}
	// Too many connections at once: those past the limit are reset at
	// once, the others wait; once they close, new ones are served.
	var held []net.Conn
	refused := 0
	for range 25 {
		c, err := s.dial(ctx, target)
		if err != nil {
			refused++ // reset before the dial returned
			continue
		}
		held = append(held, c)
	}
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) && !isTimeout(err) {
			refused++
		}
	}
	if refused < 5 {
		t.Errorf("%d of 25 connections refused over a limit of 20", refused)
	}
	for _, c := range held {
		_ = c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	ok("too many connections")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProxySpoofedSource: a sandbox cannot pass for another. Nothing in a
// sandbox can change its address (it has no capabilities in its
// namespace); even root in the namespace, sending from another sandbox's
// address, gets nothing: a TCP connection cannot complete (the replies go
// to the other sandbox), and the host drops what it sends from an
// address not its own before the proxy sees it (a DNS question, which
// needs no reply to be acted on, is never answered as the other's).
func TestProxySpoofedSource(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	u1 := newUpstream(t)
	u1.serve(t, 80, nil, echoHost("u1"))
	w.hosts.set("pypi.org", u1.addr)
	a := w.sandbox(t, "nothing.example:80")
	b := w.sandbox(t, "pypi.org:80")
	if status, body, err := b.get(nil, "http://pypi.org/"); err != nil || status != 200 {
		t.Fatalf("b's own GET = %d %q, %v", status, body, err)
	}
	ipBatch(t, "tether-"+a.id, fmt.Sprintf("addr add %s/32 dev eth0\n", b.link.Sandbox))
	var c net.Conn
	err := a.inside(func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(b.link.Sandbox, 0))}
		c, err = d.Dial("tcp4", netip.AddrPortFrom(u1.addr, 80).String())
		return err
	})
	if err == nil {
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		body, _ := io.ReadAll(c)
		_ = c.Close()
		if strings.Contains(string(body), "u1") {
			t.Errorf("a, passing for b, reached pypi.org: %q", body)
		}
	}
	// A DNS question from b's address (UDP needs no answer back to be
	// acted on): the host drops it, so the proxy never answers it as b's.
	err = a.inside(func() error {
		d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.link.Sandbox, 0))}
		c, err := d.Dial("udp4", netip.AddrPortFrom(a.link.Host, 53).String())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		q := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, RecursionDesired: true})
		_ = q.StartQuestions()
		_ = q.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("spoofed.example."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		msg, _ := q.Finish()
		for range 3 {
			_, _ = c.Write(msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	spoofed := func(c ConnRecord) bool { return c.Host == "spoofed.example" }
	if got := w.records.wait(b.id, 1, spoofed); len(got) > 0 {
		t.Errorf("the proxy answered a's question as b's: %+v", got)
	}
	notDNS := func(c ConnRecord) bool { return c.Proto != ProtoDNS }
	if got := w.records.wait(b.id, 2, notDNS); len(got) != 1 {
		t.Errorf("records of b's connections: %+v; want its own alone", got)
	}
}
