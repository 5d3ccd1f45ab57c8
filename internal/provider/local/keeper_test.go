package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// TestSandboxSurvivesKillingItsInit: what an agent's clean-up does inside
// its sandbox (kill everything it may, kill the init's first process, kill
// every sh) leaves the sandbox running: its init stays, exec still works,
// and List does not call it defunct. Before the keeper, each of these
// ended the sandbox (its init exited with its last child).
func TestSandboxSurvivesKillingItsInit(t *testing.T) {
	t.Parallel()
	p, _ := newProvider(t)
	for _, attack := range []string{
		`kill -9 -1`,
		`kill -9 2`,
		`pkill -9 -x sh`,
		`kill -9 1`,
		`kill -9 $(ps -eo pid= | grep -vw "$$")`,
		`pkill -9 sleep; pkill -9 -x sh`,
		`(sleep 600 &); sleep 0.1; kill -9 -1`, // background work of its own, which the kill takes too
	} {
		t.Run(attack, func(t *testing.T) {
			t.Parallel()
			id := create(t, p, provider.CreateSpec{}).SandboxID
			res, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: attack + `; echo done`, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("exec of %q: %v", attack, err)
			}
			t.Logf("%s: exit %d, %q", attack, res.ExitCode, res.Output)
			// Whatever the attack did to its own shell, the sandbox lives:
			// for a while after it, and for exec.
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if r := run(t, p, id, `echo alive`); r.Output != "alive\n" {
					t.Fatalf("after %q: exec = %+v", attack, r)
				}
			}
			list, err := p.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list {
				if r.SandboxID == id && r.Defunct {
					t.Fatalf("after %q the sandbox is defunct", attack)
				}
			}
			// Orphans are still reaped.
			run(t, p, id, `for i in $(seq 20); do sh -c 'sleep 0.05 & exit 0'; done`)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				r := run(t, p, id, `ps -eo stat= | grep -c '^Z'`)
				if strings.TrimSpace(r.Output) == "0" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %q, %s zombies: the init no longer reaps", attack, strings.TrimSpace(r.Output))
				}
			}
		})
	}
}
