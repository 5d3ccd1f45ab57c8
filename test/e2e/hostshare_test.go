package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/test/harness"
)

// cgroupParent names a parent control group of the test's own for a
// replica's sandboxes (LOCAL_CGROUP_PARENT), removed once the replica and
// its sandboxes are gone.
func cgroupParent(t *testing.T) string {
	t.Helper()
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
	return parent
}

// TestHostShareRefusesCreates: once the local sandboxes on a node reserve
// the share (LOCAL_HOST_PIDS and LOCAL_TENANT_PIDS here), the next create
// fails at once with QUOTA_EXCEEDED saying why, and creates fit again once
// a sandbox ends. Its sandboxes live in a parent control group of the
// test's own.
func TestHostShareRefusesCreates(t *testing.T) {
	t.Parallel()
	e := setup(t, "LOCAL_HOST_PIDS=600", "LOCAL_TENANT_PIDS=600", "LOCAL_CGROUP_PARENT="+cgroupParent(t))
	first := e.createReady(map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	e.createReady(map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "params": map[string]any{"pids": 256}})
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	failed := e.waitFor(sb["id"].(string), "failed", func(sb map[string]any) bool { return sb["state"] == "failed" })
	msg, _ := failed["error"].(string)
	if !strings.HasPrefix(msg, "QUOTA_EXCEEDED") || !strings.Contains(msg, "processes: the tenant holds 512 of its 600 here (LOCAL_TENANT_PIDS), this create asks for 256") {
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

// TestTenantSharesThroughTheAPI is issue 44's attack on a Tether with the
// default shares: tenant A creates the largest sandboxes it may ask for,
// then smaller and smaller ones, until even the smallest fails; each
// failure is QUOTA_EXCEEDED naming A's own share, A's next big create
// among them. Tenant B's create of the default limits is then ready. A
// workspace of three quarters of the free disk (the 47493 MiB) is
// refused at create.
func TestTenantSharesThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, "LOCAL_CGROUP_PARENT="+cgroupParent(t))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, e.replica.Env("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, otherKey, err := store.New(pool).CreateAPIKey(ctx, "share-tenant-b", "hostshare-test")
	if err != nil {
		t.Fatalf("a key for tenant B: %v", err)
	}
	created, bigRefused := 0, false
	for pids, mem := 4096, 8192; ; pids, mem = max(16, pids/2), max(32, mem/2) {
		for range 64 {
			code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "params": map[string]any{"pids": pids, "memory_mb": mem}})
			if code == http.StatusBadRequest {
				break // past the maxima on a small host
			}
			if code != http.StatusAccepted {
				t.Fatalf("create = %d %v", code, sb)
			}
			_, sb = e.do(http.MethodGet, "/v1/sandboxes/"+sb["id"].(string)+"?wait=60s", nil)
			if sb["state"] == "ready" {
				created++
				continue
			}
			msg, _ := sb["error"].(string)
			if sb["state"] != "failed" || !strings.HasPrefix(msg, "QUOTA_EXCEEDED: this create would pass the tenant's share") || !strings.Contains(msg, "LOCAL_TENANT_") {
				t.Fatalf("A's create of %d processes and %d MiB: %v; want failed with QUOTA_EXCEEDED naming A's share", pids, mem, sb)
			}
			bigRefused = bigRefused || mem == 8192
			break
		}
		if pids == 16 && mem == 32 {
			break
		}
	}
	if created == 0 || !bigRefused {
		t.Fatalf("tenant A created %d sandboxes; its big create refused: %v", created, bigRefused)
	}
	b := harness.Client{Key: otherKey}
	code, sb, err := b.Do(http.MethodPost, e.replica.URL()+"/v1/sandboxes", map[string]any{"provider": "local"})
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("B's create = %d %v %v", code, sb, err)
	}
	bID := sb["id"].(string)
	_, sb, _ = b.Do(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+bID+"?wait=60s", nil)
	if sb["state"] != "ready" {
		t.Errorf("B's default create beside A's %d sandboxes: %v; want ready", created, sb)
	}
	ws := hostos.FreeMB(e.stateDir)
	if code, body := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "params": map[string]any{"workspace_mb": ws}}); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(body["detail"]), "params.workspace_mb must be between") {
		t.Errorf("a create of a %d MiB workspace, three quarters of the free disk = %d %v; want 400", ws, code, body)
	}
	// B's sandbox ends here: the replica's cleanup ends A's alone.
	if code, _, _ := b.Do(http.MethodDelete, e.replica.URL()+"/v1/sandboxes/"+bID, nil); code != http.StatusAccepted {
		t.Errorf("deleting B's sandbox = %d", code)
	}
	_, sb, _ = b.Do(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+bID+"?wait=30s&until=released", nil)
	if sb["released"] != true {
		t.Errorf("B's sandbox not released: %v", sb)
	}
}

// TestSnapshotPastTheDiskShareFails: a snapshot counts against its
// tenant's share of the node's disk (LOCAL_TENANT_WORKSPACE_MB, 600 MiB
// here): beside a 256 MiB workspace holding 200 MiB and one snapshot of
// it, a second snapshot is accepted and then fails, its error saying it
// would pass the tenant's share.
func TestSnapshotPastTheDiskShareFails(t *testing.T) {
	t.Parallel()
	e := setup(t, "LOCAL_TENANT_WORKSPACE_MB=600")
	id := e.createReady(map[string]any{"provider": "local", "params": map[string]any{"workspace_mb": 256}})
	if code, out := e.exec(id, "head -c 200M /dev/urandom >/workspace/data && sync"); code != http.StatusOK || out["exit_code"] != float64(0) {
		t.Fatalf("writing 200 MiB: %d %v", code, out)
	}
	code, first := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/snapshots?wait=60s", nil)
	if code != http.StatusAccepted || first["state"] != "ready" {
		t.Fatalf("first snapshot = %d %v", code, first)
	}
	code, second := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/snapshots?wait=60s", nil)
	msg, _ := second["error"].(string)
	if code != http.StatusAccepted || second["state"] != "failed" ||
		!strings.HasPrefix(msg, "QUOTA_EXCEEDED: this snapshot would pass the tenant's share of this node's local sandboxes; disk (workspaces and snapshots): the tenant holds") ||
		!strings.Contains(msg, "of its 600 MiB here (LOCAL_TENANT_WORKSPACE_MB)") {
		t.Fatalf("second snapshot = %d %v; want failed with QUOTA_EXCEEDED naming the tenant's disk share", code, second)
	}
	t.Logf("the second snapshot failed: %s", msg)
}
