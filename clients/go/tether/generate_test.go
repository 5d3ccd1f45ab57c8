package tether_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestClientIsCurrent regenerates the client from docs/openapi.yaml, as
// doc.go's go:generate line does, and fails if tether.gen.go differs:
// run `make docs`.
func TestClientIsCurrent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "tether.gen.go")
	cmd := exec.Command("go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "tether",
		"-o", out, "../../../docs/openapi.yaml")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("tether.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("clients/go/tether/tether.gen.go is stale: run `make docs` and commit the result")
	}
}
