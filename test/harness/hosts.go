package harness

// Simulated hosts: several "machines" on this one, for the tests of
// replicas on several hosts (test/multihost, the chaos harness's node
// mode). Each host has what a real host gives the host-bound local
// provider and nothing of the others':
//
//   - its own network namespace (`ip netns add`), joined by a veth pair to a
//     bridge, the hosts' network: a /24 of which this machine (where
//     Postgres listens) has the first address, on a veth pair of its own to
//     the bridge, and the hosts the following ones. The bridge lives in a
//     network namespace of its own (the switch), so that what this machine's
//     firewall does with forwarded or bridged packets (such as the local
//     provider's forward guard, which drops them) never applies to the
//     hosts' traffic;
//   - its own pid, mount and UTS namespaces, held by an anchor process:
//     `unshare --pid --fork --mount-proc --uts` running the reaper
//     (test/harness/reaper) as the namespace's pid 1, which reaps orphans
//     the way a host's init does and sets the hostname;
//   - its own LOCAL_STATE_DIR.
//
// Replicas run inside with `nsenter --target ANCHOR --net --pid --mount
// --uts`. Killing one (Replica.Kill) kills only the tether process: its
// bubblewrap sandboxes live on in the host's pid namespace, as they would on
// a real host, and a restarted replica finds them there.
//
// Everything is removed when the test ends, failed or not (t.Cleanup): the
// anchors are killed, which ends every process of their pid namespaces, then
// the namespaces, and with them the veth pairs and the bridge, are deleted.
// A test process
// that dies before its cleanups (a panic, a timeout) leaves a record in
// /run/tether-hosts; the next NewHosts on the machine removes what it names.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// HostPort is the port replicas on simulated hosts listen on: every host
// has its own address, so they all use the same one, as real hosts would.
const HostPort = 8080

// recordDir holds one record per live Hosts, so that what a crashed test
// process left can be found and removed.
const recordDir = "/run/tether-hosts"

// Hosts is a set of simulated hosts on one network.
type Hosts struct {
	t testing.TB
	// Tag is random and part of every interface and namespace name on this
	// machine, so that the hosts of tests running at the same time never
	// collide.
	Tag string
	// Link is this machine's interface to the hosts' network (a veth pair
	// to the bridge), which holds Gateway.
	Link string
	// Switch is the network namespace of the bridge.
	Switch string
	// Prefix is the hosts' network, a /24 no other interface or route of
	// this machine overlaps.
	Prefix netip.Prefix
	// Gateway is this machine's address on the hosts' network, as the
	// hosts reach it (Postgres listens there; see PostgresEnv).
	Gateway netip.Addr
	// List holds the hosts, in order.
	List []*Host

	reaper string
	logDir string
	rec    record
	pgPort int // the port of the hosts' Postgres cluster (StartPostgres)
}

// Host is one simulated host.
type Host struct {
	hs *Hosts
	// Name is the host's hostname; tests use it as the node id (NODE_ID).
	Name string
	// IP is the host's address on the hosts' network.
	IP netip.Addr
	// NetNS is the name of its network namespace (`ip netns exec NetNS`).
	NetNS string
	// StateDir is the local provider's state folder on this host
	// (LOCAL_STATE_DIR of its replicas).
	StateDir string

	veth      string
	anchor    *exec.Cmd     // unshare, the anchor's parent
	anchorPID int           // the reaper: pid 1 of the host's namespaces
	pidNS     string        // the host's pid namespace, as /proc/PID/ns/pid names it
	ended     chan struct{} // closed when unshare has been reaped
}

// record is what a crashed test process leaves for the next NewHosts.
type record struct {
	PID     int      `json:"pid"`
	Start   uint64   `json:"start"`
	Link    string   `json:"link"`
	NetNS   []string `json:"netns"`
	Anchors []proc   `json:"anchors"`
	// Cluster is the Postgres cluster StartPostgres made, of the checkout
	// Repo.
	Cluster string `json:"cluster,omitempty"`
	Repo    string `json:"repo,omitempty"`
}

