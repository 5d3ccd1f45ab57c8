package http_test

import (
	"net/http"
	"strconv"
	"testing"
)

// TestQuotas: a tenant over its live-sandbox cap, its create rate or its
// key's request rate gets 429 QUOTA_EXCEEDED with Retry-After, and nothing
// is written; another tenant is not affected, and a tenant's own quota in
// the tenants table overrides the server's (its 0: no limit).
func TestQuotas(t *testing.T) {
	t.Parallel()
	t.Run("live", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withQuotas(3, 0, 0))
		for range 3 {
			b.create(t, keyA, `{}`)
		}
		before := b.counts(t)
		r := b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, as(keyA))
		wantProblem(t, r, http.StatusTooManyRequests, "QUOTA_EXCEEDED")
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Errorf("Retry-After = %q, want a number of seconds", r.Header.Get("Retry-After"))
		}
		if after := b.counts(t); !after.equal(before) {
			t.Errorf("a refused create wrote rows: %s -> %s", before, after)
		}
		b.create(t, keyB, `{}`) // another tenant is not affected

		// The tenant's own quota overrides the server's.
		if _, err := b.Store.Pool().Exec(t.Context(), `UPDATE tenants SET max_live_sandboxes = 5 WHERE name = $1`, tenantA); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5e9, "the override to apply", func() bool {
			return b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, as(keyA)).Status == http.StatusAccepted
		})

		// A tenant's own 0 is no limit, not none: past the server's cap
		// and its own old one.
		if _, err := b.Store.Pool().Exec(t.Context(), `UPDATE tenants SET max_live_sandboxes = 0 WHERE name = $1`, tenantA); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10e9, "creates past every cap", func() bool {
			b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, as(keyA))
			return b.liveCount(t, tenantA) >= 10
		})
	})
	t.Run("create rate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withQuotas(0, 12, 0)) // bursts of 2
		codes := map[int]int{}
		for range 4 {
			codes[b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, as(keyA)).Status]++
		}
		if codes[http.StatusAccepted] != 2 || codes[http.StatusTooManyRequests] != 2 {
			t.Errorf("4 creates at once at 12 a minute: %v, want 2 accepted and 2 refused", codes)
		}
	})
	t.Run("key rate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withQuotas(0, 0, 5)) // bursts of 10
		refused := 0
		for range 30 {
			if b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(keyA)).Status == http.StatusTooManyRequests {
				refused++
			}
		}
		if refused == 0 || refused > 20 {
			t.Errorf("30 requests at once at 5 a second: %d refused, want some, and at most 20", refused)
		}
		wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(keyB)), http.StatusOK) // another key
	})
}

// liveCount counts the tenant's live sandboxes in the registry.
func (b *bundle) liveCount(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	if err := b.Store.Pool().QueryRow(t.Context(),
		`SELECT count(*) FROM sandboxes WHERE tenant = $1 AND state IN ('requested', 'creating', 'ready')`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
