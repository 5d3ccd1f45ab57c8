package http_test

import (
	"maps"
	"net/http"
	"strings"
	"testing"
)

type apiKeyJSON struct {
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	Secret     *string `json:"secret"`
	LastUsedAt *string `json:"last_used_at"`
	RevokedAt  *string `json:"revoked_at"`
}

type apiKeyList struct {
	Items []apiKeyJSON `json:"items"`
}

func (b *bundle) keys(t *testing.T, key string) apiKeyList {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/keys", nil, as(key))
	wantStatus(t, r, http.StatusOK)
	var l apiKeyList
	r.decode(t, &l)
	return l
}

// TestAPIKeys: a key made over the API is shown once, works at once, is
// listed without its secret, and stops working when revoked, even by
// itself. Another tenant can neither see nor revoke it.
func TestAPIKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)

	r := b.do(t, http.MethodPost, "/v1/keys", `{"name":"ci-runner"}`, as(keyA))
	wantStatus(t, r, http.StatusCreated)
	var created struct {
		Key    apiKeyJSON `json:"key"`
		Secret string     `json:"secret"`
	}
	r.decode(t, &created)
	if !strings.HasPrefix(created.Key.ID, "key_") || created.Key.Name != "ci-runner" || !strings.HasPrefix(created.Secret, "tk_") ||
		created.Key.RevokedAt != nil || created.Key.LastUsedAt != nil {
		t.Fatalf("created = %+v", created)
	}
	if got := r.Header.Get("Location"); got != "/v1/keys/"+created.Key.ID {
		t.Errorf("Location = %q", got)
	}

	// The new key works, and belongs to tenant A.
	sb := b.create(t, created.Secret, `{}`)
	b.get(t, keyA, sb.ID)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")

	// Listed for A (with its bootstrap-like test key), never with a secret.
	l := b.keys(t, keyA)
	if len(l.Items) != 2 {
		t.Fatalf("A's keys = %+v, want 2", l.Items)
	}
	var found *apiKeyJSON
	for i, k := range l.Items {
		if k.Secret != nil {
			t.Errorf("listed key %+v carries a secret", k)
		}
		if k.ID == created.Key.ID {
			found = &l.Items[i]
		}
	}
	if found == nil || found.LastUsedAt == nil {
		t.Errorf("the new key is not listed as used: %+v", l.Items)
	}
	if r := b.do(t, http.MethodGet, "/v1/keys", nil, as(keyA)); strings.Contains(string(r.Body), created.Secret) {
		t.Error("the listing shows the secret")
	}

	// B sees only its own key, and cannot revoke A's.
	if l := b.keys(t, keyB); len(l.Items) != 1 || l.Items[0].ID == created.Key.ID {
		t.Errorf("B's keys = %+v", l.Items)
	}
	wantProblem(t, b.do(t, http.MethodDelete, "/v1/keys/"+created.Key.ID, nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
	b.get(t, created.Secret, sb.ID)

	// The key revokes itself; it is refused from then on (this server
	// caches no key), and stays listed as revoked. Revoking again is 200.
	r = b.do(t, http.MethodDelete, "/v1/keys/"+created.Key.ID, nil, as(created.Secret))
	wantStatus(t, r, http.StatusOK)
	var revoked apiKeyJSON
	r.decode(t, &revoked)
	if revoked.RevokedAt == nil || revoked.ID != created.Key.ID {
		t.Errorf("revoked = %+v", revoked)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(created.Secret)), http.StatusUnauthorized, "UNAUTHENTICATED")
	again := b.do(t, http.MethodDelete, "/v1/keys/"+created.Key.ID, nil, as(keyA))
	wantStatus(t, again, http.StatusOK)
	var twice apiKeyJSON
	again.decode(t, &twice)
	if twice.RevokedAt == nil || *twice.RevokedAt != *revoked.RevokedAt {
		t.Errorf("revoking again = %+v, want revoked_at kept at %v", twice, *revoked.RevokedAt)
	}
	if l := b.keys(t, keyA); len(l.Items) != 2 {
		t.Errorf("A's keys after the revocation = %+v, want both listed", l.Items)
	}
}