// proc names a process across pid reuse.
type proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// RequireHosts skips the test unless simulated hosts can be made here: it
// needs root and ip (iproute2), unshare and nsenter (util-linux), and bwrap
// (bubblewrap) for the local provider's sandboxes. scripts/deps.sh installs
// them.
func RequireHosts(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("simulated hosts need root (network, pid and mount namespaces); run as root")
	}
	var missing []string
	for _, tool := range []string{"ip", "unshare", "nsenter", "bwrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Skipf("simulated hosts need %s (scripts/deps.sh installs iproute2, util-linux and bubblewrap)", strings.Join(missing, ", "))
	}
}

// NewHosts makes n simulated hosts, named host-1 ... host-n, removed when
// the test ends. It skips the test where RequireHosts does.
func NewHosts(t testing.TB, n int) *Hosts {
	t.Helper()
	RequireHosts(t)
	hs := &Hosts{t: t, reaper: buildReaper(t), logDir: t.TempDir()}
	hs.Tag = fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	hs.Link, hs.Switch = "tb"+hs.Tag, "tb"+hs.Tag+"-sw"
	if err := os.MkdirAll(recordDir, 0o755); err != nil {
		t.Fatal(err)
	}
	selfStart, err := processStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	hs.rec = record{PID: os.Getpid(), Start: selfStart, Link: hs.Link, NetNS: []string{hs.Switch}}
	for i := range n {
		hs.rec.NetNS = append(hs.rec.NetNS, fmt.Sprintf("tb%s-%d", hs.Tag, i+1)) // after the switch
	}

	// Sweep, choose a network and take it under one lock, so that two
	// NewHosts at once never choose the same one.
	unlock := lockFile(t, filepath.Join(recordDir, ".lock"))
	sweepStale(t)
	hs.writeRecord() // before anything exists, so nothing can be left unnamed
	t.Cleanup(hs.teardown)
	hs.Prefix = freePrefix(t)
	hs.Gateway = hs.Prefix.Addr().Next()
	err = runAll(
		[]string{"ip", "netns", "add", hs.Switch},
		[]string{"ip", "-n", hs.Switch, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", hs.Switch, "link", "set", "br0", "up"},
		[]string{"ip", "link", "add", hs.Link, "type", "veth", "peer", "name", "up0", "netns", hs.Switch},
		[]string{"ip", "-n", hs.Switch, "link", "set", "up0", "master", "br0", "up"},
		[]string{"ip", "addr", "add", netip.PrefixFrom(hs.Gateway, 24).String(), "dev", hs.Link},
		[]string{"ip", "link", "set", hs.Link, "up"},
	)
	unlock()
	if err != nil {
		t.Fatalf("hosts: network: %v", err)
	}

	ip := hs.Gateway
	for i := range n {
		ip = ip.Next()
		h := &Host{hs: hs, Name: fmt.Sprintf("host-%d", i+1), IP: ip, NetNS: hs.rec.NetNS[i+1],
			veth: fmt.Sprintf("h%d", i+1), StateDir: ReachableTempDir(t)}
		hs.List = append(hs.List, h) // from now on, teardown removes it
		if err := runAll(
			[]string{"ip", "netns", "add", h.NetNS},
			[]string{"ip", "-n", hs.Switch, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NetNS},
			[]string{"ip", "-n", hs.Switch, "link", "set", h.veth, "master", "br0", "up"},
			[]string{"ip", "-n", h.NetNS, "addr", "add", netip.PrefixFrom(h.IP, 24).String(), "dev", "eth0"},
			[]string{"ip", "-n", h.NetNS, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", h.NetNS, "link", "set", "lo", "up"},
		); err != nil {
			t.Fatalf("hosts: %s: %v", h.Name, err)
		}
		h.startAnchor(t)
		start, _ := processStart(h.anchorPID)
		hs.rec.Anchors = append(hs.rec.Anchors, proc{PID: h.anchorPID, Start: start})
		hs.writeRecord()
	}
	t.Logf("hosts: %d on %s (this machine is %s on %s; the bridge is in namespace %s)", n, hs.Prefix, hs.Gateway, hs.Link, hs.Switch)
	return hs
}

// Host returns the host of that name, or nil.
func (hs *Hosts) Host(name string) *Host {
	for _, h := range hs.List {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// PostgresEnv is the environment for Postgres (scripts/postgres.sh start)
// that makes a cluster reachable from the hosts: it listens on the
// Gateway address too and trusts the hosts' network; after StartPostgres,
// on its port. Pass it at every start of the cluster, restarts included.
func (hs *Hosts) PostgresEnv() []string {
	env := []string{"TETHER_PG_LISTEN_EXTRA=" + hs.Gateway.String(), "TETHER_PG_TRUST_CIDR=" + hs.Prefix.String()}
	if hs.pgPort != 0 {
		env = append(env, "TETHER_PG_PORT="+strconv.Itoa(hs.pgPort))
	}
	return env
}

// StartPostgres starts a Postgres cluster of the test's own for the hosts
// and returns its name, for Postgres and CreateDatabase: base-Tag, one per
// run, so that runs at the same time (in one checkout too) never share one
// (a cluster listens on its run's Gateway). It listens on a free port,
// reachable from the hosts (PostgresEnv), and is destroyed, stopped and its
// data deleted, when the test ends; the next NewHosts destroys it if the
// test process died first.
func (hs *Hosts) StartPostgres(base string) string {
	hs.t.Helper()
	cluster := base + "-" + hs.Tag
	hs.rec.Cluster, hs.rec.Repo = cluster, RepoRoot(hs.t)
	hs.writeRecord()
	hs.t.Cleanup(func() { Postgres(hs.t, "destroy", cluster) })
	hs.pgPort = FreePort(hs.t)
	Postgres(hs.t, "start", cluster, hs.PostgresEnv()...)
	return cluster
}

// URL returns a database URL of this machine (on 127.0.0.1 or localhost)
// as the hosts reach it: on the Gateway address.
func (hs *Hosts) URL(databaseURL string) string {
	hs.t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		hs.t.Fatal(err)
	}
	u.Host = net.JoinHostPort(hs.Gateway.String(), u.Port())
	return u.String()
}

// NewReplica prepares a replica that runs on the host, stopped when the
// test ends. Its environment sets NODE_ID (the host's name), NODE_URL,
// LISTEN_ADDR (the host's address, port HostPort) and LOCAL_STATE_DIR (the
// host's), then env (a later value of a name wins). DATABASE_URL must be
// one the host reaches (Hosts.URL).
func (h *Host) NewReplica(t testing.TB, bin, logPath string, env ...string) *Replica {
	vars := append([]string{
		"NODE_ID=" + h.Name,
		"NODE_URL=" + h.URL(),
		"LOCAL_STATE_DIR=" + h.StateDir,
	}, env...)
	r := &Replica{t: t, bin: bin, env: vars, Port: HostPort, LogPath: logPath, host: h}
	t.Cleanup(r.Stop)
	return r
}

// URL is the base URL of a replica on the host (NODE_URL).
func (h *Host) URL() string {
	return "http://" + net.JoinHostPort(h.IP.String(), strconv.Itoa(HostPort))
}

// Command returns a command that runs inside the host: in its network,
// pid, mount and UTS namespaces. nsenter forks to enter the pid namespace:
// the command's process is nsenter, and the program runs as its child.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	//nolint:noctx // the callers own the process's lifetime (replicas outlive any request)
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(h.anchorPID),
		"--net", "--pid", "--mount", "--uts", "--", name}, args...)...)
}

