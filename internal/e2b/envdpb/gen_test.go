package envdpb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCurrent regenerates the Go code from the .proto files into
// a temporary folder and fails when the committed code differs: run
// `make docs` (or go generate ./internal/e2b/envdpb) and commit.
func TestGeneratedCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatal("protoc is needed to check the generated code (apt-get install protobuf-compiler; scripts/deps.sh test installs it)")
	}
	tool := func(name string) string {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		if err != nil {
			t.Fatalf("go tool -n %s: %v", name, err)
		}
		return string(bytes.TrimSpace(out))
	}
	out := t.TempDir()
	files := []string{"process/process.proto", "filesystem/filesystem.proto"}
	cmd := exec.Command("protoc", append([]string{
		"--plugin=protoc-gen-go=" + tool("protoc-gen-go"), "--plugin=protoc-gen-connect-go=" + tool("protoc-gen-connect-go"),
		"-I", ".", "--go_out=" + out, "--go_opt=paths=source_relative",
		"--connect-go_out=" + out, "--connect-go_opt=paths=source_relative",
	}, files...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	for _, f := range []string{
		"process/process.pb.go", "process/processconnect/process.connect.go",
		"filesystem/filesystem.pb.go", "filesystem/filesystemconnect/filesystem.connect.go",
	} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make docs and commit it", f)
		}
	}
}
