//go:build !kubernetes

package server

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
)

// TestKubernetesNotBuiltIn: a Tether built without the build tag
// kubernetes, asked for the provider, refuses to start, before it touches
// the database, with an error that says how to build one that has it.
// (make test runs it too, in a build without the tag.)
func TestKubernetesNotBuiltIn(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		// No database listens there: the start must fail before it is needed.
		"DATABASE_URL": "postgres://tether@127.0.0.1:1/tether?sslmode=disable&connect_timeout=1",
		"PROVIDERS":    "sim,kubernetes", "SIM_STATE_DIR": t.TempDir(), "LISTEN_ADDR": "127.0.0.1:0",
	}
	err := run(t.Context(), []string{"serve"}, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
	if !errors.Is(err, kubernetes.ErrNotBuiltIn) {
		t.Fatalf("serve with PROVIDERS=%s = %v; want kubernetes.ErrNotBuiltIn", env["PROVIDERS"], err)
	}
	for _, want := range []string{"provider kubernetes:", "built without the kubernetes provider", "make build", "go build -tags kubernetes ./cmd/api"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	// Without it named, the same binary starts as ever: its settings are
	// still known (and documented), only the provider is missing.
	if _, _, err := loadAndBuild(t, map[string]string{"PROVIDERS": "sim", "SIM_STATE_DIR": t.TempDir(), "KUBE_NAMESPACE": "x"}); err != nil {
		t.Errorf("PROVIDERS=sim: %v", err)
	}
}
