package http_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

type poolJSON struct {
	Name     string         `json:"name"`
	Provider string         `json:"provider"`
	Params   map[string]any `json:"params"`
	MinReady int            `json:"min_ready"`
	MaxSize  int            `json:"max_size"`
	Size     int            `json:"size"`
	Ready    int            `json:"ready"`
	Refill   struct {
		Failures      int        `json:"failures"`
		NextAttemptAt *time.Time `json:"next_attempt_at"`
		LastError     *string    `json:"last_error"`
		LastErrorAt   *time.Time `json:"last_error_at"`
		Pending       int        `json:"pending"`
	} `json:"refill"`
}

func (b *bundle) pool(t *testing.T, key, name string) poolJSON {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/pools/"+name, nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var p poolJSON
	r.decode(t, &p)
	return p
}

// refill runs one refill of the tenant's pool, as the refiller would.
func (b *bundle) refill(t *testing.T, tenant, name string) {
	t.Helper()
	if _, err := b.Store.RefillPool(t.Context(), tenant, name, store.RefillLimits{
		Lease: time.Minute, MaxLifetime: testMaxLifetime, CreateTimeout: time.Minute, Batch: 100, Worker: "test"}); err != nil {
		t.Fatal(err)
	}
}

// TestPoolRefillState: a pool's GET shows its refills' state: the members
// on their way, then, once they all failed, the backoff (failures, the next
// attempt) and the members' error.
func TestPoolRefillState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":2}`), http.StatusCreated)
	r := b.do(t, http.MethodGet, "/v1/pools/py", nil)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"refill":{"failures":0,"next_attempt_at":null,"last_error":null,"last_error_at":null,"pending":0}`) {
		t.Fatalf("a new pool's refill: %s", r.Body)
	}
	b.refill(t, tenantA, "py")
	if p := b.pool(t, keyA, "py"); p.Refill.Pending != 2 || p.Refill.Failures != 0 {
		t.Fatalf("after a refill: %+v; want 2 pending", p.Refill)
	}
	claims, err := b.Store.ClaimCreates(t.Context(), "sim", "", "w", 10, time.Minute, store.Share{})
	if err != nil || len(claims) != 2 {
		t.Fatalf("ClaimCreates: %d, %v", len(claims), err)
	}
	for _, c := range claims {
		if _, err := b.Store.MarkFailed(t.Context(), c.Sandbox.ID, c.Sandbox.Epoch, domain.ActorExecutor, "image bookworm not found"); err != nil {
			t.Fatal(err)
		}
	}
	b.refill(t, tenantA, "py")
	p := b.pool(t, keyA, "py")
	if p.Size != 0 || p.Refill.Failures != 1 || p.Refill.Pending != 0 || p.Refill.NextAttemptAt == nil || p.Refill.LastErrorAt == nil ||
		p.Refill.LastError == nil || *p.Refill.LastError != "image bookworm not found" {
		t.Fatalf("after its members failed: %+v; want a backoff and their error", p)
	}
}

func TestPoolRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":2,"max_size":3,"params":{"create_delay_ms": 5}}`)
	wantStatus(t, r, http.StatusCreated)
	if loc := r.Header.Get("Location"); loc != "/v1/pools/py" {
		t.Errorf("Location = %q", loc)
	}
	var p poolJSON
	r.decode(t, &p)
	if p.Name != "py" || p.Provider != "sim" || p.MinReady != 2 || p.MaxSize != 3 || p.Size != 0 || p.Params["create_delay_ms"] != 5.0 {
		t.Fatalf("created pool = %+v", p)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":1}`), http.StatusConflict, "POOL_EXISTS")
	b.refill(t, tenantA, "py")
	if got := b.pool(t, keyA, "py"); got.Size != 2 || got.Ready != 0 {
		t.Fatalf("after a refill: %+v; want size 2, ready 0", got)
	}
	members := b.list(t, keyA, "label=tether.pool=py&owner=pool:py")
	if len(members.Items) != 2 || members.Items[0].State != "requested" {
		t.Fatalf("members in the registry: %+v", members.Items)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/pools/py", nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	r = b.do(t, http.MethodGet, "/v1/pools", nil, as(keyB))
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"items":[]`) {
		t.Errorf("tenant B's pools: %s; want none", r.Body)
	}

	r = b.do(t, http.MethodPatch, "/v1/pools/py", `{"max_size":1,"min_ready":1}`)
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &p)
	if p.Size != 1 || p.MaxSize != 1 {
		t.Fatalf("shrunk pool = %+v; want size 1", p)
	}
	if l := b.list(t, keyA, "reason=pool_shrunk"); len(l.Items) != 1 {
		t.Errorf("%d sandboxes ended pool_shrunk; want 1", len(l.Items))
	}
	r = b.do(t, http.MethodDelete, "/v1/pools/py", nil)
	wantStatus(t, r, http.StatusAccepted)
	if !strings.Contains(string(r.Body), `"sandboxes_ended":1`) {
		t.Errorf("delete answered %s; want 1 ended", r.Body)
	}
	if l := b.list(t, keyA, "reason=pool_deleted"); len(l.Items) != 1 {
		t.Errorf("%d sandboxes ended pool_deleted; want 1", len(l.Items))
	}
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/pools/py", nil), http.StatusNotFound, "NOT_FOUND")
	wantProblem(t, b.do(t, http.MethodGet, "/v1/pools/Not_A_Name", nil), http.StatusNotFound, "NOT_FOUND")
}

// TestPoolBadInput: every malformed pool request and pool claim is 400
// (or the code named) and writes nothing.
func TestPoolBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":1,"max_size":2}`), http.StatusCreated)
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/pools", `{"name":"Py","min_ready":1}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"-py","min_ready":1}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"` + strings.Repeat("a", 64) + `","min_ready":1}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":-1}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":3,"max_size":2}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":0,"max_size":1001}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":1,"provider":"nope"}`, 400, "UNKNOWN_PROVIDER"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":1,"params":[1]}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":1,"params":{"fail":"sometimes"}}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":1,"image":"bookworm"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `{"name":"x","min_ready":"1"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/pools", `[]`, 400, "INVALID_REQUEST"},
		{"PATCH", "/v1/pools/py", `{}`, 400, "INVALID_REQUEST"},
		{"PATCH", "/v1/pools/py", `{"min_ready":3}`, 400, "INVALID_REQUEST"},
		{"PATCH", "/v1/pools/py", `{"max_size":0}`, 400, "INVALID_REQUEST"},
		{"PATCH", "/v1/pools/py", `{"name":"other"}`, 400, "INVALID_REQUEST"},
		{"PATCH", "/v1/pools/nope", `{"max_size":3}`, 404, "NOT_FOUND"},
		{"GET", "/v1/pools?limit=1", ``, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","env":{"A":"b"}}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","setup":"true"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","provider":"sim"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","params":{}}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","id":"sbx_06h38g9bdvp2gzcmgpvr4w8ry4"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","ttl_seconds":0}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","owner":"pool:py"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"py","labels":{"":"x"}}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool_only":true}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"Bad Name"}`, 400, "INVALID_REQUEST"},
		{"POST", "/v1/sandboxes", `{"pool":"nope"}`, 404, "NOT_FOUND"},
		{"POST", "/v1/sandboxes", `{"pool":"py","pool_only":true}`, 409, "POOL_EMPTY"},
		{"POST", "/v1/sandboxes", `{"owner":"pool:py"}`, 400, "INVALID_REQUEST"},
		{"PUT", "/v1/owners/pool:py/lease", `{"ttl_seconds":60}`, 400, "INVALID_REQUEST"},
		{"DELETE", "/v1/owners/pool:py", ``, 400, "INVALID_REQUEST"},
	}
	before := b.counts(t)
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		p := wantProblem(t, b.do(t, c.method, c.path, body), c.status, c.code)
		if c.status == 400 && p.Detail == "" {
			t.Errorf("%s %s %s: no detail", c.method, c.path, c.body)
		}
	}
	if after := b.counts(t); !after.equal(before) {
		t.Fatalf("bad input wrote rows: before %s, after %s", before, after)
	}
}

