package sim_test

import (
	"testing"

	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
)

// TestConformance runs the provider SDK's suite. The sim has nothing that
// can die behind its back, and of the optional capabilities only pause,
// snapshots, ports and (simulated) processes, so the exec, files,
// archives, terminal, watch and defunct subtests skip.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		NewState: func(t *testing.T) string { return t.TempDir() },
		Open: func(t *testing.T, dir string) provider.Provider {
			p, err := sim.New(dir, sim.WithProcessLimits(5, 4<<10))
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Ports:         &providertest.PortServer{Params: `{"ports":[8000]}`, Port: 8000},
		ProcessLimit:  5,
		ProcessOutput: 4 << 10,
		BadParams:     []string{`{"fail":"sometimes"}`, `{"create_delay_ms":-1}`, `{"colour":"red"}`, `[1]`},
	})
}
