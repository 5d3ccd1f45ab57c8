package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tetherhq/tether/internal/openapi"
)

// TestDocsAreCurrent regenerates the API docs as `make docs` does, from the
// code's swag annotations, into a temporary folder, and fails if the
// committed ones differ: run `make docs`. It covers swag's Swagger 2.0
// output, completed with the responses every operation of a group shares
// (internal/openapi), and the OpenAPI 3.0 document converted from it.
func TestDocsAreCurrent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "docs")
	// The arguments of the Makefile's docs target.
	cmd := exec.Command("go", "tool", "swag", "init", "-q",
		"-g", "routes.go", "-d", "internal/http,internal/http/httpapi,internal/http/dataplane,internal/http/processes,internal/http/controlplane,internal/http/events", "-o", out,
		"--outputTypes", "go,json,yaml", "--parseInternal", "--requiredByDefault")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("swag init: %v\n%s", err, b)
	}
	// `make docs` then completes swag's documents and converts them.
	if err := openapi.Generate(out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"docs.go", "swagger.json", "swagger.yaml", "openapi.json", "openapi.yaml"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/%s is stale: run `make docs` and commit the result", name)
		}
	}
}
