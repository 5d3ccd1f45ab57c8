package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/test/harness"
)

// TestPythonClient runs the dependency-free Python client's unittest suite
// (clients/python) with the system python3 against a live Tether.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed for the client tests")
	}
	e := setup(t)
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_tether_client")
	cmd.Dir = filepath.Join(harness.RepoRoot(t), "clients", "python")
	cmd.Env = append(os.Environ(),
		"TETHER_URL="+e.replica.URL(), "TETHER_API_KEY="+key, "TETHER_JANITOR_INTERVAL=1",
		"PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") || !strings.Contains(string(out), "\nOK") {
		t.Fatal("the Python client's tests did not all run")
	}
}
