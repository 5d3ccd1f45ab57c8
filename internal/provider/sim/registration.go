package sim

import (
	"cmp"
	"context"

	"github.com/tetherhq/tether/provider"
)

// DefaultStateDir is where the inventory is kept unless SIM_STATE_DIR says
// otherwise.
const DefaultStateDir = ".tether/sim"

// Registration makes the sim one of Tether's providers.
var Registration = provider.Registration{
	Name: Name,
	Settings: []provider.Setting{{
		Name:    "SIM_STATE_DIR",
		Default: DefaultStateDir,
		Doc:     "the folder of the simulated inventory, shared by every replica; made if missing",
	}},
	New: func(_ context.Context, s *provider.Settings) (provider.Provider, error) {
		procMax := cmp.Or(int(s.Int(provider.SettingProcessMax, 0)), DefaultProcessMax)
		procOutput := cmp.Or(s.Int(provider.SettingProcessOutput, 0), DefaultProcessOutput)
		if err := s.Err(); err != nil {
			return nil, err
		}
		p, err := New(s.String("SIM_STATE_DIR"), WithProcessLimits(procMax, procOutput))
		if err != nil {
			return nil, err // not a nil *Provider in a non-nil interface
		}
		return p, nil
	},
	Uses: []string{provider.SettingProcessMax, provider.SettingProcessOutput},
}
