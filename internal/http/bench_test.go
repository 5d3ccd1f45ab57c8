package http

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"testing"
	"time"

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
		if err := encodeJSON(io.Discard, toSandbox(sb)); err != nil {
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

// createBody is a typical create request.
var createBody = []byte(`{"provider":"sim","owner":"agent-1","labels":{"team":"search","task":"fix-123"},"ttl_seconds":600,"env":{"A":"1","B":"two"},"setup":"pip install -q pytest"}`)

// BenchmarkDuplicateKeyCheck is what refusing repeated JSON keys adds to a
// request body; compare BenchmarkDecodeCreateBody, the decoding it precedes.
func BenchmarkDuplicateKeyCheck(b *testing.B) {
	for b.Loop() {
		if err := noDuplicateKeys(createBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCreateBody is the decoding of a create body alone.
func BenchmarkDecodeCreateBody(b *testing.B) {
	for b.Loop() {
		var v map[string]any
		if err := json.Unmarshal(createBody, &v); err != nil {
			b.Fatal(err)
		}
	}
}
