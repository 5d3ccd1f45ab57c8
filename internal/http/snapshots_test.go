package http_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/provider/sim"
)

type snapshotJSON struct {
	ID              string  `json:"id"`
	State           string  `json:"state"`
	Kind            string  `json:"kind"`
	SourceSandboxID string  `json:"source_sandbox_id"`
	Provider        string  `json:"provider"`
	SizeBytes       int64   `json:"size_bytes"`
	Error           *string `json:"error"`
	ExpiresAt       *string `json:"expires_at"`
}

type snapshotList struct {
	Items      []snapshotJSON `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

// readySandbox creates a sim sandbox and waits for it to be ready.
func (b *bundle) readySandbox(t *testing.T, key string, body map[string]any) sandboxJSON {
	t.Helper()
	sb := b.create(t, key, body)
	var got sandboxJSON
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=20s", nil, as(key))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &got)
	if got.State != "ready" {
		t.Fatalf("sandbox %s is %s, want ready", sb.ID, got.State)
	}
	return got
}

// TestSnapshotsOverHTTP: a snapshot is taken, listed, read, restored from
// and deleted, each the documented way, with the retention setting its
// expires_at.
func TestSnapshotsOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor(), withConfig(func(c *httpapi.Config) { c.SnapshotRetention = 3600e9 }))
	sb := b.readySandbox(t, keyA, map[string]any{"params": map[string]any{"snapshot_bytes": 777}})
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots?wait=20s", nil, as(keyA))
	wantStatus(t, r, http.StatusAccepted)
	var sn snapshotJSON
	r.decode(t, &sn)
	if sn.State != "ready" || sn.SizeBytes != 777 || sn.Kind != "manual" || sn.SourceSandboxID != sb.ID || sn.ExpiresAt == nil {
		t.Fatalf("snapshot?wait = %+v", sn)
	}
	if loc := r.Header.Get("Location"); loc != "/v1/snapshots/"+sn.ID {
		t.Errorf("Location = %q", loc)
	}
	var list snapshotList
	b.do(t, http.MethodGet, "/v1/snapshots?sandbox="+sb.ID, nil, as(keyA)).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != sn.ID {
		t.Errorf("list = %+v", list)
	}
	b.do(t, http.MethodGet, "/v1/snapshots", nil, as(keyB)).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("another tenant lists %d snapshots", len(list.Items))
	}
	wantStatus(t, b.do(t, http.MethodGet, "/v1/snapshots/"+sn.ID, nil, as(keyA)), http.StatusOK)

	from := b.create(t, keyA, map[string]any{"from_snapshot": sn.ID})
	if got := b.get(t, keyA, from.ID); deref(got.FromSnapshot) != sn.ID {
		t.Errorf("from_snapshot = %v", deref(got.FromSnapshot))
	}
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/snapshots/"+sn.ID, nil, as(keyA)), http.StatusAccepted)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/snapshots/"+sn.ID, nil, as(keyA)), http.StatusOK)
	b.do(t, http.MethodGet, "/v1/snapshots", nil, as(keyA)).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("a deleted snapshot is listed: %+v", list.Items)
	}
}

// TestSnapshotBadInput: every bad snapshot request, and every bad
// from_snapshot, is its documented problem, and writes nothing.
func TestSnapshotBadInput(t *testing.T) {
	t.Parallel()
	other, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, withExecutor(), withProvider(snapSim{other, "sim-c"}), withProvider(noSnapshots{other}), withConfig(func(c *httpapi.Config) { c.SnapshotMaxPerTenant = 2 }))
	failing := b.readySandbox(t, keyA, map[string]any{"params": map[string]any{"fail": "snapshot"}})
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+failing.ID+"/snapshots?wait=20s", nil, as(keyA))
	var failed snapshotJSON
	r.decode(t, &failed)
	if failed.State != "failed" || failed.Error == nil {
		t.Fatalf("a refused snapshot = %+v", failed)
	}
	ended := b.readySandbox(t, keyA, map[string]any{})
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+ended.ID, nil, as(keyA)), http.StatusAccepted)
	ok := b.readySandbox(t, keyA, map[string]any{})
	var good snapshotJSON
	b.do(t, http.MethodPost, "/v1/sandboxes/"+ok.ID+"/snapshots?wait=20s", nil, as(keyA)).decode(t, &good)
	if good.State != "ready" {
		t.Fatalf("snapshot = %+v", good)
	}
	// Let the executor settle (the ended sandbox's release) before counting.
	eventually(t, 20e9, "the ended sandbox released", func() bool { return b.get(t, keyA, ended.ID).Released })
	before := b.counts(t)

	snap := func(id string) *response {
		return b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/snapshots", nil, as(keyA))
	}
	wantProblem(t, snap(domain.NewID()), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+ok.ID+"/snapshots", nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	if p := wantProblem(t, snap(ended.ID), http.StatusConflict, "SANDBOX_STATE_CONFLICT"); p.State != "terminated" {
		t.Errorf("snapshot of a terminated sandbox: state %q", p.State)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+ok.ID+"/snapshots?wait=soon", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("bad snapshot requests wrote rows:\nbefore %s\nafter  %s", before, after)
	}
	// The quota: two creating or ready snapshots (the failed one is not counted).
	b.do(t, http.MethodPost, "/v1/sandboxes/"+ok.ID+"/snapshots?wait=20s", nil, as(keyA))
	before = b.counts(t)
	wantProblem(t, snap(ok.ID), http.StatusTooManyRequests, "QUOTA_EXCEEDED")

	get := func(path string, key string) *response { return b.do(t, http.MethodGet, path, nil, as(key)) }
	wantProblem(t, get("/v1/snapshots/"+domain.NewSnapshotID(), keyA), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, get("/v1/snapshots/nope", keyA), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, get("/v1/snapshots/"+good.ID, keyB), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, get("/v1/snapshots?cursor=zzz", keyA), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, get("/v1/snapshots?sandbox=nope", keyA), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, get("/v1/snapshots?limit=0", keyA), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/snapshots/"+good.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	create := func(body map[string]any, key string) *response {
		return b.do(t, http.MethodPost, "/v1/sandboxes", body, as(key))
	}
	wantProblem(t, create(map[string]any{"from_snapshot": domain.NewSnapshotID()}, keyA), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, create(map[string]any{"from_snapshot": "snp_bad"}, keyA), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, create(map[string]any{"from_snapshot": good.ID}, keyB), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, create(map[string]any{"from_snapshot": failed.ID}, keyA), http.StatusConflict, "SNAPSHOT_NOT_READY")
	wantProblem(t, create(map[string]any{"from_snapshot": good.ID, "provider": "sim-c"}, keyA), http.StatusUnprocessableEntity, "SNAPSHOT_PROVIDER_MISMATCH")
	wantProblem(t, create(map[string]any{"on_end": "later"}, keyA), http.StatusBadRequest, "INVALID_REQUEST")
	wantProblem(t, create(map[string]any{"on_end": "snapshot", "provider": "other"}, keyA), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, create(map[string]any{"from_snapshot": good.ID, "provider": "other"}, keyA), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, create(map[string]any{"from_snapshot": good.ID, "pool": "p"}, keyA), http.StatusBadRequest, "INVALID_REQUEST")
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/snapshots/"+failed.ID, nil, as(keyA)), http.StatusAccepted)
	wantProblem(t, create(map[string]any{"from_snapshot": failed.ID}, keyA), http.StatusConflict, "SNAPSHOT_NOT_READY")
	after := b.counts(t)
	// The one delete that succeeded changed no row count (a snapshot is
	// marked deleted) but wrote its event.
	before["sandbox_events"]++
	if !after.equal(before) {
		t.Errorf("bad input wrote rows:\nbefore %s\nafter  %s", before, after)
	}
}

// snapSim is a sim under another name, snapshots included.
type snapSim struct {
	*sim.Provider
	name string
}

func (s snapSim) Name() string { return s.name }

// noSnapshots is a provider without the Snapshotter capability, under the
// name "other".
type noSnapshots struct{ domain.Provider }

func (noSnapshots) Name() string { return "other" }

// TestSnapshotNotSupported: a provider without snapshots is 501.
func TestSnapshotNotSupported(t *testing.T) {
	t.Parallel()
	simP, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, withProvider(noSnapshots{simP}))
	sb := b.create(t, keyA, map[string]any{"provider": "other"})
	before := b.counts(t)
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots", nil, as(keyA)), http.StatusNotImplemented, "NOT_SUPPORTED")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "other", "from_snapshot": domain.NewSnapshotID()}, as(keyA)),
		http.StatusNotImplemented, "NOT_SUPPORTED")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("wrote rows: %s → %s", before, after)
	}
}

// memSim is a sim that answers memory snapshots with its workspace
// snapshots, for the API's plumbing: that the request reaches the
// provider's SnapshotMemory, and the snapshot says memory. The real thing
// (microvm's) is checked end to end in test/e2e.
type memSim struct {
	*sim.Provider
	calls *atomic.Int32
}

func (m memSim) Name() string { return "memsim" }

func (m memSim) SnapshotMemory(ctx context.Context, sandboxID, snapshotID string) (int64, error) {
	m.calls.Add(1)
	return m.Snapshot(ctx, sandboxID, snapshotID)
}

// TestMemorySnapshotRequests: {"memory": true} reaches a provider that
// takes memory snapshots and is shown in the snapshot; one that cannot is
// 501, a bad body 400, and neither writes anything.
func TestMemorySnapshotRequests(t *testing.T) {
	t.Parallel()
	other, err := sim.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	calls := &atomic.Int32{}
	b := setup(t, withExecutor(), withProvider(memSim{other, calls}))
	plain := b.readySandbox(t, keyA, map[string]any{})
	mem := b.readySandbox(t, keyA, map[string]any{"provider": "memsim"})
	before := b.counts(t)
	snap := func(id string, body any) *response {
		return b.do(t, http.MethodPost, "/v1/sandboxes/"+id+"/snapshots?wait=20s", body, as(keyA))
	}
	if p := wantProblem(t, snap(plain.ID, map[string]any{"memory": true}), http.StatusNotImplemented, "NOT_SUPPORTED"); !strings.Contains(p.Detail, "memory") {
		t.Errorf("501 says %q, want it to name memory snapshots", p.Detail)
	}
	for _, body := range []string{`{"memory":"yes"}`, `{"memroy":true}`, `[true]`, `{"memory":true}{}`, `nul`} {
		wantProblem(t, snap(mem.ID, body), http.StatusBadRequest, "INVALID_REQUEST")
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("refused memory snapshot requests wrote rows:\nbefore %s\nafter  %s", before, after)
	}

	var got struct {
		snapshotJSON
		Memory bool `json:"memory"`
	}
	r := snap(mem.ID, map[string]any{"memory": true})
	wantStatus(t, r, http.StatusAccepted)
	r.decode(t, &got)
	if got.State != "ready" || !got.Memory || calls.Load() != 1 {
		t.Errorf("a memory snapshot = %+v after %d SnapshotMemory calls, want ready, memory, one call", got, calls.Load())
	}
	for _, body := range []any{nil, map[string]any{"memory": false}} {
		got.Memory = true
		r := snap(mem.ID, body)
		wantStatus(t, r, http.StatusAccepted)
		r.decode(t, &got)
		if got.Memory || calls.Load() != 1 {
			t.Errorf("snapshot with body %v: memory %v after %d SnapshotMemory calls, want a workspace snapshot", body, got.Memory, calls.Load())
		}
	}
	var prov struct {
		Items []struct {
			Name         string `json:"name"`
			Capabilities struct {
				MemorySnapshots bool `json:"memory_snapshots"`
			} `json:"capabilities"`
		} `json:"items"`
	}
	b.do(t, http.MethodGet, "/v1/providers", nil, as(keyA)).decode(t, &prov)
	for _, p := range prov.Items {
		if p.Capabilities.MemorySnapshots != (p.Name == "memsim") {
			t.Errorf("provider %s: memory_snapshots %v", p.Name, p.Capabilities.MemorySnapshots)
		}
	}
}
