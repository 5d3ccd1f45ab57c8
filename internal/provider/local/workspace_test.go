package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/host/workspace"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// newWorkspaceProvider returns a provider over a fresh state folder whose
// workspace size limit is available.
// noWorkspaceLimit is the default limits with no /workspace size limit.
func noWorkspaceLimit() Option {
	return WithLimits(Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB},
		Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: DefaultMaxWorkspaceMB})
}

func newWorkspaceProvider(t *testing.T, opts ...Option) (*Provider, string) {
	t.Helper()
	dir := harness.ReachableTempDir(t)
	p, err := New(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if p.problem != "" {
		t.Fatalf("local provider unavailable: %s", p.problem)
	}
	if p.workspace.Problem() != "" {
		t.Fatalf("workspace size limit unavailable: %s", p.workspace.Problem())
	}
	return p, dir
}

// workspaceLeft lists what the host still holds of the workspace of the
// sandbox folder dir: a mount (in /proc/mounts), a loop device (in sysfs and
// in losetup's list) and the image.
func workspaceLeft(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			left = append(left, "mount "+line)
		}
	}
	id := filepath.Base(dir)
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), id) {
			left = append(left, "loop device "+f+": "+strings.TrimSpace(string(b)))
		}
	}
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, id) {
			left = append(left, "losetup: "+line)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, workspace.ImageFile)); err == nil {
		left = append(left, "image")
	}
	return left
}

// attachLoop attaches a loop device to img the way a crash could leave it:
// not mounted, and without detaching itself.
func attachLoop(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() }) // if the test failed to
	return dev
}

