package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostShareRefusesCreates: once the local sandboxes on a node reserve
// the host share (LOCAL_HOST_PIDS here), the next create fails at once
// with QUOTA_EXCEEDED saying why, and creates fit again once a sandbox
// ends. Its sandboxes live in a parent control group of the test's own.
func TestHostShareRefusesCreates(t *testing.T) {
	t.Parallel()
	var b [4]byte
	_, _ = rand.Read(b[:])
	parent := "tether-e2e-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { // after the replica and its sandboxes
		for _, pattern := range []string{"/sys/fs/cgroup/*/" + parent, "/sys/fs/cgroup/*/*/*/" + parent, "/sys/fs/cgroup/" + parent} {
			dirs, _ := filepath.Glob(pattern)
			for _, d := range dirs {
				_ = os.Remove(filepath.Join(d, "keepers"))
				if err := os.Remove(d); err != nil {
					t.Errorf("removing the test's control group: %v", err)
				}
			}
		}
	})
	e := setup(t, "LOCAL_HOST_PIDS=600", "LOCAL_CGROUP_PARENT="+parent)
	first := e.createReady(map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	e.createReady(map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	failed := e.waitFor(sb["id"].(string), "failed", func(sb map[string]any) bool { return sb["state"] == "failed" })
	msg, _ := failed["error"].(string)
	if !strings.HasPrefix(msg, "QUOTA_EXCEEDED") || !strings.Contains(msg, "processes (512 reserved of 600; this create asks for 256)") {
		t.Errorf("the third create failed with %q; want QUOTA_EXCEEDED naming the processes reserved", msg)
	}
	// Past the share, asking is refused at once.
	if code, body := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "params": map[string]any{"pids": 601}}); code != http.StatusBadRequest {
		t.Errorf("a create asking for more than the share = %d %v; want 400", code, body)
	}
	if code, _ := e.do(http.MethodDelete, "/v1/sandboxes/"+first, nil); code != http.StatusAccepted {
		t.Fatalf("delete = %d", code)
	}
	e.waitFor(first, "released", released)
	e.createReady(map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
}
