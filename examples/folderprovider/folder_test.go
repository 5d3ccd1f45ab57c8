package folder_test

import (
	"testing"

	"example.com/folderprovider"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
)

// TestConformance runs Tether's provider conformance suite against the
// folder provider.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		NewState: func(t *testing.T) string { return t.TempDir() },
		Open: func(t *testing.T, dir string) provider.Provider {
			p, err := folder.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		BadParams: []string{`{"size":"huge"}`},
	})
}