// TestWorkspaceSizeLimit: a sandbox with workspace_mb 64 that writes 200 MB
// into /workspace gets ENOSPC, the host's disk holds no more than its image
// of 64 MiB, a second sandbox's exec stays quick meanwhile, /tmp is not
// counted against it, the sandbox works on afterwards, and Destroy leaves
// no mount, loop device or image.
func TestWorkspaceSizeLimit(t *testing.T) {
	t.Parallel()
	p, dir := newWorkspaceProvider(t)
	id := createIn(t, p, map[string]any{"workspace_mb": 64})
	bystander := createIn(t, p, nil) // made while the other's workspace is mounted
	sbxDir := filepath.Join(dir, id)
	if !workspace.Mounted(filepath.Join(sbxDir, "workspace")) {
		t.Fatal("the workspace is not mounted")
	}
	// What the checks after Destroy look for is there now.
	left := strings.Join(workspaceLeft(t, sbxDir), "\n")
	for _, want := range []string{"mount ", "loop device ", "losetup: ", "image"} {
		if !strings.Contains(left, want) {
			t.Fatalf("before Destroy the host holds %q; want a %q entry", left, want)
		}
	}
	m, err := p.readMeta(id)
	if err != nil || m.Limits.WorkspaceMB != 64 {
		t.Fatalf("meta = %+v, %v; want workspace_mb 64 recorded", m, err)
	}
	// An empty folder of the sandbox's user, mode 0700, of the size asked.
	if got, want := execIn(t, p, id, `stat -c '%u %a' /workspace; ls -A /workspace; df -k --output=size /workspace | tail -n 1`),
		strconv.Itoa(m.UID)+" 700\n"; !strings.HasPrefix(got, want) {
		t.Errorf("/workspace: %q; want owner and mode %q and nothing in it", got, want)
	} else if kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(got, want))); kb < 56<<10 || kb > 64<<10 {
		t.Errorf("/workspace is %d KiB; want about 64 MiB", kb)
	}
	// The bystander, without a limit, has a folder of the host's disk.
	if got := execIn(t, p, bystander, `df -k --output=size /workspace | tail -n 1`); strings.TrimSpace(got) == "" {
		t.Errorf("df in the bystander: %q", got)
	} else if kb, _ := strconv.Atoi(strings.TrimSpace(got)); kb <= 64<<10 {
		t.Errorf("the bystander's /workspace is %d KiB; want the host's disk", kb)
	}

	r, err := p.Exec(t.Context(), id, provider.ExecRequest{Command: `head -c 200M /dev/zero > /workspace/fill; echo exit=$?; du -k /workspace/fill | cut -f1`, Timeout: time.Minute})
	if err != nil || !strings.Contains(r.Output, "No space left on device") || !strings.Contains(r.Output, "exit=1") {
		t.Fatalf("writing 200 MB = %+v; want No space left on device", r)
	}
	lines := strings.Split(strings.TrimSpace(r.Output), "\n")
	if kb, _ := strconv.Atoi(lines[len(lines)-1]); kb > 64<<10 || kb < 32<<10 {
		t.Errorf("the sandbox wrote %d KiB into a workspace of 64 MiB", kb)
	}

	// For three seconds the sandbox fills its workspace again and again;
	// meanwhile the bystander's exec stays quick.
	quick := func() time.Duration {
		start := time.Now()
		if out := execIn(t, p, bystander, `echo ok`); out != "ok\n" {
			t.Errorf("bystander exec = %q", out)
		}
		return time.Since(start)
	}
	baseline := quick()
	done := make(chan provider.ExecResult, 1)
	go func() {
		res, err := p.Exec(context.Background(), id, provider.ExecRequest{
			Command: `end=$(($(date +%s) + 3)); n=0; while [ $(date +%s) -lt $end ]; do rm -f /workspace/fill; head -c 200M /dev/zero > /workspace/fill 2>/dev/null || n=$((n+1)); done; echo full=$n`,
			Timeout: time.Minute,
		})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var slowest time.Duration
	calls := 0
	for filling := true; filling; {
		select {
		case res := <-done:
			filling = false
			if !strings.HasPrefix(res.Output, "full=") || strings.HasPrefix(res.Output, "full=0") {
				t.Errorf("filling again and again = %+v; want every write to end full", res)
			}
		default:
			slowest = max(slowest, quick())
			calls++
		}
	}
	if calls < 3 || slowest > baseline+2*time.Second {
		t.Errorf("the bystander's %d execs took up to %s while the other filled its workspace (baseline %s)", calls, slowest, baseline)
	}
	t.Logf("bystander: %d execs while the other filled its workspace, the slowest %s (baseline %s)", calls, slowest, baseline)
	img, err := os.Stat(filepath.Join(sbxDir, workspace.ImageFile))
	if err != nil {
		t.Fatal(err)
	}
	if used := img.Sys().(*syscall.Stat_t).Blocks * 512; used > 65<<20 || img.Size() != 64<<20 {
		t.Errorf("the image takes %d bytes of the host's disk (size %d); want at most 64 MiB and a little", used, img.Size())
	}
	t.Logf("image: %d KiB on the host's disk after the fill", img.Sys().(*syscall.Stat_t).Blocks/2)

	// An upload into the full workspace fails, saying why, and leaves
	// nothing behind.
	err = p.WriteFile(t.Context(), id, "/workspace/upload", bytes.NewReader(make([]byte, 8<<20)), 16<<20)
	var serr *provider.Error
	if !errors.As(err, &serr) || serr.Code != provider.CodePayloadTooLarge || !strings.Contains(serr.Message, "full") {
		t.Errorf("uploading into the full workspace: %v; want PAYLOAD_TOO_LARGE saying the file system is full", err)
	}
	if out := execIn(t, p, id, `ls -A /workspace`); out != "fill\n" {
		t.Errorf("after the failed upload the workspace holds %q", out)
	}

	// /tmp is not the workspace (the memory limit covers it), and the
	// sandbox goes on working once it frees space.
	if out := execIn(t, p, id, `head -c 100M /dev/zero > /tmp/big && echo tmp-ok; rm /tmp/big`); out != "tmp-ok\n" {
		t.Errorf("writing 100 MB to /tmp: %q", out)
	}
	if out := execIn(t, p, id, `rm /workspace/fill && head -c 10M /dev/zero > /workspace/again && echo again-ok`); out != "again-ok\n" {
		t.Errorf("writing again after freeing space: %q", out)
	}

	if err := p.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := workspaceLeft(t, sbxDir); len(left) > 0 {
		t.Errorf("left after Destroy: %v", left)
	}
	if _, err := os.Lstat(sbxDir); err == nil {
		t.Errorf("the sandbox's folder survived Destroy")
	}
	if out := execIn(t, p, bystander, `echo ok`); out != "ok\n" {
		t.Errorf("the bystander after the other's Destroy: %q", out)
	}
}

