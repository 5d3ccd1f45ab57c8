package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/egress"
)

// TestEgressRulesAreData drives the egress proxy through a live Tether
// with the local provider: names resolve (EGRESS_HOSTS) to a mirror in a
// network namespace of the test's own, which serves plain HTTP and, for
// one name, HTTPS with a certificate of the test's CA (which Tether
// trusts through SSL_CERT_FILE, as an operator's would be the host's).
//
// It checks that an allow list holds names and wildcards and nothing
// more; that PATCH /v1/sandboxes/{id}/network takes effect within a
// second, is refused whole for bad input, and holds across a kill -9 of
// Tether (the rules are the registry's); that a secret stored through
// /v1/secrets reaches the server as a header while the sandbox holds only
// a placeholder; that the activity records the edit and the
// connections; and that once the owner's lease lapses the credential is
// refused at once, while the sandbox still runs.
func TestEgressRulesAreData(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	mirror := newNamespaceNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	serveIn(t, mirror, ":80", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "mirror "+r.Host)
	}))
	var (
		mu   sync.Mutex
		seen []string
	)
	serveIn(t, mirror, ":443", ca.cert(t, "api.example.test"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "api-ok")
	}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, name := range []string{"pypi.org", "files.pythonhosted.org", "pythonhosted.org", "other.test", "api.example.test"} {
		hosts = append(hosts, name+"="+mirror.addr.String())
	}
	keyBytes := make([]byte, 32)
	_, _ = rand.Read(keyBytes)
	e := setup(t, "EGRESS_HOSTS="+strings.Join(hosts, ","), "SSL_CERT_FILE="+caFile,
		"SECRETS_KEY="+base64.StdEncoding.EncodeToString(keyBytes), "JANITOR_INTERVAL=1m")

	// Secrets: stored, named, never shown.
	const secret = "ghp-E2E-secret-never-inside-0042"
	if code, res := e.do(http.MethodPost, "/v1/secrets", map[string]any{"name": "gh-token", "value": "first"}); code != http.StatusCreated {
		t.Fatalf("POST /v1/secrets = %d %v", code, res)
	}
	if code, res := e.do(http.MethodPost, "/v1/secrets", map[string]any{"name": "gh-token", "value": secret}); code != http.StatusOK || res["value"] != nil {
		t.Fatalf("POST /v1/secrets again = %d %v; want 200 without the value", code, res)
	}
	for _, bad := range []map[string]any{{"name": "no spaces", "value": "v"}, {"name": "ok", "value": "two\nlines"}, {"name": "ok", "value": ""}, {"name": "ok"}} {
		if code, res := e.do(http.MethodPost, "/v1/secrets", bad); code != http.StatusBadRequest {
			t.Errorf("POST /v1/secrets %v = %d %v; want 400", bad, code, res)
		}
	}
	if code, raw := e.raw(http.MethodGet, "/v1/secrets", nil); code != http.StatusOK || !strings.Contains(string(raw), `"gh-token"`) ||
		strings.Contains(string(raw), secret) || strings.Contains(string(raw), `"ok"`) {
		t.Fatalf("GET /v1/secrets = %d %s", code, raw)
	}

	id := e.createReady(map[string]any{"provider": "local", "owner": "egress-agent", "params": map[string]any{
		"network": "allowlist", "allow": []string{"pypi.org", "*.pythonhosted.org", "api.example.test:443"},
		"credentials": []map[string]string{{"host": "api.example.test", "header": "Authorization", "format": "Bearer {secret}", "secret": "gh-token"}},
	}})
	if code, res := e.do(http.MethodPut, "/v1/owners/egress-agent/lease", map[string]any{"ttl_seconds": 600}); code != http.StatusOK {
		t.Fatalf("renew = %d %v", code, res)
	}
	want := map[string]bool{"pypi.org": true, "files.pythonhosted.org": true, "pythonhosted.org": false, "other.test": false}
	checkReach(t, e, id, want)

	// An edit: in force within a second of its answer.
	code, res := e.do(http.MethodPatch, "/v1/sandboxes/"+id+"/network", map[string]any{"allow": []string{"pypi.org", "*.pythonhosted.org", "api.example.test:443", "other.test"}})
	if code != http.StatusOK || res["edited"] != true || len(res["credentials"].([]any)) != 1 {
		t.Fatalf("PATCH network = %d %v", code, res)
	}
	if code, res := e.exec(id, `for i in $(seq 20); do curl -fsS -m 1 http://other.test/ && exit 0; sleep 0.05; done; exit 1`); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("other.test was not reachable within a second of the edit: %d %v", code, res)
	}
	want["other.test"] = true

	// Bad edits are refused whole.
	for _, bad := range []map[string]any{
		{}, {"allow": []string{"http://pypi.org/"}}, {"allow": []string{"ok.test", "-bad-"}},
		{"allow": []string{"pypi.org"}, "credentials": []map[string]string{{"host": "api.example.test", "header": "Authorization", "secret": "missing"}}},
		{"allow": []string{"pypi.org"}, "credentials": []map[string]string{{"host": "api.example.test", "header": "Host", "secret": "gh-token"}}},
		{"allow": []string{"pypi.org"}, "unknown": true},
	} {
		if code, res := e.do(http.MethodPatch, "/v1/sandboxes/"+id+"/network", bad); code != http.StatusBadRequest {
			t.Errorf("PATCH network %v = %d %v; want 400", bad, code, res)
		}
	}
	if code, res := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/network", nil); code != http.StatusOK || len(res["allow"].([]any)) != 4 {
		t.Fatalf("GET network after refused edits = %d %v", code, res)
	}
	plain := e.createReady(map[string]any{"provider": "local"})
	if code, res := e.do(http.MethodPatch, "/v1/sandboxes/"+plain+"/network", map[string]any{"allow": []string{"pypi.org"}}); code != http.StatusBadRequest {
		t.Errorf("PATCH network of a sandbox without an allow list = %d %v; want 400", code, res)
	}

	// The credential: the server gets the secret, the sandbox holds only
	// the placeholder.
	curlAPI := `curl -sS -m 10 -H "Authorization: Bearer PLACEHOLDER" https://api.example.test/`
	if code, res := e.exec(id, curlAPI); code != http.StatusOK || res["output"] != "api-ok" {
		t.Fatalf("%s = %d %v", curlAPI, code, res)
	}
	reversed := []rune(secret)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	if code, res := e.exec(id, `pat=$(printf %s '`+string(reversed)+`' | rev); n=0
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do case "$( (tr '\0' ' ' < "$f") 2>/dev/null)" in *"$pat"*) n=$((n+1));; esac; done
echo "$n"; printf %s "$pat" | grep -rlF -f - /etc /workspace /tmp 2>/dev/null; true`); code != http.StatusOK || res["output"] != "0\n" {
		t.Errorf("the secret is inside the sandbox: %d %v", code, res)
	}

	// kill -9 of Tether: the edited rules and the credential hold.
	e.replica.Kill()
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	checkReach(t, e, id, want)
	if code, res := e.exec(id, curlAPI); code != http.StatusOK || res["output"] != "api-ok" {
		t.Fatalf("after a restart, %s = %d %v", curlAPI, code, res)
	}
	mu.Lock()
	if got := strings.Join(seen, "|"); got != "Bearer "+secret+"|Bearer "+secret {
		t.Errorf("the server saw Authorization %q; want the secret, twice", got)
	}
	mu.Unlock()

	// The activity: the edit, connections allowed by their rules, and
	// refusals; never the secret.
	checkEgressActivity(t, e, id, secret)

	// The owner's lease lapses: the next request with the credential is
	// refused, though the sandbox still runs (the janitor has not come).
	if code, res := e.do(http.MethodPut, "/v1/owners/egress-agent/lease", map[string]any{"ttl_seconds": 1}); code != http.StatusOK {
		t.Fatalf("renew = %d %v", code, res)
	}
	time.Sleep(1500 * time.Millisecond)
	code, res = e.exec(id, `curl -sS -m 10 -o /dev/null -w '%{http_code}' https://api.example.test/`)
	if code != http.StatusOK || res["output"] != "403" {
		t.Fatalf("after the lease lapsed, the credential's request = %d %v; want 403 from the proxy", code, res)
	}
	mu.Lock()
	if len(seen) != 2 {
		t.Errorf("the server saw %d requests; the one after the lapse reached it", len(seen))
	}
	mu.Unlock()
}