// TestPoolClaim: a create naming a pool takes a ready member (201) with
// the caller's owner, labels and TTL; an empty pool falls back to a create
// like its members (202), or 409 POOL_EMPTY with pool_only; the claims
// are counted in /metrics.
func TestPoolClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":1,"params":{"create_delay_ms":1}}`), http.StatusCreated)
	b.refill(t, tenantA, "py")
	eventually(t, 10*time.Second, "the member ready", func() bool { return b.pool(t, keyA, "py").Ready == 1 })

	start := time.Now()
	r := b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py","owner":"agent-1","labels":{"task":"t1"},"ttl_seconds":600}`)
	wantStatus(t, r, http.StatusCreated)
	var sb sandboxJSON
	r.decode(t, &sb)
	if sb.State != "ready" || deref(sb.Owner) != "agent-1" || sb.Labels["task"] != "t1" || sb.Labels["tether.pool"] != "py" || sb.Provider != "sim" {
		t.Fatalf("claimed = %+v", sb)
	}
	if d := sb.ExpiresAt.Sub(start); d < 590*time.Second || d > 610*time.Second {
		t.Errorf("expires in %s; want the 600s asked for", d)
	}
	if r.Header.Get("Location") != "/v1/sandboxes/"+sb.ID {
		t.Errorf("Location = %q", r.Header.Get("Location"))
	}
	evs := b.events(t, keyA, "/v1/sandboxes/"+sb.ID+"/events").Items
	if last := evs[len(evs)-1]; deref(last.Reason) != "owner_transferred" || last.Message != "claimed from pool py: owner pool:py -> owner agent-1" {
		t.Errorf("last event = %+v", last)
	}
	if p := b.pool(t, keyA, "py"); p.Size != 0 {
		t.Errorf("pool after the claim: %+v; want empty until the refiller runs", p)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py","pool_only":true}`), http.StatusConflict, "POOL_EMPTY")
	miss := b.create(t, keyA, `{"pool":"py","labels":{"task":"t2"}}`)
	if miss.State != "requested" || miss.Provider != "sim" || miss.Labels["tether.pool"] != "py" || miss.Labels["task"] != "t2" || miss.Owner != nil {
		t.Fatalf("fallback create = %+v", miss)
	}
	// Another tenant's pool of the same name is not this one's.
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py"}`, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	m := string(b.do(t, http.MethodGet, "/metrics", nil).Body)
	for _, want := range []string{`tether_pool_claims_total{outcome="hit"} 1`, `tether_pool_claims_total{outcome="miss"} 1`,
		`tether_pool_claims_total{outcome="empty"} 1`, `tether_pool_claim_duration_seconds_count{outcome="hit"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestPoolClaimIdempotencyKey: a claim retried with its Idempotency-Key
// answers the first one's sandbox (200) and takes no second member.
func TestPoolClaimIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":2}`), http.StatusCreated)
	b.refill(t, tenantA, "py")
	eventually(t, 10*time.Second, "the members ready", func() bool { return b.pool(t, keyA, "py").Ready == 2 })
	body := `{"pool":"py","owner":"agent-1"}`
	r := b.do(t, http.MethodPost, "/v1/sandboxes", body, header("Idempotency-Key", "claim-1"))
	wantStatus(t, r, http.StatusCreated)
	var first, again sandboxJSON
	r.decode(t, &first)
	r = b.do(t, http.MethodPost, "/v1/sandboxes", body, header("Idempotency-Key", "claim-1"))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &again)
	if again.ID != first.ID {
		t.Fatalf("retry got %s; want the first claim's %s", again.ID, first.ID)
	}
	if p := b.pool(t, keyA, "py"); p.Ready != 1 {
		t.Fatalf("pool after a claim and its retry: %+v; want 1 ready", p)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py","owner":"agent-2"}`, header("Idempotency-Key", "claim-1")),
		http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
}

