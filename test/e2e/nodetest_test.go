package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/tetherhq/tether/test/harness"
)

// nodeRunner returns a function that runs a command in dir (a Node.js
// package) until ctx ends, logging its output and failing t if it fails,
// after installing the package's dependencies (npm ci) when they are
// missing or older than its lockfile.
func nodeRunner(ctx context.Context, t *testing.T, dir string) func(env []string, name string, args ...string) string {
	t.Helper()
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
	return run
}

// nodeTestCount matches the counters node's test runner prints at the end
// of its TAP report ("# tests 21", "# pass 21", "# fail 0", ...).
var nodeTestCount = regexp.MustCompile(`(?m)^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)

// wantNodeTestsPassed fails t unless out, the output of `node --test` with
// the TAP reporter, shows that tests ran and every one passed: none failed,
// was cancelled, skipped or left todo. A runner that found no test file, or
// died before its summary, fails too. what names the tests in messages.
func wantNodeTestsPassed(t *testing.T, what, out string) {
	t.Helper()
	counts := map[string]int{}
	for _, m := range nodeTestCount.FindAllStringSubmatch(out, -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	if _, ok := counts["tests"]; !ok {
		t.Fatalf("%s: node --test printed no summary: did any test run?", what)
	}
	if counts["tests"] == 0 || counts["pass"] != counts["tests"] {
		t.Fatalf("%s did not all run and pass: %v", what, counts)
	}
	for _, bad := range []string{"fail", "cancelled", "skipped", "todo"} {
		if counts[bad] != 0 {
			t.Fatalf("%s did not all run and pass (%s %d): %v", what, bad, counts[bad], counts)
		}
	}
}
