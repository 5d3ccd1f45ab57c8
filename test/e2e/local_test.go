// Package e2e drives a real `tether serve` process with real bubblewrap
// sandboxes over real HTTP: the acceptance story of the local provider, and
// what happens to sandboxes when Tether is killed with SIGKILL.
package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/test/harness"
)

const key = "e2e-key"

type env struct {
	t        *testing.T
	replica  *harness.Replica
	client   harness.Client
	stateDir string
}

// setup starts a replica on a fresh database, with extra environment
// after the defaults (a later value of a name wins).
func setup(t *testing.T, extra ...string) *env {
	t.Helper()
	stateDir := harness.ReachableTempDir(t)
	vars := append([]string{
		"DATABASE_URL=" + storetest.NewURL(t),
		"BOOTSTRAP_API_KEY=" + key,
		"PROVIDERS=local,sim",
		"LOCAL_STATE_DIR=" + stateDir,
		"SIM_STATE_DIR=" + t.TempDir(),
		"JANITOR_INTERVAL=1s",
		"ORPHAN_GRACE=1s",
		"DEFAULT_OWNER_TTL=3s",
		"EXECUTOR_LEASE=3s",
	}, extra...)
	r := harness.NewReplica(t, harness.Build(t), filepath.Join(t.TempDir(), "tether.log"), vars...)
	r.Start()
	r.WaitReady(60 * time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tether log:\n%s", harness.Tail(r.LogPath, 60))
		}
	})
	e := &env{t: t, replica: r, client: harness.Client{Key: key}, stateDir: stateDir}
	// Registered after the replica's own cleanup, so it runs first: a test
	// leaves no sandbox running on the host.
	t.Cleanup(e.endAll)
	return e
}

