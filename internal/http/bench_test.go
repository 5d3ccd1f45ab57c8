package http

import (
	"context"
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

type fixedAuth struct{}

func (fixedAuth) Authenticate(context.Context, string) (sandbox.APIKey, error) {
	return sandbox.APIKey{ID: "key_x", Tenant: "acme", Name: "bench"}, nil
}

// BenchmarkKeyCacheHit is authentication of a request whose key was seen
// recently: no query.
func BenchmarkKeyCacheHit(b *testing.B) {
	k := newKeyCache(fixedAuth{}, time.Minute)
	ctx := context.Background()
	for b.Loop() {
		if _, err := k.Authenticate(ctx, "tk_some-api-key"); err != nil {
			b.Fatal(err)
		}
	}
}
