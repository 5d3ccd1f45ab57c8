package local

import (
	"os/exec"
	"runtime"
	"testing"

	"github.com/tetherhq/tether/internal/host/seccomp"
)

// TestStartCommandFilterStaysWithTheCommand: a command started under the
// exec filter has it, and the rest of the process does not: commands
// started afterwards, from any thread, may still make namespaces.
func TestStartCommandFilterStaysWithTheCommand(t *testing.T) {
	t.Parallel()
	if f := seccomp.Filter(true); f == nil {
		t.Skipf("no seccomp filter on %s", runtime.GOARCH)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare on this host")
	}
	p := &Provider{execFilter: seccomp.Filter(true)}
	for range 20 {
		//nolint:noctx // ends at once
		filtered := exec.Command(unshare, "--user", "true")
		if err := p.startCommand(filtered, nil); err != nil {
			t.Fatal(err)
		}
		if err := filtered.Wait(); err == nil {
			t.Fatal("unshare --user succeeded under the filter")
		}
		//nolint:noctx // ends at once
		if out, err := exec.Command(unshare, "--user", "true").CombinedOutput(); err != nil {
			t.Fatalf("unshare --user outside the filter: %v: %s", err, out)
		}
	}
}
