package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

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
	run := nodeRunner(ctx, t, dir)
	run(nil, "npx", "--no-install", "tsc", "--strict", "--noEmit", "-p", ".")

	// The webhook tests run their receivers on loopback; the network test
	// stores secrets.
	e := setup(t, "WEBHOOK_ALLOW_PRIVATE=true", "SECRETS_KEY=dGV0aGVyLXR5cGVzY3JpcHQtdGVzdC1rZXktMzIhISE=")
	out := run([]string{"TETHER_URL=" + e.replica.URL(), "TETHER_API_KEY=" + key, "TETHER_JANITOR_INTERVAL=1"}, "npm", "test")
	wantNodeTestsPassed(t, "the TypeScript client's tests", out)
}
