package http_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/http/httpapi"
)

type mintedKey struct {
	Key struct {
		ID         string  `json:"id"`
		ManageKeys bool    `json:"manage_keys"`
		CreatedBy  *string `json:"created_by"`
	} `json:"key"`
	Secret string `json:"secret"`
}

func (b *bundle) mint(t *testing.T, key, body string) mintedKey {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/keys", body, as(key))
	wantStatus(t, r, http.StatusCreated)
	var m mintedKey
	r.decode(t, &m)
	return m
}

// keyID is the id of an API key the test registered (keyA, keyB).
func (b *bundle) keyID(t *testing.T, key string) string {
	t.Helper()
	var id string
	if err := b.Store.Pool().QueryRow(t.Context(), `SELECT id FROM api_keys WHERE key_hash = sha256($1::bytea)`, []byte(key)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestKeyManagementScope: only a key with manage_keys creates keys or
// revokes others; a key made without it may still revoke itself; who made
// each key is recorded.
func TestKeyManagementScope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plain := b.mint(t, keyA, `{"name":"agent"}`)
	if plain.Key.ManageKeys || plain.Key.CreatedBy == nil || *plain.Key.CreatedBy != b.keyID(t, keyA) {
		t.Fatalf("minted key = %+v; want no manage_keys, created_by the asking key", plain.Key)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/keys", `{"name":"escalate","manage_keys":true}`, as(plain.Secret)), http.StatusForbidden, "FORBIDDEN")
	wantProblem(t, b.do(t, http.MethodPost, "/v1/keys", `{"name":"more"}`, as(plain.Secret)), http.StatusForbidden, "FORBIDDEN")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/keys/"+b.keyID(t, keyA), nil, as(plain.Secret)), http.StatusForbidden, "FORBIDDEN")

	admin := b.mint(t, keyA, `{"name":"admin","manage_keys":true}`)
	if !admin.Key.ManageKeys {
		t.Fatalf("asked-for manage_keys not given: %+v", admin.Key)
	}
	sub := b.mint(t, admin.Secret, `{"name":"sub"}`)
	if *sub.Key.CreatedBy != admin.Key.ID {
		t.Errorf("created_by = %v; want %s", *sub.Key.CreatedBy, admin.Key.ID)
	}
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/keys/"+plain.Key.ID, nil, as(plain.Secret)), http.StatusOK)
}

// TestRevokedKeyCannotMint: a revoked key that the auth cache still lets
// in for a while cannot create a key (nor revoke one) in that window.
func TestRevokedKeyCannotMint(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *httpapi.Config) { c.AuthCacheTTL = time.Hour }))
	admin := b.mint(t, keyA, `{"name":"admin","manage_keys":true}`)
	victim := b.mint(t, keyA, `{"name":"victim"}`)
	// Cached: the revoked key would still be let in for an hour.
	wantStatus(t, b.do(t, http.MethodGet, "/v1/keys", nil, as(admin.Secret)), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/keys/"+admin.Key.ID, nil, as(keyA)), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodGet, "/v1/keys", nil, as(admin.Secret)), http.StatusOK) // the cache's window
	wantProblem(t, b.do(t, http.MethodPost, "/v1/keys", `{"name":"minted"}`, as(admin.Secret)), http.StatusUnauthorized, "UNAUTHENTICATED")
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/keys/"+victim.Key.ID, nil, as(admin.Secret)), http.StatusUnauthorized, "UNAUTHENTICATED")
	if l := b.keys(t, keyA); len(l.Items) != 3 {
		t.Errorf("A has %d keys; want 3 (nothing minted by the revoked key)", len(l.Items))
	}
}

// TestTenantKeyCap: a tenant holds at most TenantMaxKeys keys that are not
// revoked; revoking one makes room.
func TestTenantKeyCap(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *httpapi.Config) { c.TenantMaxKeys = 3 }))
	first := b.mint(t, keyA, `{"name":"one"}`) // with keyA: 2
	b.mint(t, keyA, `{"name":"two"}`)          // 3
	r := b.do(t, http.MethodPost, "/v1/keys", `{"name":"three"}`, as(keyA))
	wantProblem(t, r, http.StatusTooManyRequests, "QUOTA_EXCEEDED")
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/keys/"+first.Key.ID, nil, as(keyA)), http.StatusOK)
	b.mint(t, keyA, `{"name":"three"}`)
	b.mint(t, keyB, `{"name":"other tenant"}`)
}

// TestTenantRequestRate: a tenant's keys share its request rate, so ten
// keys do not get ten times the throughput.
func TestTenantRequestRate(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *httpapi.Config) {
		c.KeyRequestsPerSecond, c.TenantRequestsPerSecond = 1000, 5 // bursts of 10 per tenant
	}))
	keys := []string{keyA}
	for range 4 {
		keys = append(keys, b.mint(t, keyA, `{"name":"k"}`).Secret)
	}
	ok := 0
	for i := range 40 {
		if b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(keys[i%len(keys)])).Status == http.StatusOK {
			ok++
		}
	}
	if ok > 20 {
		t.Errorf("5 keys of one tenant made %d of 40 requests at once at 5 a second for the tenant; want at most 20", ok)
	}
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(keyB)), http.StatusOK) // another tenant
}
