package e2e

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/test/harness"
)

// TestConsole runs the web console's browser tests (test/console: node
// --test, playwright-core driving Debian's Chromium) against a live Tether
// with the local and sim providers, a 1 s janitor and a 1 s AUTH_CACHE_TTL
// (a revoked key is refused within a second); webhooks may go to loopback
// (the tests' receiver) and give up after 3 s of failures; the local provider
// has an image, tiny (harness.BuildImage), and exec output is cut at 64 KiB
// (so that a test sees it truncated). Tenant A is the bootstrap
// key's; tenant B gets a key made in the database, as `tether keys create
// --tenant` makes one. npm ci runs first (in test/console, and in
// internal/http/console for the vendored packages) when node_modules is
// missing or older than the lockfile. With UPDATE_SCREENSHOTS=1 the tests save their
// screenshots to docs/console/.
func TestConsole(t *testing.T) {
	t.Parallel()
	chromium := cmp.Or(os.Getenv("CHROMIUM_PATH"), "/usr/bin/chromium")
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("Chromium is needed for the console's browser tests (scripts/deps.sh installs Debian's chromium; or set CHROMIUM_PATH): %v", err)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the console's browser tests (Node.js 20 or later)", tool)
		}
	}
	dir := filepath.Join(harness.RepoRoot(t), "test", "console")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := nodeRunner(ctx, t, dir)
	// The packages the console vendors, installed as pinned, for the test
	// that compares what /ui serves of them with npm's files.
	nodeRunner(ctx, t, filepath.Join(harness.RepoRoot(t), "internal", "http", "console"))

	e := setup(t, "AUTH_CACHE_TTL=1s", "DEFAULT_OWNER_TTL=2m",
		"WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_RETRY_FOR=3s", "WEBHOOK_MAX_BACKOFF=1s",
		"LOCAL_IMAGES=tiny="+harness.BuildImage(t), "MAX_EXEC_OUTPUT=65536")
	pool, err := pgxpool.New(ctx, e.replica.Env("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, otherKey, err := store.New(pool).CreateAPIKey(ctx, "console-tenant-b", "console-test")
	if err != nil {
		t.Fatalf("a key for tenant B: %v", err)
	}

	out := run([]string{
		"TETHER_URL=" + e.replica.URL(),
		"TETHER_API_KEY=" + key,
		"TETHER_OTHER_API_KEY=" + otherKey,
		"TETHER_SIM_STATE_DIR=" + e.replica.Env("SIM_STATE_DIR"),
		"CHROMIUM_PATH=" + chromium,
	}, "node", "--test", "--test-reporter=tap", "--test-concurrency=1")
	wantNodeTestsPassed(t, "the console's browser tests", out)
}
