package http_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestOwnerLeaseAndRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	// An owner nobody named: 404, nothing written.
	wantProblem(t, b.do(t, http.MethodPut, "/v1/owners/agent-1/lease", map[string]any{"ttl_seconds": 60}), http.StatusNotFound, "NOT_FOUND")
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("a 404 heartbeat wrote rows: %s -> %s", before, after)
	}

	x := b.create(t, keyA, map[string]any{"owner": "agent-1"})
	y := b.create(t, keyA, map[string]any{"owner": "agent-1"})
	other := b.create(t, keyA, map[string]any{"owner": "agent-2"})

	// Another tenant's owner of the same name does not exist for tenant B.
	wantProblem(t, b.do(t, http.MethodPut, "/v1/owners/agent-1/lease", map[string]any{"ttl_seconds": 60}, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	for _, body := range []any{
		map[string]any{"ttl_seconds": 0},
		map[string]any{"ttl_seconds": -1},
		map[string]any{"ttl_seconds": 86401},
		map[string]any{},
		map[string]any{"ttl_seconds": "60"},
	} {
		p := wantProblem(t, b.do(t, http.MethodPut, "/v1/owners/agent-1/lease", body), http.StatusBadRequest, "INVALID_REQUEST")
		if !strings.Contains(p.Detail, "ttl_seconds") {
			t.Errorf("heartbeat %v: detail %q does not name ttl_seconds", body, p.Detail)
		}
	}
	wantProblem(t, b.do(t, http.MethodPut, "/v1/owners/bad%20name/lease", map[string]any{"ttl_seconds": 60}), http.StatusBadRequest, "INVALID_REQUEST")

	start := time.Now()
	r := b.do(t, http.MethodPut, "/v1/owners/agent-1/lease", map[string]any{"ttl_seconds": 120})
	wantStatus(t, r, http.StatusOK)
	var lease struct {
		Owner     string    `json:"owner"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	r.decode(t, &lease)
	if lease.Owner != "agent-1" || lease.ExpiresAt.Before(start.Add(119*time.Second)) || lease.ExpiresAt.After(time.Now().Add(121*time.Second)) {
		t.Errorf("lease = %+v, want agent-1 until about now+120s", lease)
	}

	r = b.do(t, http.MethodDelete, "/v1/owners/agent-1", nil)
	wantStatus(t, r, http.StatusAccepted)
	var released struct {
		Ended int      `json:"sandboxes_ended"`
		IDs   []string `json:"sandbox_ids"`
	}
	r.decode(t, &released)
	if released.Ended != 2 || len(released.IDs) != 2 {
		t.Errorf("owner release = %+v, want 2 sandboxes", released)
	}
	for _, id := range []string{x.ID, y.ID} {
		if sb := b.get(t, keyA, id); sb.State != "cancelled" || deref(sb.Reason) != "owner_released" {
			t.Errorf("%s = %s/%v, want cancelled/owner_released", id, sb.State, deref(sb.Reason))
		}
	}
	if sb := b.get(t, keyA, other.ID); sb.State != "requested" {
		t.Errorf("another owner's sandbox = %s", sb.State)
	}
	// Ending again, or ending an owner with no sandboxes, succeeds.
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/agent-1", nil), http.StatusAccepted)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/nobody", nil), http.StatusAccepted)
	// Tenant B cannot end tenant A's owner.
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/agent-2", nil, as(keyB)), http.StatusAccepted)
	if sb := b.get(t, keyA, other.ID); sb.State != "requested" {
		t.Errorf("tenant B ended tenant A's owner: %s", sb.State)
	}
}

func TestRenew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, map[string]any{"ttl_seconds": 60})
	r := b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/renew", map[string]any{"ttl_seconds": 3600})
	wantStatus(t, r, http.StatusOK)
	var renewed struct {
		ExpiresAt time.Time `json:"expires_at"`
		Capped    bool      `json:"capped"`
		State     string    `json:"state"`
	}
	r.decode(t, &renewed)
	if renewed.Capped || renewed.State != "requested" || renewed.ExpiresAt.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("renew = %+v", renewed)
	}
	// Past the max lifetime: capped at creation + 24h, and said so.
	r = b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/renew", map[string]any{"ttl_seconds": 86400})
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &renewed)
	if !renewed.Capped || !renewed.ExpiresAt.Equal(sb.CreatedAt.Add(24*time.Hour)) {
		t.Errorf("renew past the max = %+v, want capped at %s", renewed, sb.CreatedAt.Add(24*time.Hour))
	}
	for _, body := range []any{map[string]any{"ttl_seconds": 0}, map[string]any{"ttl_seconds": -5}, map[string]any{"ttl_seconds": 86401}} {
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/renew", body), http.StatusBadRequest, "INVALID_REQUEST")
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/renew", map[string]any{"ttl_seconds": 60}, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil), http.StatusAccepted)
	p := wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/renew", map[string]any{"ttl_seconds": 60}), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "cancelled" {
		t.Errorf("conflict state = %q, want cancelled", p.State)
	}
}

func TestWaitUntilReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	sb := b.create(t, keyA, map[string]any{"params": map[string]any{"destroy_delay_ms": 300}})
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=10s", nil)
	wantStatus(t, r, http.StatusOK)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil), http.StatusAccepted)
	// Settled at once; released only after the 300ms destroy.
	r = b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=10s&until=released", nil)
	wantStatus(t, r, http.StatusOK)
	var got struct {
		State    string `json:"state"`
		Released bool   `json:"released"`
	}
	r.decode(t, &got)
	if got.State != "terminated" || !got.Released {
		t.Errorf("wait until released = %+v, want terminated and released", got)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=1s&until=forever", nil), http.StatusBadRequest, "INVALID_REQUEST")
}

// TestOwnerTransfer: a new process adopts a sandbox; it then lives with the
// new owner's lease, not the old one's, and the change is in its history.
func TestOwnerTransfer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, map[string]any{"owner": "process-1"})
	path := "/v1/sandboxes/" + sb.ID + "/owner"

	before := b.counts(t)
	for _, tc := range []struct {
		key    string
		path   string
		body   any
		status int
		code   string
	}{
		{keyA, path, map[string]any{"owner": "bad name"}, http.StatusBadRequest, "INVALID_REQUEST"},
		{keyA, path, map[string]any{}, http.StatusBadRequest, "INVALID_REQUEST"},
		{keyA, path, map[string]any{"owner": "p", "extra": 1}, http.StatusBadRequest, "INVALID_REQUEST"},
		{keyB, path, map[string]any{"owner": "process-2"}, http.StatusNotFound, "NOT_FOUND"},
		{keyA, "/v1/sandboxes/sbx_00000000000000000000000000/owner", map[string]any{"owner": "process-2"}, http.StatusNotFound, "NOT_FOUND"},
	} {
		wantProblem(t, b.do(t, http.MethodPut, tc.path, tc.body, as(tc.key)), tc.status, tc.code)
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("refused transfers wrote rows: %s -> %s", before, after)
	}

	r := b.do(t, http.MethodPut, path, map[string]any{"owner": "process-2"}, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var got sandboxJSON
	r.decode(t, &got)
	if got.Owner == nil || *got.Owner != "process-2" || got.State != sb.State {
		t.Fatalf("after the transfer: %+v", got)
	}
	// The same owner again changes nothing and records nothing.
	wantStatus(t, b.do(t, http.MethodPut, path, map[string]any{"owner": "process-2"}, as(keyA)), http.StatusOK)
	evs := b.events(t, keyA, "/v1/sandboxes/"+sb.ID+"/events")
	var transfers int
	for _, e := range evs.Items {
		if e.Reason != nil && *e.Reason == "owner_transferred" {
			transfers++
		}
	}
	if transfers != 1 {
		t.Errorf("history records %d transfers, want 1: %+v", transfers, evs.Items)
	}
	// The new owner has a lease; the old owner's release no longer ends it.
	wantStatus(t, b.do(t, http.MethodPut, "/v1/owners/process-2/lease", map[string]any{"ttl_seconds": 60}, as(keyA)), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/process-1", nil, as(keyA)), http.StatusAccepted)
	if cur := b.get(t, keyA, sb.ID); cur.State != "requested" {
		t.Errorf("the old owner's release ended the adopted sandbox: %s", cur.State)
	}
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/process-2", nil, as(keyA)), http.StatusAccepted)
	if cur := b.get(t, keyA, sb.ID); cur.State != "cancelled" || cur.Reason == nil || *cur.Reason != "owner_released" {
		t.Errorf("the new owner's release left the sandbox %s", cur.State)
	}
	// An ended sandbox cannot change owner.
	p := wantProblem(t, b.do(t, http.MethodPut, path, map[string]any{"owner": "process-3"}, as(keyA)), http.StatusConflict, "SANDBOX_STATE_CONFLICT")
	if p.State != "cancelled" {
		t.Errorf("conflict state = %q, want cancelled", p.State)
	}
}

// TestOwnerList: the tenant's owners by name, with their leases and live
// sandboxes, paged; another tenant's are not there.
func TestOwnerList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, keyA, map[string]any{"owner": "agent-b"})
	b.create(t, keyA, map[string]any{"owner": "agent-b"})
	b.create(t, keyA, map[string]any{"owner": "agent-a"})
	b.create(t, keyB, map[string]any{"owner": "agent-c"})
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/agent-a", nil, as(keyA)), http.StatusAccepted)

	type ownerJSON struct {
		Owner         string `json:"owner"`
		Alive         bool   `json:"alive"`
		LiveSandboxes int    `json:"live_sandboxes"`
	}
	var page struct {
		Items      []ownerJSON `json:"items"`
		NextCursor *string     `json:"next_cursor"`
	}
	r := b.do(t, http.MethodGet, "/v1/owners?limit=1", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &page)
	if len(page.Items) != 1 || page.Items[0] != (ownerJSON{"agent-a", false, 0}) || page.NextCursor == nil {
		t.Fatalf("first page = %+v", page)
	}
	r = b.do(t, http.MethodGet, "/v1/owners?cursor="+*page.NextCursor, nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &page)
	if len(page.Items) != 1 || page.Items[0] != (ownerJSON{"agent-b", true, 2}) || page.NextCursor != nil {
		t.Errorf("second page = %+v, want agent-b alive with 2 sandboxes, and no more", page)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/owners?cursor=bad%20name", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
}
