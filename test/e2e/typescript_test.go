package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// nodeTestCount matches the counters node's test runner prints at the end
// ("# tests 21", "# pass 21", "# fail 0", ...).
var nodeTestCount = regexp.MustCompile(`(?m)^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)

// TestTypeScriptClient runs the TypeScript client's checks and tests
// (clients/typescript: tsc --strict --noEmit, then node --test) against a live
// Tether with the local provider: real bubblewrap sandboxes, a 1 s janitor
// and a 3 s default owner TTL. npm ci runs first when node_modules is
// missing or older than the lockfile.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the TypeScript client's tests (Node.js 20 or later)", tool)
		}
	}
	root := harness.RepoRoot(t)
	dir := filepath.Join(root, "clients", "typescript")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		t.Logf("%s %v:\n%s", name, args, out)
		if err != nil {
			t.Fatalf("%s %v failed: %v", name, args, err)
		}
		return string(out)
	}
	if harness.NodeModulesStale(dir) {
		run(nil, "npm", "ci", "--no-audit", "--no-fund")
	}
	run(nil, "npx", "--no-install", "tsc", "--strict", "--noEmit", "-p", ".")

	e := setup(t)
	out := run([]string{"TETHER_URL=" + e.replica.URL(), "TETHER_API_KEY=" + key, "TETHER_JANITOR_INTERVAL=1"}, "npm", "test")
	counts := map[string]int{}
	for _, m := range nodeTestCount.FindAllStringSubmatch(out, -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	if _, ok := counts["tests"]; !ok {
		t.Fatal("node --test printed no summary: did any test run?")
	}
	if counts["tests"] == 0 || counts["pass"] != counts["tests"] {
		t.Fatalf("the TypeScript client's tests did not all run and pass: %v", counts)
	}
	for _, bad := range []string{"fail", "cancelled", "skipped", "todo"} {
		if counts[bad] != 0 {
			t.Fatalf("the TypeScript client's tests did not all run and pass (%s %d): %v", bad, counts[bad], counts)
		}
	}
}
