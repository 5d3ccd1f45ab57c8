package local

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// egressEnv is a provider whose allow-list mode runs, with the proxy it
// uses, the rules the proxy asks, the secrets credentials name and the
// records the proxy made.
type egressEnv struct {
	p       *Provider
	dir     string
	proxy   *egressproxy.Proxy
	rules   *egressproxy.MemoryPolicy
	records *recorder
	secrets map[string]string
}

// newEgressEnv returns a provider over a fresh state folder whose
// allow-list mode is available through a proxy of its own, resolving
// host names through names alone (EGRESS_HOSTS); cfg may change the
// proxy's configuration.
func newEgressEnv(t *testing.T, names map[string]netip.Addr, cfg ...func(*egressproxy.Config)) *egressEnv {
	t.Helper()
	hosts := map[string][]netip.Addr{}
	for n, a := range names {
		hosts[n] = []netip.Addr{a}
	}
	env := &egressEnv{dir: harness.ReachableTempDir(t), rules: &egressproxy.MemoryPolicy{}, records: &recorder{},
		secrets: map[string]string{}}
	pc := egressproxy.Config{Policy: env.rules, Recorder: env.records, Lookup: egressproxy.StaticLookup(hosts)}
	for _, f := range cfg {
		f(&pc)
	}
	px, err := egressproxy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	px.Start()
	t.Cleanup(func() { _ = px.Stop(context.Background()) })
	env.proxy = px
	secrets := func(_ context.Context, tenant, name string) (string, error) {
		v, ok := env.secrets[tenant+"/"+name]
		if !ok {
			return "", egressproxy.ErrNoSecret
		}
		return v, nil
	}
	// The networks are what is tested here; a workspace image would only
	// stop TestEgressTeardownAfterCrash from deleting a folder.
	p, err := New(env.dir, noWorkspaceLimit(), WithEgressProxy(px, env.rules, secrets))
	if err != nil {
		t.Fatal(err)
	}
	if p.problem != "" {
		t.Fatalf("local provider unavailable: %s", p.problem)
	}
	if problem := p.egressProblem(); problem != "" {
		t.Fatalf("allowlist network unavailable: %s", problem)
	}
	env.p = p
	return env
}

// newEgressProvider is newEgressEnv's provider and state folder.
func newEgressProvider(t *testing.T, names map[string]netip.Addr) (*Provider, string) {
	t.Helper()
	env := newEgressEnv(t, names)
	return env.p, env.dir
}

// recorder keeps the proxy's records.
type recorder struct {
	mu   sync.Mutex
	recs []egressproxy.ConnRecord
}

func (r *recorder) Record(c egressproxy.ConnRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, c)
}

// of returns the records of sandbox id so far.
func (r *recorder) of(id string) []egressproxy.ConnRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []egressproxy.ConnRecord
	for _, c := range r.recs {
		if c.SandboxID == id {
			out = append(out, c)
		}
	}
	return out
}

// createIn creates a sandbox with params and destroys it at the end of
// the test.
func createIn(t *testing.T, p *Provider, params any) string {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	id := provider.NewSandboxID()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := p.Create(ctx, provider.CreateSpec{SandboxID: id, Params: raw}); err != nil {
		t.Fatalf("Create(%s): %v", raw, err)
	}
	t.Cleanup(func() {
		if err := p.Destroy(context.Background(), id); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return id
}

func execIn(t *testing.T, p *Provider, id, command string) string {
	t.Helper()
	res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: command, Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%q) = %+v, %v", command, res, err)
	}
	return res.Output
}

// testNet is a network namespace of a test's own, linked to the host by a
// veth pair on a /30: the host holds the first address, the namespace the
// second.
type testNet struct {
	name       string
	host, addr netip.Addr
}

// newTestNet makes a test network on a random /30 of within (removed at
// the end of the test).
func newTestNet(t *testing.T, within netip.Prefix) testNet {
	t.Helper()
	var r [8]byte
	_, _ = rand.Read(r[:])
	base4 := within.Addr().As4()
	slot := binary.BigEndian.Uint32(r[:4]) % (uint32(1) << (30 - within.Bits()))
	var host, addr [4]byte
	binary.BigEndian.PutUint32(host[:], binary.BigEndian.Uint32(base4[:])+4*slot+1)
	binary.BigEndian.PutUint32(addr[:], binary.BigEndian.Uint32(base4[:])+4*slot+2)
	n := testNet{name: "tq" + hex.EncodeToString(r[4:]), host: netip.AddrFrom4(host), addr: netip.AddrFrom4(addr)}
	ipBatch(t, "", fmt.Sprintf("netns add %[1]s\nlink add %[1]s type veth peer name eth0 netns %[1]s\naddr add %[2]s/30 dev %[1]s\nlink set %[1]s up\n", n.name, n.host))
	t.Cleanup(func() {
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader("link del " + n.name + "\nnetns del " + n.name + "\n")
		_ = cmd.Run()
	})
	ipBatch(t, n.name, fmt.Sprintf("link set lo up\naddr add %s/30 dev eth0\nlink set eth0 up\n", n.addr))
	return n
}

