package local_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
	"github.com/tetherhq/tether/test/harness"
)

// TestConformance runs the provider SDK's suite against real bubblewrap
// sandboxes. Like the package's other tests it needs bwrap and root, and
// fails without them (make test and .ci/run install them).
//
// It is not parallel with the package's other tests: its dozens of
// sandboxes at once would skew the timing of TestResourceLimits, whose
// sandbox must fork again right after its hogs are killed. Its own
// subtests run in parallel, before the other tests start.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		NewState: func(t *testing.T) string { return harness.ReachableTempDir(t) },
		Open: func(t *testing.T, dir string) provider.Provider {
			p, err := local.New(dir, local.WithProcessLimits(6, 64<<10))
			if err != nil {
				t.Fatal(err)
			}
			if info := p.Info(t.Context()); !info.Available {
				t.Fatalf("local provider unavailable: %s", info.Reason)
			}
			return p
		},
		// The sandbox's init dies as in a crash or an OOM kill; its folder
		// stays.
		Kill: func(t *testing.T, res provider.Resource) {
			pid, err := strconv.Atoi(strings.TrimPrefix(res.ProviderID, "local-"))
			if err != nil {
				t.Fatalf("provider id %q does not name the init's pid", res.ProviderID)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
		// Only a size-limited workspace has an image to snapshot.
		SnapshotParams: `{"workspace_mb":16}`,
		Ports: &providertest.PortServer{Port: 8000, Serve: func(t *testing.T, p provider.Provider, res provider.Resource) {
			_, err := p.(provider.Execer).Exec(t.Context(), res.SandboxID, provider.ExecRequest{Timeout: time.Minute,
				Command: "(python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"})
			if err != nil {
				t.Fatalf("starting a web server in the sandbox: %v", err)
			}
		}},
		ProcessLimit:  6,
		ProcessOutput: 64 << 10,
		BadParams:     []string{`{"network":"moon"}`, `{"memory":1}`, `{"pids":-1}`, `{"image":"no-such-image"}`, `[1]`},
	})
}
