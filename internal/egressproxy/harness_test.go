package egressproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/internal/host/hostos"
)

// The tests' world: a proxy, "sandboxes" that are network namespaces
// linked and redirected to it exactly as the local provider's are
// (internal/host/egress), whose connections the tests make from Go on a
// thread inside them, and upstream servers in network namespaces of their
// own at "public" addresses (198.18.0.0/15, benchmarking addresses, which
// sandboxes may reach). Nothing leaves the machine.

// world is a started proxy with its policy and records.
type world struct {
	px      *Proxy
	policy  *MemoryPolicy
	records *records
	hosts   *hostsMap
	eg      *egress.Egress
}

// records keeps a proxy's records.
type records struct {
	mu   sync.Mutex
	list []ConnRecord
}

func (r *records) Record(c ConnRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, c)
}

// wait returns the records of sandbox id, once at least n that match
// keep are there (or 5 s have passed).
func (r *records) wait(id string, n int, keep func(ConnRecord) bool) []ConnRecord {
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		var out []ConnRecord
		for _, c := range r.list {
			if c.SandboxID == id && (keep == nil || keep(c)) {
				out = append(out, c)
			}
		}
		r.mu.Unlock()
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hostsMap is a resolver the test may change while the proxy runs.
type hostsMap struct {
	mu sync.Mutex
	m  map[string][]netip.Addr
}

func (h *hostsMap) set(name string, addrs ...netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[name] = addrs
}

func (h *hostsMap) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return StaticLookup(h.m)(ctx, name)
}

// needRoot skips a test that makes network namespaces where it cannot.
func needRoot(t testing.TB) *egress.Egress {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces and nftables need root")
	}
	eg := &egress.Egress{}
	eg.Detect("")
	if eg.Problem() != "" {
		t.Skipf("the allow-list network is unavailable here: %s", eg.Problem())
	}
	return eg
}

// newWorld starts a proxy; cfg may change its configuration.
func newWorld(t testing.TB, cfg ...func(*Config)) *world {
	t.Helper()
	w := &world{policy: &MemoryPolicy{}, records: &records{}, hosts: &hostsMap{m: map[string][]netip.Addr{}}, eg: needRoot(t)}
	c := Config{Policy: w.policy, Recorder: w.records, Lookup: w.hosts.lookup, ResolveTTL: time.Millisecond}
	for _, f := range cfg {
		f(&c)
	}
	px, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	px.Deny(w.eg.Pool)
	px.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := px.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	w.px = px
	return w
}

// sbx is a test's sandbox: a network namespace redirected to the proxy.
type sbx struct {
	id   string
	link egress.Link
	ca   *CA
	w    *world
}

// sandbox makes a sandbox with rules allow and attaches it.
func (w *world) sandbox(t testing.TB, allow ...string) *sbx {
	t.Helper()
	id := "sbx_test" + hostos.RandomSuffix()
	tcp, dns := w.px.Ports()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = w.eg.Teardown(context.Background(), id) })
	link, err := w.eg.Setup(ctx, id, egress.Ports{TCP: tcp, DNS: dns})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA(id)
	if err != nil {
		t.Fatal(err)
	}
	s := &sbx{id: id, link: link, ca: ca, w: w}
	s.setRules(t, allow...)
	if err := w.px.Attach(Sandbox{ID: id, Addr: link.Sandbox, Gateway: link.Host, CA: ca}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.px.Detach(id) })
	return s
}

// setRules replaces the sandbox's rules (credentials kept as given).
func (s *sbx) setRules(t testing.TB, allow ...string) {
	t.Helper()
	r, err := s.w.px.Parser().Parse(allow)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := s.w.policy.Lookup(context.Background(), s.id)
	s.w.policy.Set(s.id, Rules{Allow: r, Credentials: old.Credentials})
}

// inside runs fn on a thread in the sandbox's network namespace: sockets
// it makes are the sandbox's.
func (s *sbx) inside(fn func() error) error { return egress.InNamespace(s.id, fn) }

// dial connects from inside the sandbox.
func (s *sbx) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := s.inside(func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	return c, err
}

// resolver resolves names the way the sandbox does: by the proxy's DNS,
// at the host's end of its link (UDP, redirected).
func (s *sbx) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var c net.Conn
		err := s.inside(func() (err error) {
			d := net.Dialer{Timeout: 3 * time.Second}
			c, err = d.DialContext(ctx, network, netip.AddrPortFrom(s.link.Host, 53).String())
			return err
		})
		return c, err
	}}
}

// client is an HTTP client in the sandbox: names resolved by the proxy's
// DNS, TLS verified against roots.
func (s *sbx) client(roots *x509.CertPool) *http.Client {
	d := func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		if _, err := netip.ParseAddr(host); err != nil {
			addrs, err := s.resolver().LookupNetIP(ctx, "ip4", host)
			if err != nil {
				return nil, err
			}
			host = addrs[0].String()
		}
		return s.dial(ctx, net.JoinHostPort(host, port))
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: d, TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true, Proxy: nil}}
}

// get fetches url from the sandbox: its status and body, or an error.
func (s *sbx) get(roots *x509.CertPool, url string, header ...string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1]
		}
	}
	resp, err := s.client(roots).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// upstream is a network namespace of a test's own at a "public" address,
// where servers listen.
type upstream struct {
	name       string
	host, addr netip.Addr
}

// newUpstream makes an upstream network on a random /30 of 198.18.0.0/15.
func newUpstream(t testing.TB) upstream {
	t.Helper()
	var r [8]byte
	_, _ = rand.Read(r[:])
	slot := binary.BigEndian.Uint32(r[:4]) % (1 << 15)
	base := binary.BigEndian.Uint32([]byte{198, 18, 0, 0})
	var host, addr [4]byte
	binary.BigEndian.PutUint32(host[:], base+4*slot+1)
	binary.BigEndian.PutUint32(addr[:], base+4*slot+2)
	u := upstream{name: "tq" + hex.EncodeToString(r[4:]), host: netip.AddrFrom4(host), addr: netip.AddrFrom4(addr)}
	ipBatch(t, "", fmt.Sprintf("netns add %[1]s\nlink add %[1]s type veth peer name eth0 netns %[1]s\naddr add %[2]s/30 dev %[1]s\nlink set %[1]s up\n", u.name, u.host))
	t.Cleanup(func() {
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader("link del " + u.name + "\nnetns del " + u.name + "\n")
		_ = cmd.Run()
	})
	ipBatch(t, u.name, fmt.Sprintf("link set lo up\naddr add %s/30 dev eth0\nlink set eth0 up\n", u.addr))
	return u
}

func ipBatch(t testing.TB, netns, batch string) {
	t.Helper()
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(batch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// listen listens on port in the upstream network.
func (u upstream) listen(t testing.TB, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	err := egress.InNetns(filepath.Join(egress.NetnsDir, u.name), func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(u.addr, uint16(port)).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serve serves h on port of the upstream network, over TLS with
// certificates of ca for every name asked if ca is not nil.
func (u upstream) serve(t testing.TB, port int, ca *CA, h http.Handler) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = u.listen(t, port)
	if ca == nil {
		srv.Start()
	} else {
		srv.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.leaf(hello.ServerName)
		}}
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
}

// pool is a certificate pool of ca alone.
func pool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// echoHost answers with a server's name and the request's Host.
func echoHost(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s %s", name, r.Host)
	})
}