// AnchorPID is the host's pid 1 (the reaper), as this machine numbers it.
func (h *Host) AnchorPID() int { return h.anchorPID }

func (h *Host) startAnchor(t testing.TB) {
	t.Helper()
	logf, err := os.Create(filepath.Join(h.hs.logDir, h.Name+".anchor.log"))
	if err != nil {
		t.Fatal(err)
	}
	//nolint:noctx // the anchor lives as long as the test's hosts
	cmd := exec.Command("nsenter", "--net=/run/netns/"+h.NetNS, "--",
		"unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--propagation", "private", "--uts",
		h.hs.reaper, h.Name)
	// nsenter execs unshare without forking (no --pid): unshare is our
	// child. If this process dies without its cleanups, the kernel kills
	// unshare, and unshare's --kill-child the reaper: the whole pid
	// namespace ends with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	ready := make(chan string, 1)
	h.ended = make(chan struct{})
	go func() {
		// Pdeathsig fires when the thread that started the child ends, not
		// the process: keep this thread until the anchor is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(h.ended)
		defer func() { _ = logf.Close() }()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		t.Fatalf("hosts: %s: start the anchor: %v", h.Name, err)
	}
	h.anchor = cmd
	select {
	case line := <-ready:
		if line != "ready\n" {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-h.ended
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("hosts: %s: the anchor did not start (%q): %s", h.Name, line, b)
		}
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("hosts: %s: the anchor did not start in 30s", h.Name)
	}
	children, err := childPIDs(cmd.Process.Pid)
	if err != nil || len(children) != 1 {
		t.Fatalf("hosts: %s: unshare's children: %v %v", h.Name, children, err)
	}
	h.anchorPID = children[0]
	if h.pidNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.anchorPID)); err != nil {
		t.Fatal(err)
	}
	if self, _ := os.Readlink("/proc/self/ns/pid"); self == h.pidNS {
		t.Fatalf("hosts: %s: the anchor is in this machine's pid namespace", h.Name)
	}
}

