package docs_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// lintDir holds the pinned Spectral (package.json and its committed
// package-lock.json); node_modules there is not committed.
const lintDir = "../tools/openapi-lint"

// TestOpenAPILint lints docs/openapi.yaml with Spectral (the version pinned
// in tools/openapi-lint) and the ruleset docs/.spectral.yaml (spectral:oas),
// and fails on any warning or error: fix the annotations or the converter
// and run `make docs`, or disable the rule in docs/.spectral.yaml with the
// reason. npm ci runs first when node_modules is missing or older than the
// lockfile. It needs Node.js 20 or later.
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to lint the OpenAPI document (Node.js 20 or later)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = lintDir
		// Scarf, a dependency of Spectral, reports installs unless told not to.
		cmd.Env = append(os.Environ(), "SCARF_ANALYTICS=false", "DO_NOT_TRACK=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		t.Logf("%s %v:\n%s", name, args, out)
	}
	if harness.NodeModulesStale(lintDir) {
		run("npm", "ci", "--no-audit", "--no-fund")
	}
	run("npx", "--no-install", "spectral", "lint",
		"--ruleset", "../../docs/.spectral.yaml",
		"--fail-severity=warn",
		"../../docs/openapi.yaml")
}