// TestWorkspaceAfterCrash: a Tether that dies leaves workspaces mounted.
// The next one keeps a running sandbox's workspace as it is (mounted, its
// files there, the limit in force), and its List and Destroy clear every
// leftover: a complete sandbox, a workspace mounted by a create that died
// before bwrap started, a loop device attached but never mounted, and one
// whose sandbox folder is gone.
func TestWorkspaceAfterCrash(t *testing.T) {
	t.Parallel()
	first, dir := newWorkspaceProvider(t)
	ctx := t.Context()

	complete := provider.NewSandboxID()
	raw := []byte(`{"workspace_mb":32}`)
	if _, err := first.Create(ctx, provider.CreateSpec{SandboxID: complete, Params: raw}); err != nil {
		t.Fatal(err)
	}
	execIn(t, first, complete, `echo kept > /workspace/note`)

	halfway := provider.NewSandboxID()
	if err := os.MkdirAll(filepath.Join(dir, halfway, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := first.workspace.Create(ctx, filepath.Join(dir, halfway), 0, 32); err != nil {
		t.Fatal(err)
	}

	attached := provider.NewSandboxID()
	if err := os.MkdirAll(filepath.Join(dir, attached, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, attached, workspace.ImageFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, attached, workspace.ImageFile), 32<<20); err != nil {
		t.Fatal(err)
	}
	attachLoop(t, filepath.Join(dir, attached, workspace.ImageFile))

	folderless := provider.NewSandboxID()
	if err := os.MkdirAll(filepath.Join(dir, folderless), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, folderless, workspace.ImageFile), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	attachLoop(t, filepath.Join(dir, folderless, workspace.ImageFile))
	if err := os.RemoveAll(filepath.Join(dir, folderless)); err != nil {
		t.Fatal(err)
	}

	ids := []string{complete, halfway, attached, folderless}
	t.Cleanup(func() {
		for _, id := range ids {
			_ = first.Destroy(context.Background(), id) // reaps the first provider's child
		}
	})
	for _, id := range ids {
		if left := workspaceLeft(t, filepath.Join(dir, id)); len(left) == 0 {
			t.Fatalf("before the crash, %s holds nothing", id)
		}
	}

	next, err := New(dir) // the next Tether; the first is dropped without a Destroy
	if err != nil {
		t.Fatal(err)
	}
	if !workspace.Mounted(filepath.Join(dir, complete, "workspace")) {
		t.Fatal("a new provider unmounted a running sandbox's workspace")
	}
	if out := execIn(t, next, complete, `cat /workspace/note; echo more > /workspace/more && echo written; df -k --output=size /workspace | tail -n 1`); !strings.HasPrefix(out, "kept\nwritten\n") {
		t.Errorf("the workspace after a restart: %q", out)
	} else if kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "kept\nwritten\n"))); kb > 32<<10 {
		t.Errorf("after a restart /workspace is %d KiB; want the limit of 32 MiB", kb)
	}
	inv, err := next.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]provider.Resource{}
	for _, r := range inv {
		listed[r.SandboxID] = r
	}
	if r, ok := listed[complete]; !ok || r.Defunct {
		t.Errorf("List = %+v; want %s running", inv, complete)
	}
	for _, id := range ids {
		if _, ok := listed[id]; !ok {
			t.Errorf("List = %+v; want %s among them", inv, id)
			continue
		}
		if err := next.Destroy(ctx, id); err != nil {
			t.Errorf("Destroy(%s): %v", id, err)
		}
		if left := workspaceLeft(t, filepath.Join(dir, id)); len(left) > 0 {
			t.Errorf("left after the next Tether's Destroy of %s: %v", id, left)
		}
		if err := next.Destroy(ctx, id); err != nil {
			t.Errorf("a second Destroy(%s): %v", id, err)
		}
	}
	if inv, err := next.List(ctx); err != nil || len(inv) != 0 {
		t.Errorf("List after Destroy = %+v, %v", inv, err)
	}
}

