package http_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/http/httpapi"
	"github.com/tetherhq/tether/internal/store"
)

// lookupCounter counts the lookups of API keys and preview tokens that
// reach Postgres.
type lookupCounter struct {
	*store.Store
	keys, previews atomic.Int64
}

func (l *lookupCounter) Authenticate(ctx context.Context, key string) (domain.APIKey, error) {
	l.keys.Add(1)
	return l.Store.Authenticate(ctx, key)
}

func (l *lookupCounter) PreviewByToken(ctx context.Context, token string) (domain.Preview, error) {
	l.previews.Add(1)
	return l.Store.PreviewByToken(ctx, token)
}

// counted sets up a bundle whose lookups counter counts.
func counted(t *testing.T, config func(*httpapi.Config)) (*bundle, *lookupCounter) {
	t.Helper()
	var counter *lookupCounter
	b := setup(t, withExecutor(), withConfig(config), withStoreWrap(func(st *store.Store) tetherhttp.Store {
		counter = &lookupCounter{Store: st}
		return counter
	}))
	return b, counter
}

// random40 is a value of Tether's tagged shape (the prefix and 40 bytes)
// that Tether did not make: its tag fails.
func random40(prefix string) string {
	b := make([]byte, 40)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// TestGuessesCostNoLookups: credentials of Tether's tagged shape that it
// did not make are refused without a lookup; a bad key sent again is
// refused without another; once the address is over its budget, unknown
// values get 429 without a lookup while the tenant's keys, old or new, and
// preview tokens from that address are still looked up and let in.
func TestGuessesCostNoLookups(t *testing.T) {
	t.Parallel()
	b, n := counted(t, func(c *httpapi.Config) { c.AuthFailuresPerSecond, c.AuthCacheTTL = 1, time.Hour })
	fresh := b.mint(t, keyA, `{"name":"fresh"}`).Secret
	id := b.readyWithPorts(t, keyA, 8080)
	p := b.preview(t, keyA, id, map[string]any{"port": 8080})
	keys, previews := n.keys.Load(), n.previews.Load()

	// One bad key, sent 10 times: one lookup, then 401s from the miss
	// cache while the address's burst (4) lasts, then 429s.
	codes := map[int]int{}
	for range 10 {
		codes[b.do(t, http.MethodGet, "/v1/sandboxes", nil, as("wrong-key")).Status]++
	}
	if got := n.keys.Load() - keys; got != 1 || codes[http.StatusUnauthorized] < 4 || codes[http.StatusTooManyRequests] < 5 {
		t.Errorf("one bad key ×10: %d lookups, answers %v; want 1 lookup, 4 (or 5) × 401 then 429", got, codes)
	}
	// Forged keys and preview tokens: no lookup at all, whatever the
	// budget (which refills a token a second meanwhile).
	keys = n.keys.Load()
	for range 20 {
		if s := b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(random40(domain.KeyPrefix))).Status; s != http.StatusTooManyRequests && s != http.StatusUnauthorized {
			t.Errorf("a forged key = %d", s)
		}
		if s := b.do(t, http.MethodGet, "/p/"+random40(domain.PreviewTokenPrefix)+"/", nil, noAuth()).Status; s != http.StatusTooManyRequests && s != http.StatusNotFound {
			t.Errorf("a forged preview token = %d", s)
		}
	}
	if k, pv := n.keys.Load()-keys, n.previews.Load()-previews; k != 0 || pv != 0 {
		t.Errorf("40 forged credentials cost %d key and %d preview lookups; want none", k, pv)
	}
	// Other guesses over the budget: 429 without a lookup, but for the
	// tokens that refilled meanwhile.
	began := time.Now()
	codes = map[int]int{}
	for i := range 20 {
		codes[b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(fmt.Sprintf("guess-%d", i))).Status]++
	}
	if k, most := n.keys.Load()-keys, int64(time.Since(began).Seconds())+2; k > most || codes[http.StatusTooManyRequests] < 20-int(most) {
		t.Errorf("20 guesses over the budget cost %d lookups (answers %v); want at most %d", k, codes, most)
	}

	// From the same address, over its budget: a key made with tags, never
	// used; a key from before tags (keyB, never used here); a preview.
	for range 20 { // spend what refilled
		b.do(t, http.MethodGet, "/v1/sandboxes", nil, as("spent"))
	}
	keys = n.keys.Load()
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(fresh)), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(keyB)), http.StatusOK)
	if r := b.do(t, http.MethodGet, previewPath(t, p)+"index.html", nil, noAuth()); r.Status != http.StatusOK {
		t.Errorf("the preview from the address over its budget = %s", r)
	}
	if k := n.keys.Load() - keys; k != 2 {
		t.Errorf("the two keys cost %d lookups; want 2", k)
	}
	// A revoked key is refused, and then again without a lookup.
	minted := b.mint(t, keyA, `{"name":"short-lived"}`)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/keys/"+minted.Key.ID, nil, as(keyA)), http.StatusOK)
	keys = n.keys.Load()
	for range 3 {
		if s := b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(minted.Secret)).Status; s != http.StatusUnauthorized && s != http.StatusTooManyRequests {
			t.Errorf("a revoked key = %d", s)
		}
	}
	if k := n.keys.Load() - keys; k != 1 {
		t.Errorf("a revoked key sent 3 times: %d lookups; want 1", k)
	}
}

// TestGuessesFromManyAddressesAreBounded: unknown keys from many client
// addresses (behind a trusted proxy) cost at most the global budget of
// lookups, AUTH_FAILURES_PER_SECOND × 20 a second (bursts of four seconds'
// worth), and valid keys from any of them still pass.
func TestGuessesFromManyAddressesAreBounded(t *testing.T) {
	t.Parallel()
	b, n := counted(t, func(c *httpapi.Config) {
		c.AuthFailuresPerSecond = 1
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	fresh := b.mint(t, keyA, `{"name":"fresh"}`).Secret
	keys := n.keys.Load()
	began := time.Now()
	codes := map[int]int{}
	for i := range 300 {
		from := header("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i%150))
		codes[b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(fmt.Sprintf("guess-%d", i)), from).Status]++
	}
	most := 4*20 + int(time.Since(began).Seconds()*20) + 1
	if got := n.keys.Load() - keys; got > int64(most) || codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("300 guesses from 150 addresses: %d lookups (answers %v); want at most %d, the rest 429", got, codes, most)
	}
	for i, key := range []string{fresh, keyB} {
		from := header("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		wantStatus(t, b.do(t, http.MethodGet, "/v1/sandboxes", nil, as(key), from), http.StatusOK)
	}
	t.Logf("300 guesses from 150 addresses in %s: %d lookups, answers %v", time.Since(began).Round(time.Millisecond), n.keys.Load()-keys-2, codes)
}
