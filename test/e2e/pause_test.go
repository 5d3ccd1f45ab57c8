package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPauseLocal: the pause story through a real tether process and a
// real bubblewrap sandbox. A background loop started before the pause is
// frozen (its count stops), exec on the paused sandbox is 409
// SANDBOX_STATE_CONFLICT, and after the resume the same loop counts on;
// deleting the sandbox, paused again, releases it and leaves none of its
// processes on the host.
func TestPauseLocal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createReady(map[string]any{"provider": "local"})
	marker := "sleep 0.0" + strconv.FormatInt(time.Now().UnixNano()%1_000_000+1, 10)
	loop := `(echo $$ > /workspace/pid; i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; ` + marker + `; done) </dev/null >/dev/null 2>&1 & echo started`
	if code, out := e.exec(id, loop); code != http.StatusOK || out["output"] != "started\n" {
		t.Fatalf("exec of the loop = %d %v", code, out)
	}
	count := func() (pid, n int) {
		t.Helper()
		code, out := e.exec(id, "cat /workspace/pid /workspace/n")
		fields := strings.Fields(out["output"].(string))
		if code != http.StatusOK || len(fields) != 2 {
			t.Fatalf("reading the loop's count = %d %v", code, out)
		}
		pid, _ = strconv.Atoi(fields[0])
		n, _ = strconv.Atoi(fields[1])
		return pid, n
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, out := e.exec(id, "test -s /workspace/n && echo yes"); code == http.StatusOK && out["output"] == "yes\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop never counted")
		}
	}
	pid, _ := count()

	code, sb := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/pause?wait=30s", nil)
	if code != http.StatusAccepted || sb["state"] != "paused" {
		t.Fatalf("pause?wait = %d %v, want 202 and paused", code, sb)
	}
	code, out := e.exec(id, "echo no")
	if code != http.StatusConflict || out["code"] != "SANDBOX_STATE_CONFLICT" || out["state"] != "paused" {
		t.Errorf("exec on the paused sandbox = %d %v, want 409 SANDBOX_STATE_CONFLICT, state paused", code, out)
	}
	if code, sb := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/pause", nil); code != http.StatusOK || sb["state"] != "paused" {
		t.Errorf("a second pause = %d %v, want 200 paused", code, sb)
	}

	code, sb = e.do(http.MethodPost, "/v1/sandboxes/"+id+"/resume?wait=30s", nil)
	if code != http.StatusAccepted || sb["state"] != "ready" {
		t.Fatalf("resume?wait = %d %v, want 202 and ready", code, sb)
	}
	again, before := count()
	if again != pid {
		t.Errorf("the loop's pid is %d after the resume, was %d", again, pid)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, n := count(); n > before+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop does not count after the resume (stuck at %d)", before)
		}
	}
	// The loop sleeps most of the time, between two short commands.
	for deadline := time.Now().Add(10 * time.Second); !running(marker); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loop's sleep is not on the host")
		}
	}

	// Paused again, then deleted: released, and nothing of it left.
	if code, sb := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/pause?wait=30s", nil); code != http.StatusAccepted || sb["state"] != "paused" {
		t.Fatalf("second pause?wait = %d %v", code, sb)
	}
	if code, sb := e.do(http.MethodDelete, "/v1/sandboxes/"+id, nil); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("delete of the paused sandbox = %d %v", code, sb)
	}
	e.waitFor(id, "released", released)
	// Looked for a while: a surviving loop is between two sleeps now and
	// then.
	for range 50 {
		if running(marker) {
			t.Fatal("the paused sandbox's loop survived its delete")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