// TestWorkspaceParams: params.workspace_mb is checked against the server's
// maximum before anything is made; without it a sandbox gets the server's
// default (here a limit; by default none).
func TestWorkspaceParams(t *testing.T) {
	t.Parallel()
	p, dir := newWorkspaceProvider(t, WithLimits(
		Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB, WorkspaceMB: 32},
		Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: 1024}))
	for _, tc := range []struct{ params, want string }{
		{`{"workspace_mb":1}`, "params.workspace_mb must be between 16 and 1024"},
		{`{"workspace_mb":15}`, "params.workspace_mb must be between 16 and 1024"},
		{`{"workspace_mb":1025}`, "params.workspace_mb must be between 16 and 1024"},
		{`{"workspace_mb":-64}`, "params.workspace_mb must be between 16 and 1024"},
		{`{"workspace_mb":"64"}`, "not a valid JSON object"},
		{`{"workspace_mb":64.5}`, "not a valid JSON object"},
		{`{"workspace":64}`, "workspace_mb"}, // the unknown field's message lists the known ones
	} {
		err := p.ValidateParams([]byte(tc.params))
		if provider.ErrorCode(err) != provider.CodeInvalidRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateParams(%s) = %v; want INVALID_REQUEST saying %q", tc.params, err, tc.want)
		}
		id := provider.NewSandboxID()
		if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Params: []byte(tc.params)}); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("Create(%s) = %v; want INVALID_REQUEST", tc.params, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, id)); err == nil {
			t.Errorf("a refused create (%s) left its folder", tc.params)
		}
	}
	for _, params := range []string{`{"workspace_mb":16}`, `{"workspace_mb":1024}`, `{"workspace_mb":0}`, `{}`} {
		if err := p.ValidateParams([]byte(params)); err != nil {
			t.Errorf("ValidateParams(%s) = %v; want nil", params, err)
		}
	}
	info := p.Info(t.Context())
	if !slices.Contains(info.Notes, "/workspace size: 32 MiB (params.workspace_mb, 16 to 1024): an ext4 file system of the sandbox's own, ENOSPC past it") {
		t.Errorf("Info notes %q; want the workspace limit", info.Notes)
	}
	// The default applies to a create that does not ask.
	id := createIn(t, p, nil)
	if m, err := p.readMeta(id); err != nil || m.Limits.WorkspaceMB != 32 || !workspace.Mounted(filepath.Join(dir, id, "workspace")) {
		t.Errorf("a create without params.workspace_mb: meta %+v, %v, mounted %v; want the default of 32 MiB", m, err, workspace.Mounted(filepath.Join(dir, id, "workspace")))
	}
	if out := execIn(t, p, id, `df -k --output=size /workspace | tail -n 1`); strings.TrimSpace(out) == "" {
		t.Error("df printed nothing")
	} else if kb, _ := strconv.Atoi(strings.TrimSpace(out)); kb > 32<<10 {
		t.Errorf("/workspace is %d KiB; want the default of 32 MiB", kb)
	}
	// Without a default, a create that does not ask gets a plain folder.
	plain, plainDir := newWorkspaceProvider(t, noWorkspaceLimit())
	id = createIn(t, plain, nil)
	if workspace.Mounted(filepath.Join(plainDir, id, "workspace")) {
		t.Error("a create without params.workspace_mb got a size limit with no default limit")
	}
	if _, err := os.Lstat(filepath.Join(plainDir, id, workspace.ImageFile)); err == nil {
		t.Error("a create without a limit made an image")
	}
}

// TestWorkspaceLimitUnavailable: on a host where workspaces cannot be
// mounted (here: no mkfs.ext4), the limit is unavailable, Info says so,
// creates that ask for it are refused with INVALID_REQUEST rather than run
// without it, and the others run without a limit, the server's default
// notwithstanding.
func TestWorkspaceLimitUnavailable(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"bwrap", "nsenter", "setpriv", "sh", "sleep", "ip", "nft", "mount"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin) // everything but mkfs.ext4
	dir := harness.ReachableTempDir(t)
	p, err := New(dir, WithLimits(
		Limits{Pids: DefaultPids, MemoryMB: DefaultMemoryMB, WorkspaceMB: 64},
		Limits{Pids: DefaultMaxPids, MemoryMB: DefaultMaxMemoryMB, WorkspaceMB: 1024}))
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info(t.Context())
	if !info.Available {
		t.Fatalf("provider unavailable: %s", info.Reason)
	}
	if !slices.ContainsFunc(info.Notes, func(n string) bool {
		return strings.Contains(n, "/workspace size: not limited") && strings.Contains(n, "unavailable") && strings.Contains(n, "mkfs.ext4")
	}) {
		t.Errorf("Info notes %q; want the limit unavailable, naming mkfs.ext4", info.Notes)
	}
	raw := []byte(`{"workspace_mb":64}`)
	if err := p.ValidateParams(raw); provider.ErrorCode(err) != provider.CodeInvalidRequest || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("ValidateParams(%s) = %v; want INVALID_REQUEST, unavailable", raw, err)
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Params: raw}); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("Create(%s) = %v; want INVALID_REQUEST", raw, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, id)); err == nil {
		t.Error("a refused create left its folder")
	}
	id = createIn(t, p, nil)
	if m, err := p.readMeta(id); err != nil || m.Limits.WorkspaceMB != 0 || workspace.Mounted(filepath.Join(dir, id, "workspace")) {
		t.Errorf("a create without params here: meta %+v, %v; want no workspace limit recorded or mounted", m, err)
	}
}

