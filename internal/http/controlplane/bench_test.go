package controlplane

import (
	"io"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// BenchmarkEncodeSandbox is the JSON rendering every sandbox response pays.
func BenchmarkEncodeSandbox(b *testing.B) {
	now := time.Now()
	sb := domain.Sandbox{
		ID: domain.NewID(), Tenant: "acme", State: domain.StateReady, Provider: "sim", Owner: "agent-1",
		Labels: map[string]string{"team": "search", "task": "fix-123"}, ProviderID: "sim-x", WorkDir: "/workspace",
		CreatedAt: now, UpdatedAt: now, ReadyAt: &now, ExpiresAt: now.Add(time.Hour), CreateDeadline: now.Add(time.Minute),
	}
	for b.Loop() {
		if err := jsoncodec.Encode(io.Discard, toSandbox(sb)); err != nil {
			b.Fatal(err)
		}
	}
}