func ipBatch(t *testing.T, netns, batch string) {
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

// serve answers every HTTP request on addr with body, from inside the
// network namespace netns ("": the host's), until the test ends. It
// returns the address it listens on.
func serve(t *testing.T, netns, addr, body string) string {
	t.Helper()
	var ln net.Listener
	listen := func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}
	var err error
	if netns == "" {
		err = listen()
	} else {
		err = egress.InNetns(filepath.Join(egress.NetnsDir, netns), listen)
	}
	if err != nil {
		t.Fatalf("listen on %s in %q: %v", addr, netns, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// reach tries an HTTP GET of every target from inside the sandbox, all at
// once, and returns each one's body, or "" when it could not be reached
// (the egress proxy refuses a plain HTTP request with a 403 of its own).
func reach(t *testing.T, p *Provider, id string, targets ...string) map[string]string {
	t.Helper()
	script := `command -v curl >/dev/null || { echo "no curl in the sandbox"; exit 1; }
for t in "$@"; do (b=$(curl -fsS --connect-timeout 3 -m 5 "http://$t/" 2>/dev/null); echo "$t ${b:--}") & done; wait`
	q := make([]string, len(targets))
	for i, target := range targets {
		q[i] = "'" + target + "'"
	}
	out := execIn(t, p, id, "set -- "+strings.Join(q, " ")+"; "+script)
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		target, body, _ := strings.Cut(line, " ")
		if body != "-" {
			got[target] = body
		}
	}
	return got
}

// egressLeft names what is left on the host of the sandbox's network.
func egressLeft(id string) []string {
	var left []string
	if _, err := os.Stat(filepath.Join(egress.NetnsDir, egress.NetnsName(id))); err == nil {
		left = append(left, "netns "+egress.NetnsName(id))
	}
	if linkExists(egress.VethName(id)) {
		left = append(left, "veth "+egress.VethName(id))
	}
	if exec.Command("nft", "list", "table", "inet", egress.TableName(id)).Run() == nil {
		left = append(left, "nft table "+egress.TableName(id))
	}
	return left
}

// sandboxLink returns the sandbox's and the host's addresses on its veth.
func sandboxLink(t *testing.T, id string) egress.Link {
	t.Helper()
	ifc, err := net.InterfaceByName(egress.VethName(id))
	if err != nil {
		t.Fatalf("the sandbox's veth: %v", err)
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() {
			return egress.Link{Host: pfx.Addr(), Sandbox: pfx.Addr().Next()}
		}
	}
	t.Fatalf("the sandbox's veth has no IPv4 address")
	return egress.Link{}
}

// hostAddr returns an IPv4 address of the host's main interface (the one
// of its default route), not loopback nor a sandbox's or test's link.
func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	c, err := net.Dial("udp4", "198.51.100.1:9") // nothing is sent
	if err != nil {
		t.Skipf("no default IPv4 route: %v", err)
	}
	defer func() { _ = c.Close() }()
	a, _ := netip.ParseAddrPort(c.LocalAddr().String())
	return a.Addr()
}

// TestEgressAllowlist: an allow-list sandbox reaches what its list names,
// by address or by a host name pinned at create, and nothing else: not
// other servers or ports, not private addresses a broad entry or a name
// covers, not the host (loopback, its own addresses, its veth end), not
// link-local or metadata addresses, not other sandboxes. A default
// sandbox reaches none of it. After Destroy nothing of the sandbox's
// network is left.
func TestEgressAllowlist(t *testing.T) {
	t.Parallel()
	// Servers in networks of their own: "public" ones (198.18.0.0/15,
	// benchmarking addresses, not private), a private one, a link-local one.
	pub := newTestNet(t, netip.MustParsePrefix("198.18.0.0/16"))
	other := newTestNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	priv := newTestNet(t, netip.MustParsePrefix("10.251.0.0/16"))  // clear of the pool and of test/harness/hosts.go
	ll := newTestNet(t, netip.MustParsePrefix("169.254.100.0/22")) // clear of 169.254.169.254
	serve(t, pub.name, pub.addr.String()+":80", "pub80")
	serve(t, pub.name, pub.addr.String()+":81", "pub81")
	serve(t, other.name, other.addr.String()+":80", "other")
	serve(t, priv.name, priv.addr.String()+":80", "priv")
	serve(t, ll.name, ll.addr.String()+":80", "linklocal")
	// And on the host: one listener on loopback only, one on every address.
	lo := serve(t, "", "127.0.0.1:0", "host-loopback")
	_, anyPort, _ := net.SplitHostPort(serve(t, "", "0.0.0.0:0", "host-any"))
	hostIP := hostAddr(t)

	// The host reaches every server: a sandbox that does not, is kept out.
	for target, want := range map[string]string{
		pub.addr.String() + ":80": "pub80", other.addr.String() + ":80": "other", priv.addr.String() + ":80": "priv",
		ll.addr.String() + ":80": "linklocal", lo: "host-loopback", hostIP.String() + ":" + anyPort: "host-any",
	} {
		resp, err := http.Get("http://" + target + "/")
		if err != nil {
			t.Fatalf("the host cannot reach %s: %v", target, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != want {
			t.Fatalf("%s answered %q, want %q", target, b, want)
		}
	}

	p, _ := newEgressProvider(t, map[string]netip.Addr{"pub.example": pub.addr, "priv.example": priv.addr})
	start := time.Now()
	none := createIn(t, p, map[string]any{})
	noneTook := time.Since(start)
	start = time.Now()
	named := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"pub.example:80"}})
	namedTook := time.Since(start)
	t.Logf("create took %v with network none, %v with an allow-list", noneTook, namedTook)
	broad := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"0.0.0.0/0"}})
	private := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"10.0.0.0/8", "priv.example:80"}})
	neighbour := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"10.0.0.0/8"}})

	// A listener inside a sandbox whose list covers every sandbox's address,
	// for the others to try, and one of them with the same list.
	execIn(t, p, private, `mkdir /tmp/www && printf sandbox >/tmp/www/index.html
nohup python3 -m http.server 8000 --bind 0.0.0.0 --directory /tmp/www >/dev/null 2>&1 &
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.1; done; exit 1`)
	namedLink, broadLink, privateLink, neighbourLink := sandboxLink(t, named), sandboxLink(t, broad), sandboxLink(t, private), sandboxLink(t, neighbour)
	sbx := privateLink.Sandbox.String() + ":8000"

	always := func(link egress.Link) []string { // what no sandbox reaches
		return []string{
			lo,                                 // the host's loopback: the sandbox's own, here
			hostIP.String() + ":" + anyPort,    // the host's own address
			link.Host.String() + ":" + anyPort, // the host's end of the sandbox's link
			ll.addr.String() + ":80",           // link-local
			"169.254.169.254:80",               // the metadata address (this host may answer there)
			other.addr.String() + ":80",        // not on any list but broad's
		}
	}
	cases := []struct {
		name   string
		id     string
		open   map[string]string
		closed []string
	}{
		{"none", none, nil, append(always(namedLink), pub.addr.String()+":80", priv.addr.String()+":80", sbx)},
		{"named", named, map[string]string{"pub.example:80": "pub80", pub.addr.String() + ":80": "pub80"},
			append(always(namedLink), pub.addr.String()+":81", "priv.example:80", priv.addr.String()+":80", sbx)},
		{"broad", broad, map[string]string{pub.addr.String() + ":80": "pub80", pub.addr.String() + ":81": "pub81", other.addr.String() + ":80": "other"},
			append(slices.DeleteFunc(always(broadLink), func(s string) bool { return s == other.addr.String()+":80" }),
				priv.addr.String()+":80", sbx)},
		{"private", private, map[string]string{priv.addr.String() + ":80": "priv", "priv.example:80": "priv", sbx: "sandbox"},
			append(always(privateLink), pub.addr.String()+":80")},
		{"neighbour", neighbour, map[string]string{priv.addr.String() + ":80": "priv"},
			append(always(neighbourLink), pub.addr.String()+":80", sbx)},
	}
	for _, tc := range cases {
		targets := slices.Concat(tc.closed)
		for target := range tc.open {
			targets = append(targets, target)
		}
		got := reach(t, p, tc.id, targets...)
		for target, want := range tc.open {
			if got[target] != want {
				t.Errorf("%s sandbox: %s answered %q, want %q", tc.name, target, got[target], want)
			}
		}
		for _, target := range tc.closed {
			if body, ok := got[target]; ok {
				t.Errorf("%s sandbox reached %s (it answered %q)", tc.name, target, body)
			}
		}
	}

	// Names resolve through the proxy's DNS, only those on the list.
	if out := execIn(t, p, named, "getent hosts pub.example"); !strings.HasPrefix(out, pub.addr.String()+" ") {
		t.Errorf("getent hosts pub.example in the named sandbox = %q; want %s", out, pub.addr)
	}
	if out := execIn(t, p, named, "getent hosts priv.example example.com || echo unresolved"); out != "unresolved\n" {
		t.Errorf("names not on the list resolve inside: %q", out)
	}

	// Destroy leaves nothing of the sandbox's network behind.
	for _, id := range []string{named, broad, private, neighbour} {
		if err := p.Destroy(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if left := egressLeft(id); len(left) > 0 {
			t.Errorf("left after Destroy: %v", left)
		}
	}
}

