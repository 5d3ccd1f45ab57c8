package local

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/host/egress"
	"github.com/tetherhq/tether/provider"
)

// mirrorCA is a test's own certificate authority, for servers of its own
// under real names (pypi.org): the proxy trusts it, and the sandbox only
// where a test says so.
type mirrorCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newMirrorCA(t *testing.T) *mirrorCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mirror CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &mirrorCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (m *mirrorCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(m.cert)
	return p
}

// serverCert is a certificate of the CA's for names.
func (m *mirrorCA) serverCert(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.cert, &key.PublicKey, m.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveTLS serves h over TLS (a certificate of ca for names) on addr in
// network namespace netns, until the test ends.
func serveTLS(t *testing.T, netns, addr string, ca *mirrorCA, h http.Handler, names ...string) {
	t.Helper()
	var ln net.Listener
	if err := egress.InNetns(filepath.Join(egress.NetnsDir, netns), func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t, names...)}}
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
}

// withRoots makes the proxy verify upstreams against the CA.
func withRoots(ca *mirrorCA) func(*egressproxy.Config) {
	return func(c *egressproxy.Config) { c.RootCAs = ca.pool() }
}

// TestEgressCredentialOutsideTheSandbox: a sandbox with a credential for
// a host reaches it with plain `curl https://…` (the sandbox trusts its
// own CA, which the proxy terminates that TLS with), and the server gets
// the secret in the header in place of the sandbox's placeholder; the
// secret is nowhere the sandbox can look: not its environment, its
// processes' command lines or memory, its files, nor any file Tether
// wrote for it on the host.
func TestEgressCredentialOutsideTheSandbox(t *testing.T) {
	t.Parallel()
	ca := newMirrorCA(t)
	api := newTestNet(t, netip.MustParsePrefix("198.18.0.0/16"))
	var mu sync.Mutex
	var seen []string
	serveTLS(t, api.name, api.addr.String()+":443", ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = fmt.Fprint(w, "api-ok")
	}), "api.example")
	env := newEgressEnv(t, map[string]netip.Addr{"api.example": api.addr}, withRoots(ca))
	const secret = "tk-Zq81-SECRET-never-inside"
	env.secrets["/api-token"] = secret
	id := createIn(t, env.p, map[string]any{"network": "allowlist", "allow": []string{"api.example:443"},
		"credentials": []map[string]string{{"host": "api.example", "header": "Authorization", "format": "Bearer {secret}", "secret": "api-token"}}})

	if out := execIn(t, env.p, id, `curl -sS -m 10 -H "Authorization: Bearer PLACEHOLDER" https://api.example/`); out != "api-ok" {
		t.Fatalf("curl https://api.example/ = %q", out)
	}
	const marker = "egress-memory-probe"
	execIn(t, env.p, id, `nohup python3 -c 'import sys,time,urllib.request
r = urllib.request.urlopen(urllib.request.Request("https://api.example/", headers={"Authorization": "Bearer PLACEHOLDER"}))
open("/tmp/py-said", "w").write(r.read().decode())
time.sleep(60)' `+marker+` >/dev/null 2>&1 &
for i in $(seq 100); do [ -s /tmp/py-said ] && exit 0; sleep 0.1; done; exit 1`)
	mu.Lock()
	got := strings.Join(seen, "|")
	mu.Unlock()
	if got != "Bearer "+secret+"|Bearer "+secret {
		t.Errorf("the server saw Authorization %q; want the secret, twice", got)
	}

	// Where a process of the sandbox could look. The secret is searched
	// for by its reverse, so that the search's own command line does not
	// hold it.
	reversed := []byte(secret)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	if out := execIn(t, env.p, id, `pat=$(printf %s '`+string(reversed)+`' | rev); n=0
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
	c=$( (tr '\0' ' ' < "$f") 2>/dev/null)
	case "$c" in *"$pat"*) n=$((n+1));; esac
done
case "$(env)" in *"$pat"*) echo "in the environment";; esac
echo "$n in /proc"
printf %s '`+string(reversed)+`' | rev | grep -rlF -f - /etc /workspace /tmp /run 2>/dev/null; true`); out != "0 in /proc\n" {
		t.Errorf("the secret is in the sandbox's environment, command lines or files: %q", out)
	}
	pid := pidOf(t, marker)
	if mem := processMemoryHas(t, pid, []byte(secret)); mem {
		t.Errorf("the secret is in the memory of the sandbox's process %d", pid)
	}
	if !processMemoryHas(t, pid, []byte("PLACEHOLDER")) {
		t.Errorf("the memory scan of process %d cannot find even the placeholder: it proves nothing", pid)
	}
	_ = filepath.WalkDir(filepath.Join(env.dir, id), func(path string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil || d.IsDir() || strings.Contains(path, "/workspace/") {
			return nil //nolint:nilerr // what cannot be walked is not searched
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("Tether wrote the secret to %s", path)
		}
		return nil
	})
	var injected bool
	for _, r := range env.records.of(id) {
		injected = injected || r.Credential == "Authorization"
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("a record holds the secret: %+v", r)
		}
	}
	if !injected {
		t.Error("no record says the credential was added")
	}
}