// TestEventsNameTheKey: every client event names the API key it was made
// with; the executor's and the janitor's name none.
func TestEventsNameTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	sb := b.create(t, keyA, `{"owner":"agent"}`)
	wantStatus(t, b.do(t, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/owner", `{"owner":"agent-2"}`, as(keyA)), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/owners/agent-2", nil, as(keyA)), http.StatusAccepted)
	other := b.create(t, keyA, `{}`)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+other.ID, nil, as(keyA)), http.StatusAccepted)

	r := b.do(t, http.MethodGet, "/v1/events?limit=500", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var l struct {
		Items []struct {
			SandboxID    string  `json:"sandbox_id"`
			Actor        string  `json:"actor"`
			Reason       *string `json:"reason"`
			ActorKeyID   *string `json:"actor_key_id"`
			ActorKeyName *string `json:"actor_key_name"`
		} `json:"items"`
	}
	r.decode(t, &l)
	keys := b.keys(t, keyA).Items
	if len(keys) != 1 {
		t.Fatalf("A's keys = %+v", keys)
	}
	clientEvents := 0
	for _, e := range l.Items {
		if e.Actor != "client" {
			if e.ActorKeyID != nil || e.ActorKeyName != nil {
				t.Errorf("%s event %+v names a key", e.Actor, e)
			}
			continue
		}
		clientEvents++
		if e.ActorKeyID == nil || *e.ActorKeyID != keys[0].ID || e.ActorKeyName == nil || *e.ActorKeyName != "key-"+tenantA {
			t.Errorf("client event %+v does not name key A (%s)", e, keys[0].ID)
		}
	}
	// Two requests, one transfer, one owner release, one delete.
	if clientEvents != 5 {
		t.Errorf("%d client events, want 5: %+v", clientEvents, l.Items)
	}
}

// TestActivityIsTenantScoped: a sandbox's activity is its tenant's only;
// a provider without exec records nothing.
func TestActivityIsTenantScoped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, `{}`)
	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/activity", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	var l struct {
		Items      []map[string]any `json:"items"`
		NextCursor *string          `json:"next_cursor"`
	}
	r.decode(t, &l)
	if len(l.Items) != 0 || l.NextCursor != nil {
		t.Errorf("activity of a new sandbox = %+v", l)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/activity", nil, as(keyB)), http.StatusNotFound, "NOT_FOUND")
}

// TestKeyBadInput: bad key requests are 4xx problems and write nothing.
func TestKeyBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, `{}`)
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"no name", http.MethodPost, "/v1/keys", `{}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"empty name", http.MethodPost, "/v1/keys", `{"name":""}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"long name", http.MethodPost, "/v1/keys", `{"name":"` + strings.Repeat("n", 101) + `"}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"control character", http.MethodPost, "/v1/keys", `{"name":"a\nb"}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"unknown field", http.MethodPost, "/v1/keys", `{"name":"a","tenant":"tenant-b"}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"not JSON", http.MethodPost, "/v1/keys", `name=a`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"query parameter", http.MethodPost, "/v1/keys?tenant=x", `{"name":"a"}`, http.StatusBadRequest, "INVALID_REQUEST"},
		{"list query parameter", http.MethodGet, "/v1/keys?limit=5", nil, http.StatusBadRequest, "INVALID_REQUEST"},
		{"revoke malformed id", http.MethodDelete, "/v1/keys/nope", nil, http.StatusNotFound, "NOT_FOUND"},
		{"revoke unknown id", http.MethodDelete, "/v1/keys/key_aaaaaaaaaaaaaaaa", nil, http.StatusNotFound, "NOT_FOUND"},
		{"activity limit 0", http.MethodGet, "/v1/sandboxes/" + sb.ID + "/activity?limit=0", nil, http.StatusBadRequest, "INVALID_REQUEST"},
		{"activity cursor", http.MethodGet, "/v1/sandboxes/" + sb.ID + "/activity?cursor=x", nil, http.StatusBadRequest, "INVALID_REQUEST"},
		{"activity of no sandbox", http.MethodGet, "/v1/sandboxes/nope/activity", nil, http.StatusNotFound, "NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.counts(t)
			wantProblem(t, b.do(t, tc.method, tc.path, tc.body, as(keyA)), tc.status, tc.code)
			if after := b.counts(t); !after.equal(before) {
				t.Errorf("bad input wrote rows: before %v, after %v", before, after)
			}
		})
	}
	// The counts can move: a good create writes one key (and the
	// installation's cluster secret, which tags it, if there was none:
	// serve makes it at start).
	before := b.counts(t)
	wantStatus(t, b.do(t, http.MethodPost, "/v1/keys", `{"name":"ok"}`, as(keyA)), http.StatusCreated)
	want := maps.Clone(before)
	want["api_keys"]++
	want["cluster_secret"] = 1
	if after := b.counts(t); !after.equal(want) {
		t.Errorf("a good create changed counts from %v to %v", before, after)
	}
}
