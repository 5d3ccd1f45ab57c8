package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDocsAreCurrent regenerates the OpenAPI docs from the code's swag
// annotations and fails if the committed ones differ: run `make docs`.
func TestDocsAreCurrent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "docs")
	cmd := exec.Command("go", "tool", "swag", "init", "-q",
		"-g", "routes.go", "-d", "internal/http", "-o", out,
		"--outputTypes", "go,json,yaml", "--parseInternal")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("swag init: %v\n%s", err, b)
	}
	for _, name := range []string{"docs.go", "swagger.json", "swagger.yaml"} {
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