// SandboxProcess is a process of a local sandbox on a host.
type SandboxProcess struct {
	// SandboxID is the sandbox the process belongs to, or "" if none could
	// be told (a process in a sandbox's pid namespace whose bwrap is gone).
	SandboxID string
	// PID is the process's pid in the host's pid namespace.
	PID int
	// Start is its start time (clock ticks since boot): with PID, it names
	// the process across pid reuse.
	Start uint64
	// Monitor is set for bwrap's own process, outside the sandbox's pid
	// namespace: one per start of the sandbox.
	Monitor bool
	// Cmdline is its command line, arguments separated by spaces.
	Cmdline string
}

// SandboxProcesses returns the live (not zombie) processes of local
// sandboxes on the host: bwrap processes that run in a sandbox's folder
// under the host's state folder (or bind its workspace, an older Tether's)
// and their bwrap children, and every process in a pid
// namespace below the host's (a sandbox's), or in a sandbox's control
// groups. It reads the host's own /proc (through the anchor's root), which
// shows only the host's processes.
func (h *Host) SandboxProcesses() ([]SandboxProcess, error) {
	root := fmt.Sprintf("/proc/%d/root/proc", h.anchorPID)
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.Name, err)
	}
	var all []procInfo
	bwraps := sandboxBwraps(root, h.StateDir)
	nsSandbox := map[string]string{} // a sandbox's pid namespace -> its folder name
	for _, e := range entries {
		in, ok := h.readProc(root, e.Name())
		if !ok {
			continue
		}
		in.bound = bwraps[in.pid]
		if in.bound != "" && in.ns != h.pidNS {
			nsSandbox[in.ns] = in.bound
		}
		all = append(all, in)
	}
	var out []SandboxProcess
	for _, in := range all {
		if p, ok := h.sandboxProcess(in, nsSandbox); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// procInfo is what SandboxProcesses reads of a process on the host.
type procInfo struct {
	pid     int
	start   uint64
	args    []string
	ns      string
	cgroups string
	bound   string // the sandbox's folder name, for a bwrap process of one
}

// readProc reads the process name (a pid) in the host's /proc at root;
// false when it is not a process, is gone or is a zombie.
func (h *Host) readProc(root, name string) (procInfo, bool) {
	pid, err := strconv.Atoi(name)
	if err != nil {
		return procInfo{}, false
	}
	dir := root + "/" + name
	start, err := processStartIn(dir)
	if err != nil {
		return procInfo{}, false // gone, or a zombie
	}
	b, err := os.ReadFile(dir + "/cmdline")
	if err != nil || len(b) == 0 {
		return procInfo{}, false
	}
	ns, err := os.Readlink(dir + "/ns/pid")
	if err != nil {
		return procInfo{}, false
	}
	cg, _ := os.ReadFile(dir + "/cgroup")
	return procInfo{pid: pid, start: start, args: strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), ns: ns, cgroups: string(cg)}, true
}

// boundWorkspace returns the folder name under prefix (the state folder)
// of the workspace a bwrap command line binds, or "".
func boundWorkspace(args []string, prefix string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--bind" && strings.HasPrefix(args[i+1], prefix) && strings.HasSuffix(args[i+1], "/workspace") {
			return strings.TrimSuffix(strings.TrimPrefix(args[i+1], prefix), "/workspace")
		}
	}
	return ""
}

