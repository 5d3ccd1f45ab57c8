package controlplane

import (
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