// checkReach checks which names the sandbox reaches over plain HTTP.
func checkReach(t *testing.T, e *env, id string, want map[string]bool) {
	t.Helper()
	for name, ok := range want {
		code, res := e.exec(id, "curl -fsS --connect-timeout 3 -m 5 http://"+name+"/")
		reached := code == http.StatusOK && res["exit_code"] == 0.0 && res["output"] == "mirror "+name
		if reached != ok {
			t.Errorf("http://%s/ reached = %v, want %v: %d %v", name, reached, ok, code, res)
		}
	}
}

// checkEgressActivity checks the sandbox's activity holds the edit and
// its connections, allowed and refused, and not the secret.
func checkEgressActivity(t *testing.T, e *env, id, secret string) {
	t.Helper()
	var items []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, raw := e.raw(http.MethodGet, "/v1/sandboxes/"+id+"/activity?limit=500", nil)
		if code != http.StatusOK {
			t.Fatalf("activity = %d %s", code, raw)
		}
		if strings.Contains(string(raw), secret) {
			t.Fatalf("the activity holds the secret: %s", raw)
		}
		var page struct{ Items []map[string]any }
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatal(err)
		}
		items = page.Items
		if hasActivity(items, "egress", "pypi.org", true) && hasActivity(items, "egress", "other.test", false) &&
			hasActivity(items, "egress", "api.example.test", true) && hasActivity(items, "network_update", "", false) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity lacks the edit or the connections: %v", items)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hasActivity(items []map[string]any, kind, host string, allowed bool) bool {
	for _, it := range items {
		if it["kind"] != kind {
			continue
		}
		if kind == "network_update" {
			return strings.Contains(fmt.Sprint(it["network"]), "other.test")
		}
		h, _ := it["host"].(string)
		if strings.Contains(h, host) && it["allowed"] == allowed && (!allowed || it["rule"] != nil) {
			return true
		}
	}
	return false
}

