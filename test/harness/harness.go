// Package harness runs real Tether processes for the end-to-end and chaos
// tests: it builds the binary, starts Postgres clusters of its own through
// scripts/postgres.sh, and starts, kills (-9) and restarts replicas.
package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RepoRoot returns the folder holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test")
		}
		dir = parent
	}
}

// Build compiles cmd/api into a temporary folder and returns the binary,
// with cmd/tetherctl beside it as tetherctl, where `tether COMMAND` finds
// the ops commands. It builds with the tags the test was built with (go
// test -tags), so that `go test -tags kubernetes` tests a Tether that has
// the kubernetes provider.
func Build(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-tags="+buildTags(), "-o", dir+string(filepath.Separator), "./cmd/api", "./cmd/tetherctl")
	cmd.Dir = RepoRoot(t)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "tether")
	if err := os.Rename(filepath.Join(dir, "api"), bin); err != nil {
		t.Fatalf("build: %v", err)
	}
	return bin
}

// buildTags returns the build tags this binary was built with.
func buildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" {
				return s.Value
			}
		}
	}
	return ""
}

// Postgres runs `scripts/postgres.sh ACTION NAME` for a cluster of the
// test's own (never DATABASE_URL's) and returns its last line of output,
// the server URL for start. Extra environment (such as
// TETHER_PG_STOP_MODE=immediate, or TETHER_PG_PORT) is passed on. A
// TETHER_PG_PORT of this process's environment is not: it is the port of
// the test cluster (`TETHER_PG_PORT=N make test`), which the test's own
// clusters must not take, and it would make url and admin-url name that
// port instead of the one the cluster runs on.
func Postgres(t testing.TB, action, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", "scripts/postgres.sh", action, name)
	cmd.Dir = RepoRoot(t)
	for _, kv := range withoutDatabaseURL() {
		if !strings.HasPrefix(kv, "TETHER_PG_PORT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/postgres.sh %s %s: %v\n%s", action, name, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// withoutDatabaseURL is this process's environment less DATABASE_URL, for
// scripts/postgres.sh acting on a cluster of its own.
func withoutDatabaseURL() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

// CreateDatabase (re)creates database name on the cluster that
// `scripts/postgres.sh start cluster` started, owned by the role Tether
// connects as (not a superuser), and returns its URL for that role.
func CreateDatabase(t testing.TB, cluster, name string) string {
	t.Helper()
	ctx := t.Context()
	adminURL := Postgres(t, "admin-url", cluster)
	appURL := Postgres(t, "url", cluster)
	u, err := url.Parse(appURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", adminURL, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name+` OWNER `+pgx.Identifier{u.User.Username()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// FreePort returns a TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// Replica is one `tether serve` process on a fixed port. It can be killed
// and started again on the same port. It runs on this machine, or on a
// simulated host (Host.NewReplica).
type Replica struct {
	t       testing.TB
	bin     string
	env     []string
	Port    int
	LogPath string
	host    *Host // nil: this machine

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	gen  int
	pid  int // the tether process, once known (on a host, nsenter's child)
	// lives are the process's runs, one per Start.
	lives []Life
}

// Life is one run of a replica's process: its pid (0 on a host, where the
// process is nsenter's child) and when it started and ended (zero while it
// runs).
type Life struct {
	PID      int
	From, To time.Time
}

// Lives returns the replica's runs so far, oldest first.
func (r *Replica) Lives() []Life {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lives)
}

// NewReplica prepares a replica with the given environment (LISTEN_ADDR is
// set by the replica), stopped when the test ends.
func NewReplica(t testing.TB, bin, logPath string, env ...string) *Replica {
	r := &Replica{t: t, bin: bin, env: env, Port: FreePort(t), LogPath: logPath}
	t.Cleanup(r.Stop)
	return r
}

// Env returns the value the replica's environment gives name (the last
// one, as for the process), or "".
func (r *Replica) Env(name string) string {
	v := ""
	for _, kv := range r.env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// URL returns the replica's base URL.
func (r *Replica) URL() string {
	if r.host != nil {
		return r.host.URL()
	}
	return "http://127.0.0.1:" + strconv.Itoa(r.Port)
}

// Host returns the simulated host the replica runs on, or nil.
func (r *Replica) Host() *Host { return r.host }

// Start launches the process (again).
func (r *Replica) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	logf, err := os.OpenFile(r.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	var cmd *exec.Cmd
	if r.host != nil {
		cmd = r.host.Command(r.bin, "serve")
		cmd.Env = append(append(os.Environ(), r.env...),
			"LISTEN_ADDR="+net.JoinHostPort(r.host.IP.String(), strconv.Itoa(r.Port)),
			fmt.Sprintf("WORKER_ID=%s-%d-gen-%d", r.host.Name, r.Port, r.gen))
	} else {
		cmd = exec.Command(r.bin, "serve")
		cmd.Env = append(append(os.Environ(), r.env...),
			"LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(r.Port),
			fmt.Sprintf("WORKER_ID=replica-%d-gen-%d", r.Port, r.gen))
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start replica: %v", err)
	}
	done := make(chan struct{})
	life := len(r.lives)
	go func() {
		_ = cmd.Wait() // reaps the process
		_ = logf.Close()
		r.mu.Lock()
		r.lives[life].To = time.Now()
		r.mu.Unlock()
		close(done)
	}()
	r.cmd, r.done, r.pid = cmd, done, 0
	if r.host == nil {
		r.pid = cmd.Process.Pid
	}
	r.lives = append(r.lives, Life{PID: r.pid, From: time.Now()})
}

// PID returns the tether process's pid (as this machine numbers it), or 0
// if it is not running. On a host the process is nsenter's child.
func (r *Replica) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tetherPID()
}

// tetherPID finds the tether process; r.mu is held. On a host, nsenter
// forks it a moment after its own start: this waits for that (or for
// nsenter's end).
func (r *Replica) tetherPID() int {
	if r.pid != 0 || r.cmd == nil {
		return r.pid
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if children, err := childPIDs(r.cmd.Process.Pid); err == nil && len(children) > 0 {
			r.pid = children[0]
			return r.pid
		}
		select {
		case <-r.done:
			return 0
		default:
		}
	}
	return 0
}

// signal sends sig to the tether process (on a host, to nsenter if its
// child cannot be found: nothing else is left to stop).
func (r *Replica) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	select {
	case <-r.done:
		return // its pid may be another process's by now
	default:
	}
	pid := r.tetherPID()
	if pid == 0 {
		pid = r.cmd.Process.Pid
	}
	_ = syscall.Kill(pid, sig)
}

// Alive reports whether the process runs.
func (r *Replica) Alive() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the replica (only; the sandboxes it started are in
// sessions of their own) and waits for it to die.
//
// On a simulated host only the tether process is killed, not nsenter
// (which then ends too) nor the host's other processes.
func (r *Replica) Kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	r.signal(syscall.SIGKILL)
	<-done
}

// Stop ends the replica gracefully (SIGTERM), then by force.
func (r *Replica) Stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	r.signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		r.signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL) // nsenter, if its child never came
			<-done
		}
	}
}

