package microvm_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/microvm/microvmtest"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
)

// TestConformance runs the provider SDK's suite against real QEMU guests
// (under KVM where it can run a stock kernel, else QEMU's emulation:
// the provider's Info says which).
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		NewState: func(t *testing.T) string { return t.TempDir() },
		Open: func(t *testing.T, dir string) provider.Provider {
			return microvmtest.New(t, dir)
		},
		// QEMU dies as in a crash or the host's OOM kill; the VM's folder
		// stays.
		Kill: func(t *testing.T, res provider.Resource) {
			t.Helper()
			id := strings.TrimPrefix(res.ProviderID, "microvm-")
			b, err := os.ReadFile(filepath.Join(stateOf(t, id), "qemu.pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
		Ports: &providertest.PortServer{Port: 8000, Serve: func(t *testing.T, p provider.Provider, res provider.Resource) {
			_, err := p.(provider.Execer).Exec(t.Context(), res.SandboxID, provider.ExecRequest{Timeout: time.Minute,
				Command: "(python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"})
			if err != nil {
				t.Fatalf("starting a web server in the sandbox: %v", err)
			}
		}},
		BadParams: []string{`{"network":"moon"}`, `{"memory_mb":1}`, `{"cpus":-1}`, `{"disk":1}`, `[1]`},
		Parallel:  3,
		Timeout:   3 * time.Minute,
	})
}

// stateOf finds the folder of a VM among the test's state folders.
func stateOf(t *testing.T, id string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "*", "*", "vms", id))
	if len(matches) == 0 {
		t.Fatalf("no folder of VM %s", id)
	}
	return matches[0]
}
