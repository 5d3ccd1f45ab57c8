package local_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
)

// uidOf is the uid a sandbox's commands run as (the same number inside and
// on the host).
func uidOf(t *testing.T, p *local.Provider, id string) int {
	t.Helper()
	r := run(t, p, id, `id -u; id -g`)
	var uid, gid int
	fields := strings.Fields(r.Output)
	if len(fields) == 2 {
		uid, _ = strconv.Atoi(fields[0])
		gid, _ = strconv.Atoi(fields[1])
	}
	if uid < local.DefaultUIDBase || uid >= local.DefaultUIDBase+local.DefaultUIDCount || gid != uid {
		t.Fatalf("sandbox %s runs as %q; want one uid and gid of the range", id, r.Output)
	}
	return uid
}

// asHostUser runs command on the host as uid, as a process of that sandbox
// would if it got out of its namespaces.
func asHostUser(uid int, command string) (string, error) {
	//nolint:noctx // short commands
	cmd := exec.Command("sh", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSandboxesHaveTheirOwnUID: two sandboxes run as different host users,
// own their workspaces, and neither can read the other's files or
// processes, through the host's folders or /proc, even from outside their
// namespaces; a per-user kernel limit one exhausts leaves the other alone.
func TestSandboxesHaveTheirOwnUID(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	a, b := create(t, p, provider.CreateSpec{}), create(t, p, provider.CreateSpec{})
	ua, ub := uidOf(t, p, a.SandboxID), uidOf(t, p, b.SandboxID)
	if ua == ub {
		t.Fatalf("both sandboxes run as uid %d", ua)
	}
	for id, uid := range map[string]int{a.SandboxID: ua, b.SandboxID: ub} {
		info, err := os.Stat(filepath.Join(dir, id, "workspace"))
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid || info.Mode().Perm() != 0o700 {
			t.Errorf("workspace of %s: owner %d:%d mode %v, want %d:%d 0700", id, st.Uid, st.Gid, info.Mode().Perm(), uid, uid)
		}
		if r := run(t, p, id, `grep -c "^sandbox:x:$(id -u):$(id -g):" /etc/passwd; stat -c %u /workspace`); r.Output != "1\n"+strconv.Itoa(uid)+"\n" {
			t.Errorf("inside %s: passwd and workspace owner %q", id, r.Output)
		}
	}

	run(t, p, b.SandboxID, `echo secret-of-b > /workspace/private`)
	bInit := strings.TrimPrefix(b.ProviderID, "local-")
	private := filepath.Join(dir, b.SandboxID, "workspace", "private")
	if out, err := asHostUser(ub, "cat "+private); err != nil || out != "secret-of-b\n" {
		t.Fatalf("b's own user reads %q, %v; the check below would prove nothing", out, err)
	}
	for _, target := range []string{
		private,
		"/proc/" + bInit + "/root/workspace/private",
		"/proc/" + bInit + "/environ",
		"/proc/" + bInit + "/cwd/private",
	} {
		if out, err := asHostUser(ua, "cat "+target); err == nil || strings.Contains(out, "secret-of-b") {
			t.Errorf("a's user reads %s: %q, %v", target, out, err)
		}
	}

	// fs.inotify.max_user_instances is counted per host user: a sandbox
	// that takes them all leaves the other's file watchers working.
	hog := `python3 -c '
import ctypes, time
libc = ctypes.CDLL(None)
n = 0
while libc.inotify_init() >= 0:
    n += 1
open("/workspace/hogged", "w").write(str(n))
time.sleep(60)
' >/dev/null 2>&1 &`
	run(t, p, a.SandboxID, hog)
	for deadline := time.Now().Add(20 * time.Second); run(t, p, a.SandboxID, `cat hogged 2>/dev/null`).Output == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the inotify hog did not finish")
		}
	}
	watch := `python3 -c 'import ctypes; print("ok" if ctypes.CDLL(None).inotify_init() >= 0 else "refused")'`
	if r := run(t, p, a.SandboxID, watch); r.Output != "refused\n" {
		t.Fatalf("the hogging sandbox can still watch files (%q): the limit is not reached, the check below proves nothing", r.Output)
	}
	if r := run(t, p, b.SandboxID, watch); r.Output != "ok\n" {
		t.Errorf("the other sandbox cannot watch files: %q", r.Output)
	}
}

// TestUIDsSurviveRestartAndAreFreed: a sandbox keeps its uid across a
// restart of Tether (a new provider over the same folder), a sandbox made
// after the restart gets another, and destroy frees it for a later one.
func TestUIDsSurviveRestartAndAreFreed(t *testing.T) {
	t.Parallel()
	p, dir := newProvider(t)
	first := create(t, p, provider.CreateSpec{}).SandboxID
	uid := uidOf(t, p, first)
	claim := filepath.Join("/run/tether-uids", strconv.Itoa(uid))
	if holder, err := os.Readlink(claim); err != nil || holder != filepath.Join(dir, first) {
		t.Errorf("the uid's claim points at %q, %v; want the sandbox's folder", holder, err)
	}
	again, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := uidOf(t, again, first); got != uid {
		t.Errorf("after a restart the sandbox runs as %d, before as %d", got, uid)
	}
	second := provider.NewSandboxID()
	if _, err := again.Create(t.Context(), provider.CreateSpec{SandboxID: second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Destroy(context.Background(), second) })
	if got := uidOf(t, again, second); got == uid {
		t.Errorf("a sandbox made after the restart got the live sandbox's uid %d", uid)
	}
	if err := p.Destroy(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(claim); !os.IsNotExist(err) {
		t.Errorf("destroy left the uid's claim: %v", err)
	}
}
