package sim_test

import (
	"testing"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
)

// TestConformance runs the provider SDK's suite. The sim has none of the
// optional capabilities and nothing that can die behind its back, so the
// exec, files, archives and defunct subtests skip.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		NewState: func(t *testing.T) string { return t.TempDir() },
		Open: func(t *testing.T, dir string) provider.Provider {
			p, err := sim.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		BadParams: []string{`{"fail":"sometimes"}`, `{"create_delay_ms":-1}`, `{"colour":"red"}`, `[1]`},
	})
}
