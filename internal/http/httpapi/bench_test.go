package httpapi

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// BenchmarkKeyCacheHit is authentication of a request whose key was seen
// recently: its hash and a look in the cache, no query.
func BenchmarkKeyCacheHit(b *testing.B) {
	k := NewKeyCache(time.Minute)
	k.put(sha256.Sum256([]byte("tk_some-api-key")), domain.APIKey{ID: "key_x", Tenant: "acme", Name: "bench"})
	for b.Loop() {
		if _, ok := k.get(sha256.Sum256([]byte("tk_some-api-key"))); !ok {
			b.Fatal("not cached")
		}
	}
}
