package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
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

// TestSettingsAreDocumented: every setting the registration declares is a
// row of docs/configuration.md with the same default, and every SIM_ row
// there is declared.
func TestSettingsAreDocumented(t *testing.T) {
	t.Parallel()
	documented := harness.DocumentedSettings(t)
	declared := map[string]bool{}
	for _, s := range sim.Registration.Settings {
		declared[s.Name] = true
		if def, ok := documented[s.Name]; !ok || def != s.Default || s.Doc == "" {
			t.Errorf("%s: default %q, doc %q; docs/configuration.md: %q (listed %v)", s.Name, s.Default, s.Doc, def, ok)
		}
	}
	for name := range documented {
		if strings.HasPrefix(name, "SIM_") && !declared[name] {
			t.Errorf("docs/configuration.md documents %s; sim.Registration does not declare it", name)
		}
	}
}
