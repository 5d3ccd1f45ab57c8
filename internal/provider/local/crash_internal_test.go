package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// TestCrashBeforeThePidIsRecorded: Tether dies after bwrap started the
// sandbox but before meta.json records its pid. The sandbox must still be
// found (List) and destroyed (Destroy) by the next Tether, even after its
// folder is gone.
func TestCrashBeforeThePidIsRecorded(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	first, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.problem != "" {
		t.Fatalf("local provider unavailable: %s", first.problem)
	}
	id := provider.NewSandboxID()
	if err := os.MkdirAll(filepath.Join(dir, id, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := first.writeMeta(meta{SandboxID: id, CreatedAt: time.Now()}); err != nil { // no pid yet
		t.Fatal(err)
	}
	if err := writeSandboxEtc(filepath.Join(dir, id), legacyUID, Limits{}); err != nil {
		t.Fatal(err)
	}
	pid, err := first.start(id, legacyUID, Params{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // reap the first provider's child whatever happens
		_ = first.Destroy(context.Background(), id)
	})

	// The next Tether: a fresh provider over the same folder.
	next, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := next.List(t.Context())
	if err != nil || len(inv) != 1 || inv[0].SandboxID != id {
		t.Fatalf("List = %+v, %v; want the half-recorded sandbox", inv, err)
	}
	// Even with its folder gone, the running sandbox is still listed.
	if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
		t.Fatal(err)
	}
	inv, err = next.List(t.Context())
	if err != nil || len(inv) != 1 || inv[0].SandboxID != id || inv[0].Defunct {
		t.Fatalf("List without the folder = %+v, %v; want the running sandbox", inv, err)
	}
	if err := next.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if processRunning(pid) {
		t.Errorf("the sandbox's init %d survived Destroy", pid)
	}
	if inv, _ := next.List(t.Context()); len(inv) != 0 {
		t.Errorf("List after Destroy = %+v", inv)
	}
}

// TestCrashBetweenTheUIDClaimAndItsRecord: Tether dies after claiming a
// sandbox's uid but before meta.json records it. The next Tether's destroy
// must free the claim, not leave it to be taken back some day.
func TestCrashBetweenTheUIDClaimAndItsRecord(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	p, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.problem != "" {
		t.Fatalf("local provider unavailable: %s", p.problem)
	}
	id := provider.NewSandboxID()
	folder := p.sandboxDir(id)
	if err := os.MkdirAll(filepath.Join(folder, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	uid, err := p.uids.Claim(folder)
	if err != nil {
		t.Fatal(err)
	}
	claim := filepath.Join("/run/tether-uids", strconv.Itoa(uid))
	t.Cleanup(func() { _ = os.Remove(claim) })
	next, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(claim); err == nil && target == folder {
		t.Errorf("uid %d is still claimed by the destroyed sandbox's folder", uid)
	}
}
