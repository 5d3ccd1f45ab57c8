package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestServerDoesNotLinkTheClient: the server binary does not link the
// generated Go client (clients/go/tether, 29k lines) nor the ops commands
// built on it (internal/cli): they are tetherctl's (cmd/tetherctl), which
// the server runs for them (runOps). Every build tag is set, so that no
// file of the build is left out of the check.
func TestServerDoesNotLinkTheClient(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", "-tags=kubernetes,nomsgpack", "-f", "{{.ImportPath}}", ".")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || deps[len(deps)-1] != "github.com/tetherhq/tether/cmd/api" {
		t.Fatalf("go list -deps listed %d packages, ending %q: not the server's dependencies", len(deps), deps[len(deps)-1:])
	}
	for _, p := range deps {
		switch p {
		case "github.com/tetherhq/tether/clients/go/tether", "github.com/tetherhq/tether/internal/cli",
			"github.com/oapi-codegen/runtime":
			t.Errorf("the server binary links %s (tetherctl's); go list -deps ./cmd/api shows what pulls it in", p)
		}
	}
}