// TestEgressTeardownAfterCrash: whatever point a Tether died at, the next
// one's List finds the sandbox and its Destroy removes the namespace, the
// veth and the rules: after a complete create, after a create that
// stopped once the network was made, and for a running sandbox whose
// folder is gone.
func TestEgressTeardownAfterCrash(t *testing.T) {
	t.Parallel()
	first, dir := newEgressProvider(t, nil)
	allow := map[string]any{"network": "allowlist", "allow": []string{"198.18.0.1:443"}}
	raw, _ := json.Marshal(allow)
	var prm Params
	if err := json.Unmarshal(raw, &prm); err != nil {
		t.Fatal(err)
	}

	complete := provider.NewSandboxID()
	if _, err := first.Create(t.Context(), provider.CreateSpec{SandboxID: complete, Params: raw}); err != nil {
		t.Fatal(err)
	}
	// A create that died once the network was made, before bwrap started.
	halfway := provider.NewSandboxID()
	if err := os.MkdirAll(filepath.Join(dir, halfway, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := first.setupEgress(t.Context(), halfway, "", prm); err != nil {
		t.Fatal(err)
	}
	// A running sandbox whose folder is gone.
	folderless := provider.NewSandboxID()
	if _, err := first.Create(t.Context(), provider.CreateSpec{SandboxID: folderless, Params: raw}); err != nil {
		t.Fatal(err)
	}
	ids := []string{complete, halfway, folderless}
	t.Cleanup(func() {
		for _, id := range ids {
			_ = first.Destroy(context.Background(), id)
		}
	})
	for _, id := range ids {
		if left := egressLeft(id); len(left) != 3 {
			t.Fatalf("before the crash, %s has %v; want its netns, veth and nft table", id, left)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, folderless)); err != nil {
		t.Fatal(err)
	}

	next, err := New(dir, noWorkspaceLimit()) // the next Tether
	if err != nil {
		t.Fatal(err)
	}
	inv, err := next.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range inv {
		listed = append(listed, r.SandboxID)
	}
	for _, id := range ids {
		if !slices.Contains(listed, id) {
			t.Fatalf("List = %v; want %s among them", listed, id)
		}
		if err := next.Destroy(t.Context(), id); err != nil {
			t.Fatalf("Destroy(%s): %v", id, err)
		}
		if left := egressLeft(id); len(left) > 0 {
			t.Errorf("left after the next Tether's Destroy of %s: %v", id, left)
		}
		if err := next.Destroy(t.Context(), id); err != nil {
			t.Errorf("a second Destroy(%s): %v", id, err)
		}
	}
}

// TestEgressParams: params.allow is checked strictly before anything is
// made; every refusal is INVALID_REQUEST and says what is wrong.
func TestEgressParams(t *testing.T) {
	t.Parallel()
	p, _ := newEgressProvider(t, nil)
	many := make([]string, MaxAllow+1)
	for i := range many {
		many[i] = fmt.Sprintf("198.18.0.%d", i)
	}
	bad := []struct {
		params, want string
	}{
		{`{"network":"allowlist"}`, "at least one"},
		{`{"network":"allowlist","allow":[]}`, "at least one"},
		{`{"allow":["pypi.org"]}`, `only to params.network "allowlist"`},
		{`{"network":"none","allow":["pypi.org"]}`, `only to params.network "allowlist"`},
		{`{"network":"allowlist","allow":"pypi.org"}`, "not a valid JSON object"},
		{`{"network":"allowlist","allow":` + mustJSON(many) + `}`, fmt.Sprintf("at most %d", MaxAllow)},
		{`{"network":"allowlist","allow":[""]}`, "empty"},
		{`{"network":"allowlist","allow":["pypi.org:0"]}`, "port"},
		{`{"network":"allowlist","allow":["pypi.org:65536"]}`, "port"},
		{`{"network":"allowlist","allow":["pypi.org:https"]}`, "port"},
		{`{"network":"allowlist","allow":["pypi.org:"]}`, "port"},
		{`{"network":"allowlist","allow":["2001:db8::1"]}`, "never reach"},
		{`{"network":"allowlist","allow":["[2001:db8::1]:443"]}`, "never reach"},
		{`{"network":"allowlist","allow":["[fe80::1]:443"]}`, "never reach"},
		{`{"network":"allowlist","allow":["[::1]:80"]}`, "never reach"},
		{`{"network":"allowlist","allow":["[10.0.0.1]:80"]}`, "brackets"},
		{`{"network":"allowlist","allow":["*.com"]}`, "two labels"},
		{`{"network":"allowlist","allow":["*"]}`, "fully qualified"},
		{`{"network":"allowlist","allow":["a.*.example.com"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["pypi.org"],"credentials":[{"host":"pypi.org","header":"Authorization"}]}`, "must name a secret"},
		{`{"network":"allowlist","allow":["pypi.org"],"credentials":[{"host":"pypi.org","header":"Host","secret":"t"}]}`, "not a header"},
		{`{"network":"allowlist","allow":["pypi.org"],"credentials":[{"host":"*.pypi.org","header":"X-Key","secret":"t"}]}`, "not a host name"},
		{`{"network":"allowlist","allow":["pypi.org"],"credentials":[{"host":"pypi.org","header":"X-Key","format":"Bearer","secret":"t"}]}`, "{secret} exactly once"},
		{`{"credentials":[{"host":"pypi.org","header":"Authorization","secret":"t"}]}`, `only to params.network "allowlist"`},
		{`{"network":"allowlist","allow":["::ffff:1.2.3.4"]}`, "IPv6"},
		{`{"network":"allowlist","allow":["10.0.0.1/8"]}`, "did you mean 10.0.0.0/8"},
		{`{"network":"allowlist","allow":["10.0.0.0/33"]}`, "CIDR"},
		{`{"network":"allowlist","allow":["127.0.0.1"]}`, "never reach"},
		{`{"network":"allowlist","allow":["169.254.169.254:80"]}`, "never reach"},
		{`{"network":"allowlist","allow":["169.254.0.0/16"]}`, "never reach"},
		{`{"network":"allowlist","allow":["224.0.0.1"]}`, "never reach"},
		{`{"network":"allowlist","allow":["0.0.0.0"]}`, "never reach"},
		{`{"network":"allowlist","allow":["10.250.3.2"]}`, "never reach"}, // the pool
		{`{"network":"allowlist","allow":["pypi"]}`, "fully qualified"},
		{`{"network":"allowlist","allow":["py_pi.org"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["-pypi.org"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["pypi..org"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["pypi.org."]}`, "not a host name"},
		{`{"network":"allowlist","allow":["1.2.3"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["1.2.3.256"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["pypi.org extra"]}`, "not a host name"},
		{`{"network":"allowlist","allow":["https://pypi.org"]}`, "port"},
		{`{"network":"moon"}`, `"allowlist"`},
	}
	for _, tc := range bad {
		err := p.ValidateParams([]byte(tc.params))
		if provider.ErrorCode(err) != provider.CodeInvalidRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateParams(%s) = %v; want INVALID_REQUEST saying %q", tc.params, err, tc.want)
		}
	}
	good := []string{
		`{"network":"allowlist","allow":["pypi.org","files.pythonhosted.org:443","10.0.0.0/8","192.0.2.7:8080"]}`,
		`{"network":"allowlist","allow":["PyPI.org:443","0.0.0.0/0","10.0.0.0/8:5432","xn--bcher-kva.example"]}`,
		`{"network":"allowlist","allow":["*.pythonhosted.org","*.example.com:8443","2606:4700::1111","[2606:4700::1111]:443","2606:4700::/32","[fd00::/8]:5432"]}`,
		`{"network":"allowlist","allow":` + mustJSON(many[:MaxAllow]) + `}`,
	}
	for _, params := range good {
		if err := p.ValidateParams([]byte(params)); err != nil {
			t.Errorf("ValidateParams(%s) = %v; want nil", params, err)
		}
	}
}

func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestEgressUnavailableWithoutNft: on a host without nft the mode is
// refused (a note in Info, INVALID_REQUEST at validation and create) and
// never falls back to an open network; the other modes still work.
func TestEgressUnavailableWithoutNft(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"bwrap", "nsenter", "setpriv", "sh", "sleep", "ip"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin) // everything but nft
	dir := harness.ReachableTempDir(t)
	p, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info(t.Context())
	if !info.Available {
		t.Fatalf("provider unavailable: %s", info.Reason)
	}
	if !slices.ContainsFunc(info.Notes, func(n string) bool {
		return strings.Contains(n, `"allowlist": unavailable`) && strings.Contains(n, "nftables")
	}) {
		t.Errorf("Info notes %q; want the allowlist mode unavailable, naming nftables", info.Notes)
	}
	raw := []byte(`{"network":"allowlist","allow":["198.18.0.1"]}`)
	if err := p.ValidateParams(raw); provider.ErrorCode(err) != provider.CodeInvalidRequest || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("ValidateParams(%s) = %v; want INVALID_REQUEST, unavailable", raw, err)
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Params: raw}); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("Create(%s) = %v; want INVALID_REQUEST", raw, err)
	}
	if _, err := os.Stat(filepath.Join(dir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create left its folder: %v", err)
	}
	// The default mode still works. (Exec would not here: the sandbox
	// cannot see the symlinked setpriv; its init's interfaces are read
	// from the host.)
	id = createIn(t, p, map[string]any{"network": "none"})
	m, err := p.readMeta(id)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.ReadFile("/proc/" + strconv.Itoa(m.InitPID) + "/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(dev)), "\n")[2:]; len(lines) != 1 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "lo:") {
		t.Errorf("a network none sandbox has interfaces %q; want lo only", lines)
	}
}

