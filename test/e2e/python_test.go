package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// systemPython is the interpreter the Python client is tested with: Debian's,
// where scripts/deps.sh installs python3-httpx, python3-pytest and
// python3-pytest-asyncio (a python3 earlier in PATH, such as pyenv's, may
// lack them).
const systemPython = "/usr/bin/python3"

// pytestSummary is pytest's closing line, e.g. "23 passed, 1 xfailed in 31.68s".
var pytestSummary = regexp.MustCompile(`(?m)^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s`)

// TestPythonClient runs the Python client's test suite (clients/python/tests,
// pytest) against a live Tether with the local provider: real bubblewrap
// sandboxes, a 1 s janitor and a 3 s default owner TTL.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	python := systemPython
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatal("python3 is needed for the Python client's tests (scripts/deps.sh installs it)")
		}
	}
	if out, err := exec.Command(python, "-c", "import httpx, pytest, pytest_asyncio").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks the Python client's test dependencies (scripts/deps.sh installs python3-httpx python3-pytest python3-pytest-asyncio): %v\n%s", python, err, out)
	}
	// The webhook tests run their receivers on loopback; the network test
	// stores secrets.
	e := setup(t, "WEBHOOK_ALLOW_PRIVATE=true", "SECRETS_KEY=dGV0aGVyLXB5dGhvbi10ZXN0cy1zZWNyZXQta2V5ISE=")
	root := harness.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-rsxXfE", "-p", "no:cacheprovider", filepath.Join("clients", "python", "tests"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TETHER_URL="+e.replica.URL(), "TETHER_API_KEY="+key, "TETHER_JANITOR_INTERVAL=1",
		"PYTHONPATH="+filepath.Join(root, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m pytest -q clients/python/tests:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	m := pytestSummary.FindAllStringSubmatch(string(out), -1)
	if m == nil {
		t.Fatal("pytest reported no summary: did any test run?")
	}
	summary := m[len(m)-1][1]
	if !strings.Contains(summary, " passed") {
		t.Fatalf("pytest ran no test (%s)", summary)
	}
	for _, bad := range []string{"skipped", "xfailed", "xpassed", "deselected", "failed", "error"} {
		if strings.Contains(summary, bad) {
			t.Fatalf("the Python client's tests did not all run and pass (%s): see the reasons above", summary)
		}
	}
}
