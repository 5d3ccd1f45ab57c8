package kubernetes_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
)

// TestErrNotBuiltInSaysHowToBuild: the error a Tether built without the
// build tag kubernetes refuses PROVIDERS=kubernetes with names the tag and
// the commands that build a Tether with the provider.
func TestErrNotBuiltInSaysHowToBuild(t *testing.T) {
	t.Parallel()
	msg := kubernetes.ErrNotBuiltIn.Error()
	for _, want := range []string{"build tag kubernetes", "make build", "go build -tags kubernetes ./cmd/api", "PROVIDERS=kubernetes make run"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ErrNotBuiltIn does not say %q: %s", want, msg)
		}
	}
}
