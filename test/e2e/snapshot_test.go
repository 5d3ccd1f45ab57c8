package e2e

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitSnapshotAfterOwnerKilled: an owner process (a real client,
// heartbeating) whose sandbox was created with on_end snapshot is
// SIGKILLed; the sandbox ends owner_expired, its /workspace is snapshotted
// before its release destroys it, and a new sandbox started from that
// snapshot has the owner's files. Then the snapshot API's round trip on
// the same real sandboxes: a manual snapshot, its list, delete.
func TestExitSnapshotAfterOwnerKilled(t *testing.T) {
	t.Parallel()
	e := setup(t, "DEFAULT_OWNER_TTL=60s", "EXIT_SNAPSHOT_TIMEOUT=60s")
	owner := "agent-snap-" + strings.TrimPrefix(marker(t), "sleep ")
	id := e.createReady(map[string]any{"provider": "local", "owner": owner, "on_end": "snapshot",
		"params": map[string]any{"workspace_mb": 64}})
	code, out := e.exec(id, "mkdir -p /workspace/notes && echo 'the agent was here' > /workspace/notes/a.txt && "+
		"head -c 300000 /dev/urandom > /workspace/blob && sha256sum /workspace/blob | cut -d' ' -f1")
	if code != http.StatusOK || out["exit_code"] != float64(0) {
		t.Fatalf("write the owner's files: %d %v", code, out)
	}
	sum := strings.TrimSpace(out["output"].(string))
	ownerProc := e.startOwner(owner, 3*time.Second)
	// The owner's heartbeats make its lease 3s; kill it.
	if err := ownerProc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	sb := e.waitFor(id, "released", released)
	if sb["reason"] != "owner_expired" {
		t.Fatalf("reason = %v, want owner_expired", sb["reason"])
	}
	t.Logf("ended and released %s after the owner's kill", time.Since(killed).Round(time.Millisecond))
	code, list := e.do(http.MethodGet, "/v1/snapshots?sandbox="+id, nil)
	items, _ := list["items"].([]any)
	if code != http.StatusOK || len(items) != 1 {
		t.Fatalf("snapshots of the sandbox = %d %v, want one", code, list)
	}
	snap := items[0].(map[string]any)
	if snap["kind"] != "exit" || snap["state"] != "ready" {
		t.Fatalf("exit snapshot = %v", snap)
	}
	snapID := snap["id"].(string)

	restored := e.createReady(map[string]any{"provider": "local", "from_snapshot": snapID})
	code, out = e.exec(restored, "cat /workspace/notes/a.txt && sha256sum /workspace/blob | cut -d' ' -f1 && echo more >> /workspace/notes/a.txt")
	if code != http.StatusOK || out["exit_code"] != float64(0) || out["output"] != "the agent was here\n"+sum+"\n" {
		t.Fatalf("the restored sandbox's files: %d %v", code, out)
	}
	_, got := e.do(http.MethodGet, "/v1/sandboxes/"+restored, nil)
	if got["from_snapshot"] != snapID {
		t.Errorf("from_snapshot = %v", got["from_snapshot"])
	}

	// A manual snapshot of the restored sandbox, waited for, then deleted:
	// its data goes at the next reconciliation.
	code, manual := e.do(http.MethodPost, "/v1/sandboxes/"+restored+"/snapshots?wait=60s", nil)
	if code != http.StatusAccepted || manual["state"] != "ready" {
		t.Fatalf("manual snapshot = %d %v", code, manual)
	}
	if code, _ := e.do(http.MethodDelete, "/v1/snapshots/"+manual["id"].(string), nil); code != http.StatusAccepted {
		t.Fatalf("delete snapshot = %d", code)
	}
	code, bad := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "from_snapshot": manual["id"]})
	if code != http.StatusConflict || bad["code"] != "SNAPSHOT_NOT_READY" {
		t.Errorf("create from a deleted snapshot = %d %v", code, bad)
	}
}