// TestPoolClaimQuotas: a claim of a ready member adds no live sandbox, so
// it is not a create for the quotas: a tenant at its live-sandbox cap or
// out of creates this minute still claims (201); the fallback create of a
// claim that finds no member is one, and is refused like any create (429,
// nothing written).
func TestPoolClaimQuotas(t *testing.T) {
	t.Parallel()
	t.Run("live", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withExecutor(), withQuotas(1, 0, 0))
		wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":1,"params":{"create_delay_ms":1}}`), http.StatusCreated)
		b.refill(t, tenantA, "py")
		eventually(t, 10*time.Second, "the member ready", func() bool { return b.pool(t, keyA, "py").Ready == 1 })
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{}`), http.StatusTooManyRequests, "QUOTA_EXCEEDED")
		wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py","owner":"agent-1"}`), http.StatusCreated)
		before := b.counts(t)
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py"}`), http.StatusTooManyRequests, "QUOTA_EXCEEDED")
		if after := b.counts(t); !after.equal(before) {
			t.Errorf("a refused fallback create wrote rows: %s -> %s", before, after)
		}
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py","pool_only":true}`), http.StatusConflict, "POOL_EMPTY")
	})
	t.Run("create rate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withExecutor(), withQuotas(0, 6, 0)) // bursts of 1
		wantStatus(t, b.do(t, http.MethodPost, "/v1/pools", `{"name":"py","min_ready":3,"params":{"create_delay_ms":1}}`), http.StatusCreated)
		b.refill(t, tenantA, "py")
		eventually(t, 10*time.Second, "the members ready", func() bool { return b.pool(t, keyA, "py").Ready == 3 })
		for range 3 {
			wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py"}`), http.StatusCreated)
		}
		wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{}`), http.StatusAccepted) // the minute's one create
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{}`), http.StatusTooManyRequests, "QUOTA_EXCEEDED")
		wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"pool":"py"}`), http.StatusTooManyRequests, "QUOTA_EXCEEDED")
	})
}
