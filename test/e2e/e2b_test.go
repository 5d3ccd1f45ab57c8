package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// TestE2BSDK runs the real e2b SDK, pinned in test/e2b/package.json,
// against a live Tether's E2B face with the local provider (real
// bubblewrap sandboxes): create, commands foreground and background,
// stdin, files, timeouts, connect, list, kill and their errors, and
// getHost's sandbox hosts (test/e2b).
func TestE2BSDK(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the E2B SDK's tests (Node.js 20 or later)", tool)
		}
	}
	dir := filepath.Join(harness.RepoRoot(t), "test", "e2b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := nodeRunner(ctx, t, dir)
	e := setup(t, "E2B_DOMAIN=e2b.test") // getHost's hosts, reached at the replica's address
	u := e.replica.URL()
	out := run([]string{
		"E2B_API_URL=" + u + "/e2b", "E2B_SANDBOX_URL=" + u + "/e2b/envd", "E2B_API_KEY=" + key,
		"TETHER_URL=" + u, "TETHER_API_KEY=" + key, "TETHER_E2B_DOMAIN=e2b.test",
		"TETHER_OWNER_TTL_SECONDS=3", "TETHER_JANITOR_INTERVAL_SECONDS=1", // as setup sets them
	}, "npm", "test")
	wantNodeTestsPassed(t, "the E2B SDK's tests", out)
}
