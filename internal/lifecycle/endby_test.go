package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// recordingSim is the sim provider remembering the specs of its creates.
type recordingSim struct {
	*sim.Provider
	mu    sync.Mutex
	specs map[string]domain.CreateSpec
}

func (r *recordingSim) Create(ctx context.Context, spec domain.CreateSpec) (domain.Resource, error) {
	r.mu.Lock()
	r.specs[spec.SandboxID] = spec
	r.mu.Unlock()
	return r.Provider.Create(ctx, spec)
}

// TestExecutorTellsTheSandboxsEnd: a create tells the provider when the
// sandbox must end at the latest, its creation plus MaxLifetime.
func TestExecutorTellsTheSandboxsEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := &recordingSim{Provider: e.sim, specs: map[string]domain.CreateSpec{}}
	e.executorOf(lifecycle.ExecutorConfig{MaxLifetime: 3 * time.Hour}, r)
	sb := e.create("")
	e.waitFor(sb.ID, "ready", func(s domain.Sandbox) bool { return s.State == domain.StateReady })
	r.mu.Lock()
	spec := r.specs[sb.ID]
	r.mu.Unlock()
	if want := sb.CreatedAt.Add(3 * time.Hour); !spec.EndBy.Equal(want) {
		t.Errorf("CreateSpec.EndBy = %v, want creation plus MaxLifetime, %v", spec.EndBy, want)
	}
}