// WaitReady waits for /readyz to answer 200.
func (r *Replica) WaitReady(limit time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get(r.URL() + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("replica on port %d not ready after %s; log:\n%s", r.Port, limit, Tail(r.LogPath, 40))
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Client calls a Tether API with an API key.
type Client struct {
	Key  string
	HTTP *http.Client
	// Header is sent with every request, on top of the key's.
	Header http.Header
}

// Do sends a JSON request (body may be nil) and decodes a JSON response
// into a map, returning the status; the status is 0 if the server could not
// be reached.
func (c Client) Do(method, url string, body any) (int, map[string]any, error) {
	var payload io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		payload = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, payload)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// KillSandboxes kills every local sandbox whose folder lies under
// stateDir (its bwrap monitor, which runs in that folder, and the init
// that is the monitor's child): what a test leaves must not outlive it.
func KillSandboxes(t testing.TB, stateDir string) {
	t.Helper()
	for pid := range sandboxBwraps("/proc", stateDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		thaw(pid)
	}
	unmountBelow(t, stateDir)
}

// thaw thaws the freezer group of pid, a process of a paused sandbox
// perhaps: under cgroup v1 a frozen process dies of SIGKILL only once
// thawed.
func thaw(pid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3 || parts[2] == "/":
		case parts[1] == "freezer":
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"), []byte("THAWED"), 0o644)
		case parts[0] == "0" && parts[1] == "":
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.freeze"), []byte("0"), 0o644)
		}
	}
}

// unmountBelow detaches every mount below dir (a sandbox's size-limited
// workspace: its loop device goes with it), so that the folder can be
// removed.
func unmountBelow(t testing.TB, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Errorf("unmount below %s: %v", dir, err)
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		// Mount points escape spaces and the like as octal; a test's
		// folders have none.
		if mp := fields[1]; strings.HasPrefix(mp, dir+"/") {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mp, err)
			}
		}
	}
}

// ReachableTempDir returns a temporary folder that users other than the
// test's can reach (o+x on it and the test's own folders above it), such as
// the local provider's sandbox user; removed when the test ends.
func ReachableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/" && p != "."; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// NodeModulesStale reports whether the npm package in dir needs `npm ci`:
// node_modules is missing, or npm's record of it is older than the lockfile
// or package.json.
func NodeModulesStale(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return true
	}
	for _, f := range []string{"package-lock.json", "package.json"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.ModTime().After(installed.ModTime()) {
			return true
		}
	}
	return false
}