// TestEgressPoolOverlappingTheHost: a pool that overlaps an address the
// host uses makes the mode unavailable, with the reason.
func TestEgressPoolOverlappingTheHost(t *testing.T) {
	t.Parallel()
	p, err := New(harness.ReachableTempDir(t), EgressPool(netip.MustParsePrefix("127.0.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.egress.Problem(), "overlaps 127.0.0.1/8") {
		t.Errorf("problem = %q; want the pool's overlap with loopback", p.egress.Problem())
	}
}

// TestAllowlistRefusalKeepsTheDNSAnswer: a listed name that resolves
// only to addresses a sandbox may not reach (a private one no entry
// names, loopback) is answered in the sandbox as one that does not exist:
// it does not resolve, and a connection that asks for it is refused with
// the same words, none of which is the address the operator's DNS
// answered. A tenant cannot map the operator's internal names. Such a
// list is no reason to refuse the create: what a name resolves to is
// decided at each connection.
func TestAllowlistRefusalKeepsTheDNSAnswer(t *testing.T) {
	t.Parallel()
	p, _ := newEgressProvider(t, map[string]netip.Addr{"db.internal": netip.MustParseAddr("10.9.8.7"),
		"lo.internal": netip.MustParseAddr("127.0.0.1")})
	id := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"db.internal:80", "lo.internal:80", "nope.internal:80"}})
	refusal := func(host string) string {
		t.Helper()
		// Dialled at an address of the test's choosing (a forged answer):
		// the proxy decides by the name, and must refuse it whatever.
		out := execIn(t, p, id, fmt.Sprintf(`getent hosts %[1]s; echo "getent $?"; curl -sS -m 5 --resolve %[1]s:80:198.18.0.9 http://%[1]s/ 2>&1; true`, host))
		return strings.ReplaceAll(out, host, "HOST")
	}
	internal, loopback, missing := refusal("db.internal"), refusal("lo.internal"), refusal("nope.internal")
	if !strings.HasPrefix(missing, "getent 2\n") || !strings.Contains(missing, "no address the sandbox may reach") {
		t.Errorf("a missing name in the sandbox: %q; want no answer and the proxy's refusal", missing)
	}
	if strings.Contains(internal, "10.9.8.7") || strings.Contains(loopback, "127.0.0.1") {
		t.Errorf("the refusals echo the DNS answer: %q, %q", internal, loopback)
	}
	if internal != missing || loopback != missing {
		t.Errorf("refusals differ by what the name resolved to: %q, %q, %q", internal, loopback, missing)
	}
}
