package sim_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
)

func TestRegistration(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "inventory")
	p, err := sim.Registration.Open(t.Context(), func(k string) string { return map[string]string{"SIM_STATE_DIR": dir}[k] })
	if err != nil {
		t.Fatal(err)
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, id)); err != nil {
		t.Errorf("the registered sim does not keep its inventory in SIM_STATE_DIR: %v", err)
	}
}