// sandboxProcess places a process in its sandbox: by the workspace its
// bwrap binds, by its pid namespace (nsSandbox) or by its control groups;
// false for a process of no sandbox.
func (h *Host) sandboxProcess(in procInfo, nsSandbox map[string]string) (SandboxProcess, bool) {
	p := SandboxProcess{PID: in.pid, Start: in.start, Cmdline: strings.Join(in.args, " ")}
	switch {
	case in.bound != "":
		p.SandboxID, p.Monitor = in.bound, in.ns == h.pidNS
	case in.ns != h.pidNS:
		p.SandboxID = nsSandbox[in.ns]
	default:
		p.SandboxID = cgroupSandbox(in.cgroups)
		if p.SandboxID == "" {
			return p, false // Tether, the reaper, a tool of theirs
		}
	}
	if p.SandboxID != "" && !domain.ValidID(p.SandboxID) {
		return p, false // the provider's availability probe (".probe")
	}
	return p, true
}

// cgroupSandbox returns the sandbox whose control groups (…/tether/ID/…)
// a process is in, per /proc/PID/cgroup, or "".
func cgroupSandbox(cgroups string) string {
	for line := range strings.SplitSeq(cgroups, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		segs := strings.Split(parts[2], "/")
		for i := 0; i+1 < len(segs); i++ {
			if segs[i] == "tether" && domain.ValidID(segs[i+1]) {
				return segs[i+1]
			}
		}
	}
	return ""
}

// Zombies returns the pids (in the host's namespace) of processes that
// ended and that nobody reaped.
func (h *Host) Zombies() []int {
	root := fmt.Sprintf("/proc/%d/root/proc", h.anchorPID)
	entries, _ := os.ReadDir(root)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, err := processStartIn(root + "/" + e.Name()); errors.Is(err, errZombie) {
			out = append(out, pid)
		}
	}
	return out
}

// teardown removes everything NewHosts made, reporting what it could not.
func (hs *Hosts) teardown() {
	for _, h := range hs.List {
		if h.anchor == nil {
			continue
		}
		// The reaper's death ends every process of the host's pid
		// namespace (sandboxes and replicas); unshare, its parent, reaps
		// it and exits. (Killing unshare first would leave the reaper to
		// this machine's pid 1, which does not reap: a zombie for good.)
		if h.anchorPID > 0 {
			_ = syscall.Kill(h.anchorPID, syscall.SIGKILL)
		} else {
			_ = syscall.Kill(h.anchor.Process.Pid, syscall.SIGKILL)
		}
		select {
		case <-h.ended:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(h.anchor.Process.Pid, syscall.SIGKILL)
			select {
			case <-h.ended:
			case <-time.After(20 * time.Second):
				hs.t.Errorf("hosts: %s: the anchor did not end", h.Name)
			}
		}
	}
	for _, h := range hs.List {
		removeSandboxCgroups(h.StateDir)
	}
	for _, ns := range hs.rec.NetNS {
		// Deleting a namespace deletes its ends of the veth pairs, and so
		// the pairs; the switch's takes the bridge.
		if err := runQuiet("ip", "netns", "del", ns); err != nil && namespaceExists(ns) {
			hs.t.Errorf("hosts: %v", err)
		}
	}
	if err := runQuiet("ip", "link", "del", hs.Link); err != nil && linkExists(hs.Link) {
		hs.t.Errorf("hosts: %v", err)
	}
	_ = os.Remove(filepath.Join(recordDir, hs.Tag+".json"))
}

func (hs *Hosts) writeRecord() {
	b, err := json.Marshal(hs.rec)
	if err != nil {
		hs.t.Fatal(err)
	}
	path := filepath.Join(recordDir, hs.Tag+".json")
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		hs.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		hs.t.Fatal(err)
	}
}

// sweepStale removes the hosts of test processes that died without their
// cleanups.
func sweepStale(t testing.TB) {
	files, _ := filepath.Glob(filepath.Join(recordDir, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			_ = os.Remove(f)
			continue
		}
		if start, err := processStart(rec.PID); err == nil && start == rec.Start {
			continue // its test still runs
		}
		t.Logf("hosts: removing what a dead test process (pid %d) left: link %s, namespaces %v, cluster %q", rec.PID, rec.Link, rec.NetNS, rec.Cluster)
		for _, a := range rec.Anchors {
			if start, err := processStart(a.PID); err == nil && start == a.Start {
				_ = syscall.Kill(a.PID, syscall.SIGKILL)
			}
		}
		for _, ns := range rec.NetNS {
			_ = runQuiet("ip", "netns", "del", ns)
		}
		_ = runQuiet("ip", "link", "del", rec.Link)
		if rec.Cluster != "" {
			script := filepath.Join(rec.Repo, "scripts", "postgres.sh")
			cmd := exec.Command("bash", script, "destroy", rec.Cluster)
			cmd.Env = append(withoutDatabaseURL(), "TETHER_PG_STOP_MODE=immediate")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("hosts: %s destroy %s: %v\n%s", script, rec.Cluster, err, out)
			}
		}
		_ = os.Remove(f)
	}
}