// testCA is a certificate authority of the test's own.
type testCA struct {
	c   *x509.Certificate
	key *ecdsa.PrivateKey
	pem []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e mirror CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{c: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// cert is a server certificate of the CA's for names.
func (ca *testCA) cert(t *testing.T, names ...string) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.c, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// namespaceNet is a network namespace of the test's own, linked to the
// host by a veth pair on a /30 (the host the first address, the
// namespace the second): somewhere "outside" that is not the host.
type namespaceNet struct {
	name string
	addr netip.Addr
}

func newNamespaceNet(t *testing.T, within netip.Prefix) namespaceNet {
	t.Helper()
	var r [8]byte
	_, _ = rand.Read(r[:])
	base := within.Addr().As4()
	slot := binary.BigEndian.Uint32(r[:4]) % (uint32(1) << (30 - within.Bits()))
	var host, addr [4]byte
	binary.BigEndian.PutUint32(host[:], binary.BigEndian.Uint32(base[:])+4*slot+1)
	binary.BigEndian.PutUint32(addr[:], binary.BigEndian.Uint32(base[:])+4*slot+2)
	n := namespaceNet{name: "te" + hex.EncodeToString(r[4:]), addr: netip.AddrFrom4(addr)}
	ip := func(netns, batch string) {
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
	ip("", fmt.Sprintf("netns add %[1]s\nlink add %[1]s type veth peer name eth0 netns %[1]s\naddr add %[2]s/30 dev %[1]s\nlink set %[1]s up\n",
		n.name, netip.AddrFrom4(host)))
	t.Cleanup(func() {
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader("link del " + n.name + "\nnetns del " + n.name + "\n")
		_ = cmd.Run()
	})
	ip(n.name, fmt.Sprintf("link set lo up\naddr add %s/30 dev eth0\nlink set eth0 up\n", n.addr))
	return n
}

// serveIn serves h on port (":80") of the namespace's address, over TLS
// with cert if given, until the test ends.
func serveIn(t *testing.T, n namespaceNet, port string, cert *tls.Certificate, h http.Handler) {
	t.Helper()
	var ln net.Listener
	if err := egress.InNetns(filepath.Join(egress.NetnsDir, n.name), func() (err error) {
		ln, err = net.Listen("tcp4", n.addr.String()+port)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
}

// TestEgressNamedPolicies: a policy a tenant defines once joins the rules
// of the sandboxes that attach it by name, and an edit or a delete of it
// reaches them within a second.
func TestEgressNamedPolicies(t *testing.T) {
	t.Parallel()
	mirror := newNamespaceNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	serveIn(t, mirror, ":80", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "mirror "+r.Host)
	}))
	var hosts []string
	for _, name := range []string{"pypi.org", "files.pythonhosted.org", "other.test", "own.test"} {
		hosts = append(hosts, name+"="+mirror.addr.String())
	}
	e := setup(t, "EGRESS_HOSTS="+strings.Join(hosts, ","))

	for _, bad := range []map[string]any{{"allow": []string{"http://x/"}}, {}, {"allow": []string{"pypi.org"}, "credentials": []map[string]string{{"host": "pypi.org", "secret": "none"}}}} {
		if code, res := e.do(http.MethodPut, "/v1/network-policies/python", bad); code != http.StatusBadRequest {
			t.Errorf("PUT policy %v = %d %v; want 400", bad, code, res)
		}
	}
	if code, res := e.do(http.MethodGet, "/v1/network-policies/python", nil); code != http.StatusNotFound {
		t.Fatalf("a refused policy was stored: %d %v", code, res)
	}
	if code, res := e.do(http.MethodPut, "/v1/network-policies/python", map[string]any{"allow": []string{"pypi.org", "*.pythonhosted.org"}}); code != http.StatusCreated {
		t.Fatalf("PUT policy = %d %v", code, res)
	}
	id := e.createReady(map[string]any{"provider": "local", "params": map[string]any{
		"network": "allowlist", "allow": []string{"own.test"}, "policies": []string{"python"}}})
	checkReach(t, e, id, map[string]bool{"own.test": true, "pypi.org": true, "files.pythonhosted.org": true, "other.test": false})

	// An edit of the policy reaches the sandbox within a second.
	if code, res := e.do(http.MethodPut, "/v1/network-policies/python", map[string]any{"allow": []string{"pypi.org", "other.test"}}); code != http.StatusOK {
		t.Fatalf("PUT policy again = %d %v", code, res)
	}
	if code, res := e.exec(id, `for i in $(seq 20); do curl -fsS -m 1 http://other.test/ && exit 0; sleep 0.05; done; exit 1`); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("other.test was not reachable within a second of the policy's edit: %d %v", code, res)
	}
	checkReach(t, e, id, map[string]bool{"files.pythonhosted.org": false})

	// Deleted: its rules go, the sandbox's own stay.
	if code, _ := e.do(http.MethodDelete, "/v1/network-policies/python", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE policy = %d", code)
	}
	if code, res := e.exec(id, `for i in $(seq 20); do curl -fsS -m 1 http://pypi.org/ >/dev/null 2>&1 || exit 0; sleep 0.05; done; exit 1`); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("pypi.org was still reachable a second after its policy's delete: %d %v", code, res)
	}
	checkReach(t, e, id, map[string]bool{"own.test": true})
	code, res := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/network", nil)
	if code != http.StatusOK || fmt.Sprint(res["policies"]) != "[python]" || fmt.Sprint(res["missing_policies"]) != "[python]" {
		t.Fatalf("GET network after the delete = %d %v", code, res)
	}
	if code, res := e.do(http.MethodPatch, "/v1/sandboxes/"+id+"/network", map[string]any{"allow": []string{"own.test"}, "policies": []string{}}); code != http.StatusOK || fmt.Sprint(res["policies"]) != "[]" {
		t.Fatalf("detaching = %d %v", code, res)
	}
}