// BenchmarkCreateDestroy measures a sandbox's create and destroy without
// and with a workspace size limit (go test -run '^$' -bench CreateDestroy).
func BenchmarkCreateDestroy(b *testing.B) {
	for _, mb := range []int{0, 1024, 10240} {
		b.Run("workspace_mb="+strconv.Itoa(mb), func(b *testing.B) {
			// No default limit: a create without params.workspace_mb (0)
			// has none.
			p, err := New(harness.ReachableTempDir(b), noWorkspaceLimit())
			if err != nil || p.problem != "" || p.workspace.Problem() != "" {
				b.Fatalf("New: %v %s %s", err, p.problem, p.workspace.Problem())
			}
			raw := []byte(`{}`)
			if mb > 0 {
				raw, _ = json.Marshal(map[string]int{"workspace_mb": mb})
			}
			var creating, destroying time.Duration
			for b.Loop() {
				id := provider.NewSandboxID()
				start := time.Now()
				if _, err := p.Create(b.Context(), provider.CreateSpec{SandboxID: id, Params: raw}); err != nil {
					b.Fatal(err)
				}
				created := time.Now()
				if mounted := workspace.Mounted(filepath.Join(p.sandboxDir(id), "workspace")); mounted != (mb > 0) {
					b.Fatalf("workspace mounted: %v", mounted)
				}
				if err := p.Destroy(b.Context(), id); err != nil {
					b.Fatal(err)
				}
				creating += created.Sub(start)
				destroying += time.Since(created)
			}
			b.ReportMetric(float64(creating.Milliseconds())/float64(b.N), "create-ms/op")
			b.ReportMetric(float64(destroying.Milliseconds())/float64(b.N), "destroy-ms/op")
		})
	}
}

// TestWorkspaceHeldOnTheHost: a host process that holds a file of a
// workspace open does not make Destroy hang or remove the folder from under
// a mount: the destroy fails (and is retried), and once the process lets go
// the next Destroy clears everything.
func TestWorkspaceHeldOnTheHost(t *testing.T) {
	t.Parallel()
	p, dir := newWorkspaceProvider(t)
	id := createIn(t, p, map[string]any{"workspace_mb": 32})
	sbxDir := filepath.Join(dir, id)
	held, err := os.Create(filepath.Join(sbxDir, "workspace", "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = p.Destroy(ctx, id)
	if err == nil {
		t.Fatal("Destroy succeeded while a host process holds a file of the workspace")
	}
	// The error names the holder: this test's process, by a file on the
	// workspace's loop device.
	if want := fmt.Sprintf("pid %d (", os.Getpid()); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "a file on loop") {
		t.Errorf("Destroy: %v; want it to name %q holding a file on the loop device", err, want)
	}
	if workspace.Mounted(filepath.Join(sbxDir, "workspace")) {
		t.Error("the workspace is still mounted on its folder")
	}
	if inv, err := p.List(t.Context()); err != nil || len(inv) != 1 || inv[0].SandboxID != id {
		t.Errorf("List = %+v, %v; want the half-destroyed sandbox", inv, err)
	}
	_ = held.Close()
	if err := p.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := workspaceLeft(t, sbxDir); len(left) > 0 {
		t.Errorf("left after Destroy: %v", left)
	}
}
