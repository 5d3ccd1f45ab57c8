package server

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestNodeIdentity: the default node id is stable for a state folder and
// differs between two on one host; the default node URL is the listening
// address, loopback for an unspecified host; a bad NODE_URL is refused.
func TestNodeIdentity(t *testing.T) {
	t.Parallel()
	a, again, b := defaultNodeID("host", "/var/lib/tether"), defaultNodeID("host", "/var/lib/tether"), defaultNodeID("host", "/srv/other")
	if a != again || a == b || !strings.HasPrefix(a, "host-") {
		t.Fatalf("node ids %q, %q, %q: want the first two equal, the third different, all host-...", a, again, b)
	}
	for _, tc := range []struct{ configured, listen, want string }{
		{"", "0.0.0.0:8080", "http://127.0.0.1:8080"},
		{"", "[::]:8080", "http://127.0.0.1:8080"},
		{"", "10.1.2.3:9000", "http://10.1.2.3:9000"},
		{"https://node-a.internal:8443", "0.0.0.0:8443", "https://node-a.internal:8443"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := nodeURL(tc.configured, addr); got != tc.want {
			t.Errorf("nodeURL(%q, %s) = %q, want %q", tc.configured, tc.listen, got, tc.want)
		}
	}
	for _, bad := range []string{"10.0.0.1:8080", "ftp://x", "http://", "http://10.0.0.1:8080/prefix", "http://10.0.0.1:8080?a=b", "http://u:p@10.0.0.1"} {
		_, err := loadConfig(func(n string) string {
			switch n {
			case "DATABASE_URL":
				return "postgres://x@127.0.0.1/tether"
			case "NODE_URL":
				return bad
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "NODE_URL") {
			t.Errorf("NODE_URL=%q: err = %v, want it refused", bad, err)
		}
	}
}

// TestStickyNodeID: the first start keeps its node id in the state folder;
// later starts use it whatever the host is called by then.
func TestStickyNodeID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/state"
	first, err := stickyNodeID(dir, "host-a-1234")
	if err != nil || first != "host-a-1234" {
		t.Fatalf("first start: %q, %v", first, err)
	}
	again, err := stickyNodeID(dir, "renamed-host-1234")
	if err != nil || again != "host-a-1234" {
		t.Fatalf("after a rename: %q, %v; want the kept id", again, err)
	}
	if err := os.WriteFile(dir+"/node-id", []byte("not a node id!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := stickyNodeID(dir, "x"); err == nil {
		t.Fatal("a broken node-id file was taken")
	}
}
