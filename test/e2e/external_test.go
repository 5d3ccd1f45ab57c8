package e2e

import (
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

// TestExternalProvider is the provider SDK's acceptance: the provider of
// examples/folderprovider, a module of its own that imports only Tether's
// public packages, copied to a folder outside this repository (its
// replace pointed at this checkout, and this module's go.sum beside it so
// that the module cache is enough, offline), compiles without anything
// but the SDK, passes the conformance suite (go test there), and runs
// under a main of its own (go build there) that serves it beside the
// built-in providers: GET /v1/providers lists it, and a sandbox made with
// it becomes ready and is released. It compiles Tether's server once
// more, so -short skips it.
func TestExternalProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a provider module and a server of its own")
	}
	root := harness.RepoRoot(t)
	mod := copyExample(t, root)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// The provider and its test compile the SDK and nothing else of
	// Tether's dependencies.
	for line := range strings.Lines(goCmd("list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{$.ImportPath}}{{end}}", ".")) {
		mod, pkg, _ := strings.Cut(strings.TrimSpace(line), " ")
		if mod != "" && mod != "example.com/folderprovider" && !strings.HasPrefix(pkg, "github.com/tetherhq/tether/provider") {
			t.Errorf("the provider's package compiles %s (module %s): a provider should need only the SDK", pkg, mod)
		}
	}
	if out := goCmd("test", "-race", "-count=1", "-v", "-run", "TestConformance", "."); !strings.Contains(out, "--- PASS: TestConformance") {
		t.Fatalf("the conformance suite did not pass:\n%s", out)
	}
	bin := filepath.Join(t.TempDir(), "tether-folder")
	goCmd("build", "-o", bin, "./cmd/tether-folder")

	state := t.TempDir()
	r := harness.NewReplica(t, bin, filepath.Join(t.TempDir(), "tether.log"),
		"DATABASE_URL="+storetest.NewURL(t), "BOOTSTRAP_API_KEY="+key,
		"PROVIDERS=folder,sim", "FOLDER_STATE_DIR="+state, "SIM_STATE_DIR="+t.TempDir(),
		"JANITOR_INTERVAL=1s")
	r.Start()
	r.WaitReady(60 * time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tether log:\n%s", harness.Tail(r.LogPath, 60))
		}
	})
	e := &env{t: t, replica: r, client: harness.Client{Key: key}}

	code, list := e.do(http.MethodGet, "/v1/providers", nil)
	items, _ := list["items"].([]any)
	if code != http.StatusOK || len(items) != 2 {
		t.Fatalf("GET /v1/providers = %d %v, want folder and sim", code, list)
	}
	if first, _ := items[0].(map[string]any); first["name"] != "folder" || first["default"] != true || first["available"] != true {
		t.Errorf("the first provider is %v, want folder, the default, available", first)
	}
	id := e.createReady(map[string]any{"provider": "folder"})
	if _, err := os.Stat(filepath.Join(state, id)); err != nil {
		t.Errorf("the ready sandbox has no folder: %v", err)
	}
	if code, sb := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil); code != http.StatusAccepted {
		t.Fatalf("DELETE = %d %v", code, sb)
	}
	e.waitFor(id, "released", released)
	if _, err := os.Stat(filepath.Join(state, id)); !os.IsNotExist(err) {
		t.Errorf("the released sandbox's folder is still there: %v", err)
	}
}

// copyExample copies examples/folderprovider to a folder of its own,
// pointing its replace at root and giving it root's go.sum.
func copyExample(t *testing.T, root string) string {
	t.Helper()
	src, dst := filepath.Join(root, "examples", "folderprovider"), t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "go.mod" {
			b = []byte(strings.Replace(string(b), "=> ../..", "=> "+root, 1))
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