// pidOf is the host pid of the process whose command line holds marker.
func pidOf(t *testing.T, marker string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(marker)) &&
			!bytes.Contains(b, []byte("nohup")) && !bytes.Contains(b, []byte("seq 100")) {
			return pid
		}
	}
	t.Fatalf("no process with %q in its command line", marker)
	return 0
}

// processMemoryHas reports whether the memory of process pid holds what,
// reading each of its readable mappings from the host.
func processMemoryHas(t *testing.T, pid int, what []byte) bool {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mem.Close() }()
	for line := range strings.SplitSeq(strings.TrimSpace(string(maps)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1][0] != 'r' {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end-start > 1<<30 {
			continue
		}
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		if bytes.Contains(buf[:n], what) {
			return true
		}
	}
	return false
}

// tinyWheel is a wheel of a package named tinypkg, version 1.0.
func tinyWheel(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"tinypkg/__init__.py":                 "VALUE = 42\n",
		"tinypkg-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
		"tinypkg-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: tether-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinypkg-1.0.dist-info/RECORD":        "",
		"tinypkg-1.0.dist-info/top_level.txt": "tinypkg\n",
	} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEgressPipDownload: a sandbox allowed pypi.org and
// *.pythonhosted.org downloads a package with pip from a mirror served
// under those names (with the test's CA, which pip is told to trust:
// the proxy passes the mirror's TLS through untouched), and from no
// other index.
func TestEgressPipDownload(t *testing.T) {
	t.Parallel()
	ca := newMirrorCA(t)
	mirror := newTestNet(t, netip.MustParsePrefix("198.18.0.0/16"))
	other := newTestNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	wheel := tinyWheel(t)
	sum := sha256.Sum256(wheel)
	const file = "tinypkg-1.0-py3-none-any.whl"
	index := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Host == "pypi.org" && r.URL.Path == "/simple/tinypkg/":
			w.Header().Set("Content-Type", "text/html")
			_, _ = fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="https://files.pythonhosted.org/packages/%s#sha256=%s">%s</a></body></html>`,
				file, hex.EncodeToString(sum[:]), file)
		case r.Host == "files.pythonhosted.org" && r.URL.Path == "/packages/"+file:
			_, _ = w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	})
	serveTLS(t, mirror.name, mirror.addr.String()+":443", ca, index, "pypi.org", "files.pythonhosted.org")
	serveTLS(t, other.name, other.addr.String()+":443", ca, index, "pypi.other.example")
	env := newEgressEnv(t, map[string]netip.Addr{"pypi.org": mirror.addr, "files.pythonhosted.org": mirror.addr,
		"pypi.other.example": other.addr})
	id := createIn(t, env.p, map[string]any{"network": "allowlist", "allow": []string{"pypi.org", "*.pythonhosted.org"}})
	if err := env.p.WriteFile(t.Context(), id, "/workspace/mirror-ca.pem", bytes.NewReader(ca.certPEM), 1<<20); err != nil {
		t.Fatal(err)
	}
	if out := execIn(t, env.p, id, "command -v python3 && python3 -m pip --version || echo none"); strings.Contains(out, "none") {
		t.Skipf("the sandbox's root has no python3 with pip: %s", out)
	}
	pip := func(indexURL string) provider.ExecResult {
		t.Helper()
		res, err := env.p.Exec(t.Context(), id, provider.ExecRequest{Timeout: 2 * time.Minute, Command: "python3 -m pip download --no-deps --no-cache-dir " +
			"--disable-pip-version-check --retries 0 --timeout 5 --cert /workspace/mirror-ca.pem -d /workspace/dl --index-url " + indexURL + " tinypkg"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := pip("https://pypi.org/simple"); res.ExitCode != 0 {
		t.Fatalf("pip download from pypi.org: %d\n%s", res.ExitCode, res.Output)
	}
	if out := execIn(t, env.p, id, "sha256sum /workspace/dl/"+file); !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Errorf("the downloaded wheel: %q", out)
	}
	execIn(t, env.p, id, "rm -rf /workspace/dl")
	if res := pip("https://pypi.other.example/simple"); res.ExitCode == 0 {
		t.Errorf("pip download from another index passed:\n%s", res.Output)
	}
	var hosts []string
	for _, r := range env.records.of(id) {
		if r.Allowed && r.Proto == egressproxy.ProtoTLS {
			hosts = append(hosts, r.Host+" "+r.Rule)
		}
	}
	if got := strings.Join(hosts, ","); !strings.Contains(got, "pypi.org pypi.org") || !strings.Contains(got, "files.pythonhosted.org *.pythonhosted.org") {
		t.Errorf("records of the download: %s", got)
	}
}

// TestEgressRulesChangeWhileRunning: rules set through the Policy while
// the sandbox runs are in force at its next connection.
func TestEgressRulesChangeWhileRunning(t *testing.T) {
	t.Parallel()
	pub := newTestNet(t, netip.MustParsePrefix("198.18.0.0/16"))
	other := newTestNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	serve(t, pub.name, pub.addr.String()+":80", "pub")
	serve(t, other.name, other.addr.String()+":80", "other")
	env := newEgressEnv(t, map[string]netip.Addr{"pub.example": pub.addr, "other.example": other.addr})
	id := createIn(t, env.p, map[string]any{"network": "allowlist", "allow": []string{"pub.example:80"}})
	if got := reach(t, env.p, id, "pub.example", "other.example"); got["pub.example"] != "pub" || got["other.example"] != "" {
		t.Fatalf("before the change: %v", got)
	}
	rules, err := env.proxy.Parser().Parse([]string{"other.example:80"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	env.rules.Set(id, egressproxy.Rules{Allow: rules})
	got := reach(t, env.p, id, "pub.example", "other.example")
	if got["pub.example"] != "" || got["other.example"] != "other" {
		t.Errorf("after the change: %v; want other.example alone", got)
	}
	t.Logf("the first connections under the new rules were done %v after the change", time.Since(start))
}

// TestEgressServedAfterRestart: the next Tether (a new proxy on other
// ports, a new provider over the same folder) serves the running
// allow-list sandboxes again, with the rules their creates gave.
func TestEgressServedAfterRestart(t *testing.T) {
	t.Parallel()
	pub := newTestNet(t, netip.MustParsePrefix("198.18.0.0/16"))
	serve(t, pub.name, pub.addr.String()+":80", "pub")
	names := map[string]netip.Addr{"pub.example": pub.addr}
	first := newEgressEnv(t, names)
	id := createIn(t, first.p, map[string]any{"network": "allowlist", "allow": []string{"pub.example:80"}})
	if got := reach(t, first.p, id, "pub.example"); got["pub.example"] != "pub" {
		t.Fatalf("before the restart: %v", got)
	}
	if err := first.proxy.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := reach(t, first.p, id, "pub.example"); got["pub.example"] != "" {
		t.Fatalf("with no proxy: %v", got)
	}
	hosts := map[string][]netip.Addr{"pub.example": {pub.addr}}
	rules := &egressproxy.MemoryPolicy{}
	px, err := egressproxy.New(egressproxy.Config{Policy: rules, Lookup: egressproxy.StaticLookup(hosts)})
	if err != nil {
		t.Fatal(err)
	}
	px.Start()
	t.Cleanup(func() { _ = px.Stop(context.Background()) })
	next, err := New(first.dir, noWorkspaceLimit(), WithEgressProxy(px, rules, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := reach(t, next, id, "pub.example"); got["pub.example"] != "pub" {
		t.Errorf("after the restart: %v", got)
	}
}
