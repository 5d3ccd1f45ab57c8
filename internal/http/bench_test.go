package http

import (
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/http/jsoncodec"
	"github.com/tetherhq/tether/internal/sandbox"
)

// BenchmarkEncodeSandbox is the JSON rendering every sandbox response pays.
func BenchmarkEncodeSandbox(b *testing.B) {
	now := time.Now()
	sb := sandbox.Sandbox{
		ID: sandbox.NewID(), Tenant: "acme", State: sandbox.StateReady, Provider: "sim", Owner: "agent-1",
		Labels: map[string]string{"team": "search", "task": "fix-123"}, ProviderID: "sim-x", WorkDir: "/workspace",
		CreatedAt: now, UpdatedAt: now, ReadyAt: &now, ExpiresAt: now.Add(time.Hour), CreateDeadline: now.Add(time.Minute),
	}
	for b.Loop() {
		if err := jsoncodec.Encode(io.Discard, toSandbox(sb)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeyCacheHit is authentication of a request whose key was seen
// recently: its hash and a look in the cache, no query.
func BenchmarkKeyCacheHit(b *testing.B) {
	k := newKeyCache(time.Minute)
	k.put(sha256.Sum256([]byte("tk_some-api-key")), sandbox.APIKey{ID: "key_x", Tenant: "acme", Name: "bench"})
	for b.Loop() {
		if _, ok := k.get(sha256.Sum256([]byte("tk_some-api-key"))); !ok {
			b.Fatal("not cached")
		}
	}
}