// freePrefix picks a /24 in 10.200.0.0-10.249.255.0 that no address or
// route of this machine overlaps.
func freePrefix(t testing.TB) netip.Prefix {
	t.Helper()
	var taken []netip.Prefix
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				taken = append(taken, p.Masked())
			}
		}
	}
	if out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output(); err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			dst := f[0]
			if dst == "local" || dst == "broadcast" || dst == "unicast" {
				if len(f) < 2 {
					continue
				}
				dst = f[1]
			}
			if !strings.Contains(dst, "/") {
				dst += "/32"
			}
			if p, err := netip.ParsePrefix(dst); err == nil && p.Bits() > 0 {
				taken = append(taken, p.Masked())
			}
		}
	}
	for range 1000 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256)), 0}), 24)
		free := true
		for _, q := range taken {
			if p.Overlaps(q) {
				free = false
				break
			}
		}
		if free {
			return p
		}
	}
	t.Fatal("hosts: no free /24 in 10.200.0.0/11")
	return netip.Prefix{}
}

// buildReaper compiles test/harness/reaper, once per test process.
var buildReaper = func() func(t testing.TB) string {
	var (
		mu  sync.Mutex
		bin string
	)
	return func(t testing.TB) string {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if bin != "" {
			return bin
		}
		dir, err := os.MkdirTemp("", "tether-reaper-")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "reaper")
		cmd := exec.Command("go", "build", "-o", path, "./test/harness/reaper")
		cmd.Dir = RepoRoot(t)
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the reaper: %v\n%s", err, out)
		}
		// o+x all the way: it runs inside hosts whose cwd is /.
		_ = os.Chmod(dir, 0o755)
		bin = path
		return bin
	}
}()

// sandboxCgroupBases are the folders in which the local provider makes
// its sandboxes' control groups when it runs in this process's groups, as
// the hosts' replicas do: tether under each v1 controller's group, or at
// the root of a v2 hierarchy.
func sandboxCgroupBases() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup/tether"}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var bases []string
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for ctrl := range strings.SplitSeq(parts[1], ",") {
			if ctrl == "pids" || ctrl == "memory" || ctrl == "cpu" {
				bases = append(bases, filepath.Join("/sys/fs/cgroup", ctrl, parts[2], "tether"))
			}
		}
	}
	return bases
}

// removeSandboxCgroups removes the control groups the local provider made
// for the sandboxes whose folders are still in stateDir: killed with their
// host, they were never destroyed. Best effort.
func removeSandboxCgroups(stateDir string) {
	entries, _ := os.ReadDir(stateDir)
	var ids []string
	for _, e := range entries {
		if e.IsDir() && domain.ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	if len(ids) == 0 {
		return
	}
	for _, base := range sandboxCgroupBases() {
		for _, id := range ids {
			dir := filepath.Join(base, id)
			subs, _ := os.ReadDir(dir)
			for _, s := range subs {
				if s.IsDir() {
					_ = os.Remove(filepath.Join(dir, s.Name()))
				}
			}
			for range 50 {
				if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
					break
				}
				time.Sleep(10 * time.Millisecond) // the kernel frees a group a moment after its last process
			}
		}
	}
}

// lockFile takes an exclusive lock on path and returns its release.
func lockFile(t testing.TB, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { _ = f.Close() }
}

func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := runQuiet(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func runQuiet(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func namespaceExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// childPIDs returns the children of a single-threaded process.
func childPIDs(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

var errZombie = errors.New("process is a zombie")

// processStart returns the start time of a process of this machine's pid
// namespace, in clock ticks since boot.
func processStart(pid int) (uint64, error) {
	return processStartIn("/proc/" + strconv.Itoa(pid))
}

// processStartIn reads the start time from a process's /proc folder; a
// zombie is errZombie.
func processStartIn(dir string) (uint64, error) {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// the last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/stat: unexpected format", dir)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("%s/stat: unexpected format", dir)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errZombie
	}
	return strconv.ParseUint(f[19], 10, 64)
}