// TestEgressEditsAcrossKill9: edits of a sandbox's rules while it sends
// traffic through the egress proxy, cut by a kill -9 of Tether: after the
// restart the rules are the last acknowledged edit's (or the one in
// flight), each edit is in the activity once, and the proxy enforces the
// rules the registry holds.
func TestEgressEditsAcrossKill9(t *testing.T) {
	t.Parallel()
	mirror := newNamespaceNet(t, netip.MustParsePrefix("198.19.0.0/16"))
	serveIn(t, mirror, ":80", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "mirror "+r.Host)
	}))
	e := setup(t, "EGRESS_HOSTS=pypi.org="+mirror.addr.String()+",other.test="+mirror.addr.String())
	id := e.createReady(map[string]any{"provider": "local", "params": map[string]any{"network": "allowlist", "allow": []string{"pypi.org", "v0.test"}}})
	if code, res := e.exec(id, `nohup sh -c 'while :; do curl -s -m 1 -o /dev/null http://pypi.org/; curl -s -m 1 -o /dev/null http://other.test/; done' >/dev/null 2>&1 &`); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("starting the traffic = %d %v", code, res)
	}

	var (
		acked, tried atomic.Int64
		stop         = make(chan struct{})
		wg           sync.WaitGroup
	)
	wg.Go(func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tried.Store(i)
			code, _, err := e.client.Do(http.MethodPatch, e.replica.URL()+"/v1/sandboxes/"+id+"/network",
				map[string]any{"allow": []string{"pypi.org", fmt.Sprintf("v%d.test", i)}})
			if err != nil || code != http.StatusOK {
				return // the kill
			}
			acked.Store(i)
		}
	})
	time.Sleep(1500 * time.Millisecond)
	e.replica.Kill()
	close(stop)
	wg.Wait()
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	if acked.Load() < 3 {
		t.Fatalf("only %d edits before the kill: the test proves little", acked.Load())
	}

	code, res := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/network", nil)
	if code != http.StatusOK {
		t.Fatalf("GET network = %d %v", code, res)
	}
	allow := fmt.Sprint(res["allow"])
	if allow != fmt.Sprintf("[pypi.org v%d.test]", acked.Load()) && allow != fmt.Sprintf("[pypi.org v%d.test]", tried.Load()) {
		t.Fatalf("after the kill the rules are %s; the last acknowledged edit was v%d, the last tried v%d", allow, acked.Load(), tried.Load())
	}
	// Each edit once in the activity, every page of it read.
	var edits []string
	for cursor := ""; ; {
		code, raw := e.raw(http.MethodGet, "/v1/sandboxes/"+id+"/activity?limit=500"+cursor, nil)
		if code != http.StatusOK {
			t.Fatalf("activity = %d %s", code, raw)
		}
		var page struct {
			Items      []map[string]any
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			if it["kind"] == "network_update" {
				edits = append(edits, fmt.Sprint(it["network"]))
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *page.NextCursor
	}
	for i := int64(1); i <= acked.Load(); i++ {
		want := fmt.Sprintf(`{"allow":["pypi.org","v%d.test"]}`, i)
		if n := countOf(edits, want); n != 1 {
			t.Errorf("edit v%d is in the activity %d times", i, n)
		}
	}
	if int64(len(edits)) > tried.Load() {
		t.Errorf("%d edits recorded of %d tried", len(edits), tried.Load())
	}
	// The restarted proxy enforces them.
	checkReach(t, e, id, map[string]bool{"pypi.org": true, "other.test": false})
}

func countOf(items []string, s string) int {
	n := 0
	for _, it := range items {
		if it == s {
			n++
		}
	}
	return n
}
