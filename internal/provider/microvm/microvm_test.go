package microvm_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/microvm"
	"github.com/tetherhq/tether/internal/provider/microvm/microvmtest"
	"github.com/tetherhq/tether/provider"
)

// TestGuestIsItsOwnMachine: a sandbox runs its own kernel (not the
// host's), as the guest's unprivileged user, with nothing of Tether's
// environment, and sees none of the host's files.
func TestGuestIsItsOwnMachine(t *testing.T) {
	t.Setenv("TETHER_TEST_SECRET", "host-secret-value")
	p := microvmtest.New(t, t.TempDir())
	id := provider.NewSandboxID()
	start := time.Now()
	res, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created in %s", time.Since(start))
	t.Cleanup(func() { _ = p.Destroy(t.Context(), id) })
	run := func(cmd string) string {
		t.Helper()
		out, err := p.Exec(t.Context(), res.SandboxID, provider.ExecRequest{Command: cmd, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if out.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s", cmd, out.ExitCode, out.Output)
		}
		return strings.TrimSpace(out.Output)
	}
	host, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if guest := run("uname -r"); guest == strings.TrimSpace(string(host)) {
		t.Errorf("the guest runs the host's kernel, %s", guest)
	}
	if id := run("id -u; id -g"); id != "1000\n1000" {
		t.Errorf("commands run as %q, want uid and gid 1000", id)
	}
	env := run("env")
	if strings.Contains(env, "host-secret-value") || !strings.Contains(env, "GREETING=hi") {
		t.Errorf("the guest's environment:\n%s\nwant the sandbox's GREETING and nothing of Tether's", env)
	}
	if out := run("ls /work /usr/local/go 2>&1 || true"); !strings.Contains(out, "No such file") {
		t.Errorf("the guest sees host folders: %s", out)
	}
	if pwd := run("pwd"); pwd != microvm.WorkDir {
		t.Errorf("commands start in %s, want %s", pwd, microvm.WorkDir)
	}
}
