package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/microvm"
	"github.com/tetherhq/tether/internal/provider/microvm/microvmtest"
)

// microvmSetup starts a replica whose default provider is microvm, its
// VMs in a folder of the test's; a cleanup kills whatever QEMU of that
// folder still runs.
func microvmSetup(t *testing.T) (*env, string) {
	t.Helper()
	state := t.TempDir()
	e := setup(t, "PROVIDERS=microvm,sim", "MICROVM_STATE_DIR="+state, "MICROVM_IMAGE_DIR="+microvmtest.ImageDir(t))
	t.Cleanup(func() {
		for _, pid := range qemusOf(state) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return e, state
}

// qemusOf lists the QEMU processes whose working directory is below
// state: the VMs of that provider folder.
func qemusOf(state string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", p.Name(), "cwd"))
		stat, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err == nil && strings.HasPrefix(cwd, state+"/") && strings.Contains(string(stat), "(qemu-system-x86") && !strings.Contains(string(stat), ") Z") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (e *env) createMicroVM() string {
	e.t.Helper()
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "microvm"})
	if code != http.StatusAccepted {
		e.t.Fatalf("create = %d %v", code, sb)
	}
	id := sb["id"].(string)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, sb = e.do(http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s", nil)
		if code == http.StatusOK && sb["state"] == "ready" {
			return id
		}
		if code != http.StatusOK || sb["state"] == "failed" || time.Now().After(deadline) {
			e.t.Fatalf("sandbox %s did not become ready: %d %v", id, code, sb)
		}
	}
}

// TestMicroVMThroughTether: a microvm sandbox made and used through the
// API is a VM with its own kernel; it outlives a kill -9 of Tether, which
// finds it again after a restart; its delete leaves no QEMU behind.
func TestMicroVMThroughTether(t *testing.T) {
	t.Parallel()
	e, state := microvmSetup(t)
	id := e.createMicroVM()
	host, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	code, res := e.exec(id, "uname -r; echo hello > /workspace/greeting")
	if code != http.StatusOK || res["exit_code"] != float64(0) || strings.TrimSpace(res["output"].(string)) == strings.TrimSpace(string(host)) {
		t.Fatalf("exec = %d %v (the host's kernel is %s)", code, res, host)
	}
	if len(qemusOf(state)) != 1 {
		t.Fatalf("QEMUs of the test's folder: %v, want one", qemusOf(state))
	}

	e.replica.Kill()
	if len(qemusOf(state)) != 1 {
		t.Fatal("the VM died with Tether")
	}
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	if code, res := e.exec(id, "cat /workspace/greeting"); code != http.StatusOK || res["output"] != "hello\n" {
		t.Fatalf("exec after the restart = %d %v", code, res)
	}
	if code, _ := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil); code != http.StatusAccepted {
		t.Fatal("delete failed")
	}
	e.waitFor(id, "released", released)
	if left := qemusOf(state); len(left) != 0 {
		t.Errorf("QEMU still runs after the release: %v", left)
	}
	if _, err := os.Stat(filepath.Join(state, "vms", id)); !os.IsNotExist(err) {
		t.Errorf("the VM's folder is still there (%v)", err)
	}
}

// TestMicroVMOrphanIsDestroyed: a VM made while Tether was down, which
// the registry has no record of, is destroyed by the janitor once Tether
// runs again.
func TestMicroVMOrphanIsDestroyed(t *testing.T) {
	t.Parallel()
	e, state := microvmSetup(t)
	e.replica.Kill()
	p, err := microvm.New(microvm.Config{StateDir: state, ImageDir: microvmtest.ImageDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	orphan := domain.NewID()
	if _, err := p.Create(t.Context(), domain.CreateSpec{SandboxID: orphan}); err != nil {
		t.Fatal(err)
	}
	if len(qemusOf(state)) != 1 {
		t.Fatal("the orphan's QEMU does not run")
	}
	e.replica.Start()
	e.replica.WaitReady(60 * time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for len(qemusOf(state)) > 0 || exists(filepath.Join(state, "vms", orphan)) {
		if time.Now().After(deadline) {
			t.Fatalf("the orphan still runs (QEMUs %v) or its folder is there", qemusOf(state))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestMicroVMForkThroughTether: a memory snapshot asked through the API,
// and two sandboxes created from it, which resume the original's running
// process where it was, each an ordinary sandbox of its own.
func TestMicroVMForkThroughTether(t *testing.T) {
	t.Parallel()
	e, _ := microvmSetup(t)
	id := e.createMicroVM()
	counter := `(sh -c 'echo $PPID' > /workspace/pid; i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; sleep 0.1; done) </dev/null >/dev/null 2>&1 &`
	if code, res := e.exec(id, counter); code != http.StatusOK || res["exit_code"] != float64(0) {
		t.Fatalf("starting the counter: %d %v", code, res)
	}
	count := func(sb string) int {
		t.Helper()
		_, res := e.exec(sb, "cat /workspace/n 2>/dev/null || echo 0")
		n, _ := strconv.Atoi(strings.TrimSpace(res["output"].(string)))
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); count(id) < 3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
	}
	_, pid := e.exec(id, "cat /workspace/pid")
	before := count(id)
	code, sn := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/snapshots?wait=60s", map[string]any{"memory": true})
	if code != http.StatusAccepted || sn["state"] != "ready" || sn["memory"] != true {
		t.Fatalf("memory snapshot = %d %v", code, sn)
	}
	for range 2 {
		code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "microvm", "from_snapshot": sn["id"]})
		if code != http.StatusAccepted {
			t.Fatalf("create from the memory snapshot = %d %v", code, sb)
		}
		fork := sb["id"].(string)
		code, sb = e.do(http.MethodGet, "/v1/sandboxes/"+fork+"?wait=60s", nil)
		if code != http.StatusOK || sb["state"] != "ready" {
			t.Fatalf("the fork %s: %d %v", fork, code, sb)
		}
		if _, got := e.exec(fork, "cat /workspace/pid; kill -0 $(cat /workspace/pid) && echo alive"); got["output"] != pid["output"].(string)+"alive\n" {
			t.Errorf("the fork's counter: %v, want pid %v alive", got["output"], pid["output"])
		}
		if n := count(fork); n < before {
			t.Errorf("the fork counts %d, below the %d before the snapshot", n, before)
		}
	}
}