// endAll ends every pool and every live sandbox through the API and waits
// for their release, while the replica runs; then it kills whatever still
// runs from the test's state folder (a replica the test killed cannot
// release). The pools go first: a pool would refill the members deleted
// here, and the new ones would outlive the test.
func (e *env) endAll() {
	if e.replica.Alive() {
		if code, pools, err := e.client.Do(http.MethodGet, e.replica.URL()+"/v1/pools", nil); err == nil && code == http.StatusOK {
			items, _ := pools["items"].([]any)
			for _, it := range items {
				name, _ := it.(map[string]any)["name"].(string)
				_, _, _ = e.client.Do(http.MethodDelete, e.replica.URL()+"/v1/pools/"+name, nil)
			}
		}
		code, list, err := e.client.Do(http.MethodGet, e.replica.URL()+"/v1/sandboxes?limit=500&released=false", nil)
		if err == nil && code == http.StatusOK {
			items, _ := list["items"].([]any)
			for _, it := range items {
				id, _ := it.(map[string]any)["id"].(string)
				_, _, _ = e.client.Do(http.MethodDelete, e.replica.URL()+"/v1/sandboxes/"+id, nil)
			}
			deadline := time.Now().Add(30 * time.Second)
			for _, it := range items {
				id, _ := it.(map[string]any)["id"].(string)
				for time.Now().Before(deadline) {
					_, sb, err := e.client.Do(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+id, nil)
					if err != nil || released(sb) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}
	harness.KillSandboxes(e.t, e.stateDir)
}

func (e *env) do(method, path string, body any) (int, map[string]any) {
	e.t.Helper()
	code, out, err := e.client.Do(method, e.replica.URL()+path, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, out
}

// createReady creates a sandbox and waits for it to be ready.
func (e *env) createReady(body map[string]any) string {
	e.t.Helper()
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", body)
	if code != http.StatusAccepted {
		e.t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)
	code, sb = e.do(http.MethodGet, "/v1/sandboxes/"+id+"?wait=60s", nil)
	if code != http.StatusOK || sb["state"] != "ready" {
		e.t.Fatalf("sandbox %s did not become ready: %d %v", id, code, sb)
	}
	return id
}

func (e *env) exec(id, command string) (int, map[string]any) {
	e.t.Helper()
	return e.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": command, "timeout_seconds": 30})
}

// waitFor polls the sandbox until cond holds.
func (e *env) waitFor(id, what string, cond func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, sb := e.do(http.MethodGet, "/v1/sandboxes/"+id, nil)
		if cond(sb) {
			return sb
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandbox %s never became %s: %v", id, what, sb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func released(sb map[string]any) bool { return sb["released"] == true }

// running reports whether a host process's command line contains marker.
func running(marker string) bool {
	return exec.Command("pgrep", "-f", marker).Run() == nil
}

func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for running(marker) {
		if time.Now().After(deadline) {
			t.Fatalf("process %q still runs on the host", marker)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func marker(t *testing.T) string {
	return fmt.Sprintf("sleep 9%07d", time.Now().UnixNano()%10_000_000)
}

// TestAcceptanceStory is the README's local-provider session.
func TestAcceptanceStory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local", "owner": "agent-1"})

	code, res := e.exec(id, `printf 'OPEN_SANDBOX_ALIVE\n'`)
	if code != http.StatusOK || res["output"] != "OPEN_SANDBOX_ALIVE\n" || res["exit_code"] != 0.0 || res["truncated"] != false {
		t.Fatalf("exec = %d %v", code, res)
	}

	content := "print('hello from tether')\n"
	req, _ := http.NewRequest(http.MethodPut, e.replica.URL()+"/v1/sandboxes/"+id+"/files?path=/workspace/hello.py", strings.NewReader(content))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload = %v %v", resp, err)
	}
	_ = resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+id+"/files?path=/workspace/hello.py", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != content {
		t.Fatalf("download = %d %q", resp.StatusCode, got)
	}

	bg := marker(t)
	if code, res := e.exec(id, bg+" >/dev/null 2>&1 & echo started"); code != http.StatusOK || res["output"] != "started\n" {
		t.Fatalf("background exec = %d %v", code, res)
	}
	// The shell answered once it forked the process; the process runs (its
	// command line names the marker) a moment later.
	for deadline := time.Now().Add(10 * time.Second); !running(bg); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the background process is not running on the host")
		}
	}

	code, sb := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil)
	if code != http.StatusAccepted || sb["state"] != "terminated" {
		t.Fatalf("delete = %d %v", code, sb)
	}
	code, res = e.exec(id, `printf 'OPEN_SANDBOX_ALIVE\n'`)
	if code != http.StatusConflict || res["code"] != "SANDBOX_STATE_CONFLICT" || res["state"] != "terminated" {
		t.Errorf("exec after delete = %d %v, want 409 SANDBOX_STATE_CONFLICT terminated", code, res)
	}
	e.waitFor(id, "released", released)
	waitGone(t, bg)
	if _, err := os.Stat(filepath.Join(e.stateDir, id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's folder is still there (%v)", err)
	}
}

func TestSetupFailureFailsAndCleansUp(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "setup": "echo no-such-tool >&2; exit 42"})
	if code != http.StatusAccepted {
		t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)
	_, sb = e.do(http.MethodGet, "/v1/sandboxes/"+id+"?wait=60s", nil)
	errText, _ := sb["error"].(string)
	if sb["state"] != "failed" || sb["reason"] != "create_failed" || !strings.Contains(errText, "no-such-tool") || !strings.Contains(errText, "42") {
		t.Fatalf("sandbox after a failing setup = %v", sb)
	}
	e.waitFor(id, "released", released)
	if _, err := os.Stat(filepath.Join(e.stateDir, id)); !os.IsNotExist(err) {
		t.Errorf("the failed sandbox's folder is still there (%v)", err)
	}
}

// TestSandboxesSurviveTetherCrash: sandboxes are not children that die with
// Tether; after kill -9 and a restart, Tether finds them again and still
// ends and releases them.
func TestSandboxesSurviveTetherCrash(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	bg := marker(t)
	if code, _ := e.exec(id, bg+" >/dev/null 2>&1 &"); code != http.StatusOK {
		t.Fatal("background exec failed")
	}
	e.replica.Kill()
	if !running(bg) {
		t.Fatal("the sandbox died with Tether")
	}
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	if code, res := e.exec(id, "echo after-crash"); code != http.StatusOK || res["output"] != "after-crash\n" {
		t.Fatalf("exec after the restart = %d %v", code, res)
	}
	if code, _ := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil); code != http.StatusAccepted {
		t.Fatal("delete failed")
	}
	e.waitFor(id, "released", released)
	waitGone(t, bg)
}

// TestOrphanIsDestroyed: a sandbox on the host that Tether has no record
// of (it crashed between making it and recording it, say) is destroyed by
// the janitor's reconciliation once Tether runs again.
func TestOrphanIsDestroyed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// Tether is down while the orphan is made and a process started in
	// it, as after the crash. A running janitor destroys an orphan once
	// it is ORPHAN_GRACE (1s) old, counted from the start of its create:
	// on a loaded machine that came before or during the exec below,
	// which found the orphan's init dead ("nsenter: cannot open
	// /proc/N/ns/cgroup").
	e.replica.Kill()
	p, err := local.New(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	orphan := domain.NewID()
	if _, err := p.Create(t.Context(), domain.CreateSpec{SandboxID: orphan}); err != nil {
		t.Fatal(err)
	}
	bg := marker(t)
	if res, err := p.Exec(t.Context(), orphan, domain.ExecRequest{Command: bg + " >/dev/null 2>&1 &"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the orphan: %v %+v", err, res)
	}
	if !running(bg) {
		t.Fatal("the orphan's process is not running")
	}
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	waitGone(t, bg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(e.stateDir, orphan)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the orphan's folder is still there")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Reap the bwrap process this test started.
	if err := p.Destroy(t.Context(), orphan); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerCrash: an owner that stops heartbeating loses its sandboxes
// within its lease plus one janitor interval.
func TestOwnerCrash(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local", "owner": "crashy"})
	bg := marker(t)
	e.exec(id, bg+" >/dev/null 2>&1 &")
	start := time.Now()
	sb := e.waitFor(id, "ended", func(sb map[string]any) bool { return sb["state"] == "terminated" })
	if sb["reason"] != "owner_expired" {
		t.Errorf("reason = %v, want owner_expired", sb["reason"])
	}
	// The 3s lease started at create; one 1s janitor interval on top, and
	// slack for a loaded machine.
	if took := time.Since(start); took > 3*time.Second+time.Second+3*time.Second {
		t.Errorf("the sandbox outlived its owner by %s", took)
	}
	e.waitFor(id, "released", released)
	waitGone(t, bg)
}
