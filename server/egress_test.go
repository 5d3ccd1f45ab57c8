package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

// TestEgressProxyServes: with local enabled, serve runs the egress proxy
// and hands it to the provider: an allow-list sandbox made through the
// API resolves a name of EGRESS_HOSTS and reaches its server (an address
// of the host's own, which EGRESS_ALLOW_PRIVATE opens), and nothing its
// list does not name.
func TestEgressProxyServes(t *testing.T) {
	t.Parallel()
	hostIP := hostAddress(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "served %s", r.Host)
	}))
	ln, err := net.Listen("tcp4", hostIP.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	state := harness.ReachableTempDir(t)
	s := start(t, map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "BOOTSTRAP_API_KEY": "k",
		"PROVIDERS": "local", "LOCAL_STATE_DIR": state, "LOCAL_WORKSPACE_MB": "0",
		"EGRESS_HOSTS":         "mirror.example=" + hostIP.String() + ",other.example=" + hostIP.String(),
		"EGRESS_ALLOW_PRIVATE": "true",
	})
	if code, p := s.do(t, http.MethodGet, "/v1/providers", "k", ""); code != http.StatusOK || strings.Contains(fmt.Sprint(p), `"allowlist": unavailable`) {
		t.Fatalf("/v1/providers = %d %v", code, p)
	}
	code, sb := s.do(t, http.MethodPost, "/v1/sandboxes", "k", `{"params":{"network":"allowlist","allow":["mirror.example:`+port+`"]}}`)
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id, _ := sb["id"].(string)
	t.Cleanup(func() {
		if p, err := local.New(state); err == nil {
			_ = p.Destroy(context.Background(), id)
		}
	})
	if code, sb = s.do(t, http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", "k", ""); code != http.StatusOK || sb["state"] != "ready" {
		t.Fatalf("wait for ready = %d %v", code, sb)
	}
	cmd := fmt.Sprintf(`curl -fsS -m 5 http://mirror.example:%[1]s/; echo; curl -fsS -m 5 http://other.example:%[1]s/ 2>/dev/null || echo refused`, port)
	code, res := s.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/exec", "k", fmt.Sprintf(`{"command":%q}`, cmd))
	if want := fmt.Sprintf("served mirror.example:%s\nrefused\n", port); code != http.StatusOK || res["output"] != want {
		t.Errorf("exec = %d %v; want %q", code, res, want)
	}
	if !strings.Contains(s.logs.String(), `"msg":"egress"`) {
		t.Error("the log has no record of the sandbox's connections")
	}
}

// hostAddress is an IPv4 address of the host's, not loopback.
func hostAddress(t *testing.T) netip.Addr {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "10.250.") {
			a, _ := netip.AddrFromSlice(ipn.IP.To4())
			return a
		}
	}
	t.Skip("no IPv4 address on the host but loopback")
	return netip.Addr{}
}
