// Package multihost tests Tether replicas on several hosts (issue 15):
// simulated hosts on this machine (harness.NewHosts), each with its own
// network, pid and mount namespaces, its own local sandboxes and one
// replica, over one Postgres. It needs root, iproute2, util-linux and
// bubblewrap (scripts/deps.sh), and skips without them.
//
//	go test ./test/multihost -v
package multihost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/test/harness"
)

const (
	apiKey = "multihost-key"
	// Short intervals, so that the whole story runs in about a minute.
	janitorInterval = time.Second
	nodeGrace       = 3 * time.Second
	orphanGrace     = 2 * time.Second
	// slack is scheduling tolerance on a loaded two-core machine.
	slack = 4 * time.Second
)

// TestHosts checks the harness's simulated hosts themselves: each host has
// its own network (it reaches Postgres on the bridge, not on this machine's
// loopback, and the other hosts at their addresses), its own hostname and
// pid namespace whose pid 1 reaps orphans; a replica on a host answers at the
// host's address, its sandboxes are the host's alone and survive its kill -9;
// and nothing is left once the test ends.
func TestHosts(t *testing.T) {
	t.Parallel()
	harness.RequireHosts(t)
	bin := harness.Build(t)
	var (
		link    string
		netns   []string
		anchors []int
		tag     string
	)
	t.Run("hosts", func(t *testing.T) {
		hs := harness.NewHosts(t, 2)
		link, tag, netns = hs.Link, hs.Tag, []string{hs.Switch}
		for _, h := range hs.List {
			netns = append(netns, h.NetNS)
			anchors = append(anchors, h.AnchorPID())
		}
		h1, h2 := hs.List[0], hs.List[1]

		// Its own hostname and pid namespace, whose pid 1 is the reaper.
		out := output(t, h1.Command("sh", "-c", `hostname; echo $$; tr '\0' ' ' </proc/1/cmdline`))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || lines[0] != "host-1" || !strings.Contains(lines[2], "reaper host-1") {
			t.Fatalf("inside host-1: %q, want its hostname, a pid and the reaper as pid 1", out)
		}
		if pid, err := strconv.Atoi(lines[1]); err != nil || pid > 1000 {
			t.Errorf("a shell in host-1 has pid %q: not a fresh pid namespace", lines[1])
		}

		// Postgres on the bridge's address, not on the host's loopback.
		dbURL := harness.CreateDatabase(t, hs.StartPostgres("mhhosts"), "hosts")
		port := portOf(t, dbURL)
		if err := h1.Command("timeout", "10", "bash", "-c", "exec 3<>/dev/tcp/"+hs.Gateway.String()+"/"+port).Run(); err != nil {
			t.Fatalf("host-1 cannot reach Postgres at %s:%s: %v", hs.Gateway, port, err)
		}
		if err := h1.Command("timeout", "10", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port).Run(); err == nil {
			t.Fatal("host-1 reaches this machine's loopback: it has no network namespace of its own")
		}

		// A replica on host-1 answers at host-1's address, here and from host-2.
		r := h1.NewReplica(t, bin, filepath.Join(t.TempDir(), "host-1.log"),
			"DATABASE_URL="+hs.URL(dbURL), "BOOTSTRAP_API_KEY="+apiKey, "PROVIDERS=local",
			"JANITOR_INTERVAL=1s", "ORPHAN_GRACE=1s")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("host-1's log:\n%s", harness.Tail(r.LogPath, 40))
			}
		})
		r.Start()
		r.WaitReady(60 * time.Second)
		if !strings.HasPrefix(r.URL(), "http://"+h1.IP.String()+":") {
			t.Errorf("replica URL %s is not at host-1's address %s", r.URL(), h1.IP)
		}
		// (Bridged between namespaces, whatever this machine's firewall
		// does with forwarded packets.)
		probe := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d; printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3; head -n1 <&3`, h1.IP, harness.HostPort)
		if out := output(t, h2.Command("timeout", "10", "bash", "-c", probe)); !strings.Contains(out, " 200 ") {
			t.Errorf("host-2 asking host-1's replica /readyz: %q", out)
		}

		// A sandbox on host-1 is host-1's alone, and outlives kill -9 of
		// its replica.
		c := harness.Client{Key: apiKey}
		code, sb, err := c.Do(http.MethodPost, r.URL()+"/v1/sandboxes", map[string]any{"provider": "local"})
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("create = %d %v %v", code, sb, err)
		}
		id := sb["id"].(string)
		if _, sb, _ = c.Do(http.MethodGet, r.URL()+"/v1/sandboxes/"+id+"?wait=60s", nil); sb["state"] != "ready" {
			t.Fatalf("sandbox not ready: %v", sb)
		}
		if code, res, _ := c.Do(http.MethodPost, r.URL()+"/v1/sandboxes/"+id+"/exec", map[string]any{"command": "sleep 1000 >/dev/null 2>&1 &"}); code != http.StatusOK {
			t.Fatalf("background exec = %d %v", code, res)
		}
		// The exec's own processes end just after its answer: compare
		// the set once two readings agree.
		var procs1 map[string][]harness.SandboxProcess
		waitUntil(t, 10*time.Second, "host-1's sandbox processes settle", func() bool {
			before := byID(t, h1)
			time.Sleep(200 * time.Millisecond)
			procs1 = byID(t, h1)
			return sameProcesses(before[id], procs1[id])
		})
		if n := len(procs1[id]); n < 3 || !hasMonitor(procs1[id]) {
			t.Fatalf("host-1 shows %d processes of %s (%v), want bwrap, its init and the sleep", n, id, procs1[id])
		}
		if len(procs1) != 1 {
			t.Errorf("host-1 shows processes of other sandboxes: %v", procs1)
		}
		if procs2 := byID(t, h2); len(procs2) != 0 {
			t.Errorf("host-2 shows sandbox processes: %v", procs2)
		}
		tetherPID := r.PID()
		r.Kill()
		if err := syscall.Kill(tetherPID, 0); err == nil {
			t.Errorf("tether (pid %d) survived its kill", tetherPID)
		}
		if after := byID(t, h1); !sameProcesses(after[id], procs1[id]) {
			t.Fatalf("the sandbox's processes changed with its replica's kill -9: before %v, after %v", procs1[id], after[id])
		}
		r.Start()
		r.WaitReady(60 * time.Second)
		if code, res, _ := c.Do(http.MethodPost, r.URL()+"/v1/sandboxes/"+id+"/exec", map[string]any{"command": "echo after-crash"}); code != http.StatusOK || res["output"] != "after-crash\n" {
			t.Fatalf("exec after the restart = %d %v", code, res)
		}
		if code, _, _ := c.Do(http.MethodDelete, r.URL()+"/v1/sandboxes/"+id, nil); code != http.StatusAccepted {
			t.Fatalf("delete = %d", code)
		}
		if _, sb, _ = c.Do(http.MethodGet, r.URL()+"/v1/sandboxes/"+id+"?wait=30s&until=released", nil); sb["released"] != true {
			t.Fatalf("not released: %v", sb)
		}
		if left := byID(t, h1); len(left) != 0 {
			t.Errorf("processes left on host-1 after the release: %v", left)
		}

		// Orphans are reaped by the host's pid 1.
		if out, err := h1.Command("sh", "-c", "for i in 1 2 3 4 5; do (sleep 0.2 &); done").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		waitUntil(t, 10*time.Second, "the orphans are reaped", func() bool {
			return len(h1.Zombies()) == 0 && !strings.Contains(output(t, h1.Command("ps", "-eo", "args")), "sleep 0.2")
		})
	})
	// The subtest's cleanups ran: nothing of its hosts is left.
	if _, err := net.InterfaceByName(link); err == nil {
		t.Errorf("interface %s is left", link)
	}
	for _, ns := range netns {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("network namespace %s is left", ns)
		}
	}
	for _, pid := range anchors {
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("anchor %d still runs", pid)
		}
	}
	if _, err := os.Stat("/run/tether-hosts/" + tag + ".json"); tag != "" && err == nil {
		t.Errorf("the hosts' record is left")
	}
}

// TestMultiHost is issue 15's story on three hosts with the local provider:
// placement spreads sandboxes over the nodes; any replica serves any
// sandbox's exec and files; nothing healthy is marked lost; a delete
// releases on the sandbox's node; a node killed with -9 loses exactly its
// own sandboxes after NODE_GRACE, and when it comes back destroys what it
// left within one reconcile.
func TestMultiHost(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)

	// 60 local sandboxes, each asked of a random replica.
	ids := e.createReady(60, nil)
	perNode := map[string]int{}
	for _, id := range ids {
		perNode[e.nodeOf[id]]++
	}
	t.Logf("placement: %v", perNode)
	for _, h := range e.hosts.List {
		// Least-loaded placement spreads 60 over 3 nodes; a few either way
		// for creates that raced each other.
		if perNode[h.Name] < 5 {
			t.Errorf("%s holds %d of 60 sandboxes: placement does not spread them (%v)", h.Name, perNode[h.Name], perNode)
		}
	}
	e.checkProcesses(ids, nil)
	e.checkNodes(nil, perNode)

	// A sim sandbox is not host-bound: it has no node.
	code, sb := e.do(e.replica(), http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "sim"})
	if code != http.StatusAccepted {
		t.Fatalf("sim create = %d %v", code, sb)
	}
	if _, sb = e.do(e.replica(), http.MethodGet, "/v1/sandboxes/"+sb["id"].(string)+"?wait=30s", nil); sb["state"] != "ready" || sb["node"] != nil {
		t.Errorf("sim sandbox = state %v node %v, want ready with no node", sb["state"], sb["node"])
	}

	// Every exec and file call, through a random replica, reaches its
	// sandbox wherever it runs.
	e.dataPlane(ids)
	// So do processes, their stdin and output, and terminals over
	// WebSockets: each call through a replica of another node.
	e.processesAcrossNodes(ids[:3])

	// None is marked lost while every node lives.
	e.stayReady(ids, 5*janitorInterval)

	// Half are deleted through random replicas: each releases on its node,
	// leaving no process on any host; the others are untouched.
	deleted, kept := ids[:30], ids[30:]
	before := e.processes()
	e.endAndRelease(deleted)
	e.checkProcesses(kept, deleted)
	e.checkUntouched(kept, before)

	// kill -9 one node's replica.
	victim := e.hosts.List[1]
	vr := e.replicas[1]
	var victims, others []string
	for _, id := range kept {
		if e.nodeOf[id] == victim.Name {
			victims = append(victims, id)
		} else {
			others = append(others, id)
		}
	}
	if len(victims) == 0 || len(others) == 0 {
		t.Fatalf("nothing to lose: %d sandboxes on %s, %d elsewhere", len(victims), victim.Name, len(others))
	}
	before = e.processes()
	killedAt := time.Now()
	vr.Kill()
	e.setDown(vr, true)
	// Its sandboxes still run on its host, as they would on a real one.
	e.checkUntouched(victims, before)

	// Creates asked for at once, before anyone can know the node is dead,
	// end up on the live nodes all the same (moved there once it is).
	fresh := e.createReady(6, []string{victim.Name})

	// After NODE_GRACE, and not before, they end lost, naming the node.
	for _, id := range victims {
		sb := e.waitFor(id, nodeGrace+2*janitorInterval+slack, "terminated", func(sb map[string]any) bool { return sb["state"] != "ready" })
		why := e.whyLost(id, sb)
		if sb["state"] != "terminated" || sb["reason"] != "lost" || !strings.Contains(why, victim.Name) {
			t.Errorf("%s on the dead node = state %v reason %v, why %q, want terminated, lost, and why naming %s", id, sb["state"], sb["reason"], why, victim.Name)
		}
		// Heartbeats come every NODE_GRACE/5: the earliest a heartbeat can
		// be NODE_GRACE old is 4/5 of it after the kill.
		if ended := timeOf(t, sb["ended_at"]); ended.Before(killedAt.Add(nodeGrace * 4 / 5).Add(-500 * time.Millisecond)) {
			t.Errorf("%s ended %s after its node's kill, before its heartbeat could lapse (NODE_GRACE %s)", id, ended.Sub(killedAt), nodeGrace)
		}
	}
	// No other node's sandbox is touched.
	e.stayReady(others, 2*janitorInterval)
	e.checkUntouched(others, before)
	e.checkNodes([]string{victim.Name}, nil)

	// Nobody else may destroy its sandboxes: they run until it returns.
	e.checkUntouched(victims, before)
	vr.Start()
	vr.WaitReady(60 * time.Second)
	e.setDown(vr, false)
	readyAt := time.Now()
	waitUntil(t, janitorInterval+slack, "the restarted node destroys what it left", func() bool {
		return len(e.processesOn(victim)) == 0
	})
	t.Logf("the restarted node destroyed its %d lost sandboxes %s after it was ready", len(victims), time.Since(readyAt).Round(10*time.Millisecond))
	for _, id := range victims {
		e.waitFor(id, slack, "released", func(sb map[string]any) bool { return sb["released"] == true })
		if _, err := os.Stat(filepath.Join(victim.StateDir, id)); !os.IsNotExist(err) {
			t.Errorf("%s's folder is still on %s (%v)", id, victim.Name, err)
		}
	}
	e.checkUntouched(others, before)
	e.checkNodes(nil, nil)

	// The end: nothing runs anywhere.
	live := append(slices.Clone(others), fresh...)
	e.endAndRelease(live)
	for _, h := range e.hosts.List {
		if left := e.processesOn(h); len(left) > 0 {
			t.Errorf("%s still runs sandbox processes: %v", h.Name, left)
		}
	}
}

type env struct {
	t        *testing.T
	hosts    *harness.Hosts
	replicas []*harness.Replica // replicas[i] runs on hosts.List[i]
	client   harness.Client

	mu     sync.Mutex
	nodeOf map[string]string // sandbox id -> node
	down   map[*harness.Replica]bool
	errors atomic.Int64 // how many errorf reported
}

// errorf reports a failure (from any goroutine) and counts it.
func (e *env) errorf(format string, args ...any) {
	e.t.Helper()
	e.errors.Add(1)
	e.t.Errorf(format, args...)
}

// setup starts n hosts, a Postgres they reach, and one replica per host.
func setup(t *testing.T, n int) *env {
	t.Helper()
	hs := harness.NewHosts(t, n)
	bin := harness.Build(t)
	dbURL := hs.URL(harness.CreateDatabase(t, hs.StartPostgres("multihost"), "multihost"))
	logDir, simDir := t.TempDir(), t.TempDir()
	e := &env{t: t, hosts: hs, client: harness.Client{Key: apiKey, HTTP: &http.Client{Timeout: 90 * time.Second}},
		nodeOf: map[string]string{}, down: map[*harness.Replica]bool{}}
	for _, h := range hs.List {
		r := h.NewReplica(t, bin, filepath.Join(logDir, h.Name+".log"),
			"DATABASE_URL="+dbURL,
			"BOOTSTRAP_API_KEY="+apiKey,
			"PROVIDERS=local,sim",
			// Small sandboxes: one tenant's 20-odd on a node fit in its
			// share of the node (by default half of it).
			"LOCAL_MEMORY_MB=128", "LOCAL_WORKSPACE_MB=64",
			"SIM_STATE_DIR="+simDir, // one sim inventory for all, like a cloud's
			"JANITOR_INTERVAL="+janitorInterval.String(),
			"NODE_GRACE="+nodeGrace.String(),
			"ORPHAN_GRACE="+orphanGrace.String(),
			"EXECUTOR_LEASE=3s",
			"SHUTDOWN_TIMEOUT=2s",
			"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
		)
		e.replicas = append(e.replicas, r)
		r.Start()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range e.replicas {
				t.Logf("tail of %s:\n%s", r.LogPath, harness.Tail(r.LogPath, 40))
			}
		}
	})
	for _, r := range e.replicas {
		r.WaitReady(60 * time.Second)
	}
	return e
}

// replica returns a random live replica, other than those in not.
func (e *env) replica(not ...*harness.Replica) *harness.Replica {
	e.mu.Lock()
	defer e.mu.Unlock()
	var live []*harness.Replica
	for _, r := range e.replicas {
		if !e.down[r] && !slices.Contains(not, r) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		e.errorf("no live replica to ask")
		return e.replicas[0]
	}
	return live[rand.IntN(len(live))]
}

// setDown records whether a replica is down: random picks skip it.
func (e *env) setDown(r *harness.Replica, down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down[r] = down
}

// do sends a JSON request; a transport error fails the test (from any
// goroutine) and returns status 0.
func (e *env) do(r *harness.Replica, method, path string, body any) (int, map[string]any) {
	code, out, err := e.client.Do(method, r.URL()+path, body)
	if err != nil {
		e.errorf("%s %s%s: %v", method, r.URL(), path, err)
	}
	return code, out
}

// raw sends a request with a raw body and returns the status and body.
func (e *env) raw(r *harness.Replica, method, path string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, r.URL()+path, bytes.NewReader(body))
	if err != nil {
		e.errorf("%v", err)
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := e.client.HTTP.Do(req)
	if err != nil {
		e.errorf("%s %s%s: %v", method, r.URL(), path, err)
		return 0, nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// parallel runs f for every id, a few at a time, then stops the test if any
// failed.
func (e *env) parallel(ids []string, f func(id string)) {
	e.t.Helper()
	before := e.errors.Load()
	sem := make(chan struct{}, 6)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f(id)
		})
	}
	wg.Wait()
	if e.errors.Load() > before {
		e.t.FailNow()
	}
}

// createReady creates n local sandboxes, each through a random live
// replica, and waits on another for each to be ready on a node (not one of
// deadNodes); it records their nodes.
func (e *env) createReady(n int, deadNodes []string) []string {
	e.t.Helper()
	ids := make([]string, n)
	slots := make([]string, n)
	for i := range slots {
		slots[i] = strconv.Itoa(i)
	}
	e.parallel(slots, func(slot string) {
		i, _ := strconv.Atoi(slot)
		code, sb := e.do(e.replica(), http.MethodPost, "/v1/sandboxes", map[string]any{"provider": "local", "labels": map[string]string{"test": "multihost"}})
		if code != http.StatusAccepted {
			e.errorf("create = %d %v", code, sb)
			return
		}
		id := sb["id"].(string)
		ids[i] = id
		_, sb = e.do(e.replica(), http.MethodGet, "/v1/sandboxes/"+id+"?wait=60s", nil)
		node, _ := sb["node"].(string)
		if sb["state"] != "ready" || e.hosts.Host(node) == nil || slices.Contains(deadNodes, node) {
			e.errorf("sandbox %s = state %v node %v error %v, want ready on a live node", id, sb["state"], sb["node"], sb["error"])
			return
		}
		e.mu.Lock()
		e.nodeOf[id] = node
		e.mu.Unlock()
	})
	return ids
}

// processes returns every host's sandbox processes by sandbox id.
func (e *env) processes() map[string]map[string][]harness.SandboxProcess {
	out := map[string]map[string][]harness.SandboxProcess{}
	for _, h := range e.hosts.List {
		out[h.Name] = byID(e.t, h)
	}
	return out
}

// processesOn returns the host's sandbox processes by sandbox id.
func (e *env) processesOn(h *harness.Host) map[string][]harness.SandboxProcess {
	return byID(e.t, h)
}

// checkProcesses checks that each live sandbox runs on its node (bwrap and
// the sandbox's init at least) and on no other host, that no process of an
// ended one is left, and that no host runs a process of a sandbox the test
// did not make.
func (e *env) checkProcesses(live, ended []string) {
	e.t.Helper()
	all := e.processes()
	for _, id := range live {
		for _, h := range e.hosts.List {
			ps := all[h.Name][id]
			switch {
			case h.Name == e.nodeOf[id] && (len(ps) < 2 || !hasMonitor(ps)):
				e.errorf("%s does not run on its node %s: %v", id, h.Name, ps)
			case h.Name != e.nodeOf[id] && len(ps) > 0:
				e.errorf("%s (node %s) has processes on %s: %v", id, e.nodeOf[id], h.Name, ps)
			}
		}
	}
	for _, id := range ended {
		for _, h := range e.hosts.List {
			if ps := all[h.Name][id]; len(ps) > 0 {
				e.errorf("%s ended, but %s still runs its processes: %v", id, h.Name, ps)
			}
		}
	}
	for _, h := range e.hosts.List {
		for id, ps := range all[h.Name] {
			if e.nodeOf[id] == "" {
				e.errorf("%s runs processes of a sandbox the test does not know (%q): %v", h.Name, id, ps)
			}
		}
	}
}

// checkUntouched checks that each sandbox's processes are the very ones
// (pid and start time) they were in before.
func (e *env) checkUntouched(ids []string, before map[string]map[string][]harness.SandboxProcess) {
	e.t.Helper()
	now := e.processes()
	for _, id := range ids {
		node := e.nodeOf[id]
		if !sameProcesses(now[node][id], before[node][id]) {
			e.errorf("%s's processes on %s changed: before %v, now %v", id, node, before[node][id], now[node][id])
		}
	}
}

// checkNodes checks GET /v1/nodes on every live replica: every host is a
// node, alive unless it is one of dead, and (if counts is given) holds that
// many live sandboxes.
func (e *env) checkNodes(dead []string, counts map[string]int) {
	e.t.Helper()
	for _, r := range e.replicas {
		if e.down[r] {
			continue
		}
		code, out := e.do(r, http.MethodGet, "/v1/nodes", nil)
		if code != http.StatusOK {
			e.errorf("GET /v1/nodes on %s = %d %v", r.Host().Name, code, out)
			continue
		}
		// The contract names the list "nodes"; "items" is the API's usual
		// name for a list.
		list, ok := out["nodes"].([]any)
		if !ok {
			list, _ = out["items"].([]any)
		}
		seen := map[string]bool{}
		for _, it := range list {
			n, _ := it.(map[string]any)
			id, _ := n["id"].(string)
			h := e.hosts.Host(id)
			if h == nil {
				e.errorf("GET /v1/nodes on %s lists an unknown node %v", r.Host().Name, n)
				continue
			}
			seen[id] = true
			if alive := n["alive"] == true; alive == slices.Contains(dead, id) {
				e.errorf("GET /v1/nodes on %s: %s alive=%v, want %v", r.Host().Name, id, n["alive"], !alive)
			}
			if u, ok := n["url"]; ok && u != h.URL() {
				e.errorf("GET /v1/nodes on %s: %s url=%v, want %s", r.Host().Name, id, u, h.URL())
			}
			if providers, _ := n["providers"].([]any); !slices.Contains(providers, any("local")) {
				e.errorf("GET /v1/nodes on %s: %s providers=%v, want local among them", r.Host().Name, id, n["providers"])
			}
			if want, ok := counts[id]; ok && n["live_sandboxes"] != float64(want) {
				e.errorf("GET /v1/nodes on %s: %s live_sandboxes=%v, want %d", r.Host().Name, id, n["live_sandboxes"], want)
			}
		}
		if len(seen) != len(e.hosts.List) {
			e.errorf("GET /v1/nodes on %s lists %d of the %d hosts: %v", r.Host().Name, len(seen), len(e.hosts.List), out)
		}
	}
}

// dataPlane writes a file unique to each sandbox through one replica, reads
// it through another, and cats it (with the sandbox's hostname) through
// exec on a third draw: each answer must be that sandbox's own.
func (e *env) dataPlane(ids []string) {
	e.t.Helper()
	var mu sync.Mutex
	forwarded := 0
	count := func(r *harness.Replica, id string) {
		if r.Host().Name != e.nodeOf[id] {
			mu.Lock()
			forwarded++
			mu.Unlock()
		}
	}
	e.parallel(ids, func(id string) {
		content := fmt.Sprintf("sandbox %s, token %d", id, rand.Uint64())
		path := "/v1/sandboxes/" + id + "/files?path=/workspace/whoami.txt"
		w := e.replica()
		if code, body := e.raw(w, http.MethodPut, path, []byte(content)); code != http.StatusNoContent {
			e.errorf("upload to %s through %s = %d %s", id, w.Host().Name, code, body)
			return
		}
		count(w, id)
		r := e.replica(w)
		if code, body := e.raw(r, http.MethodGet, path, nil); code != http.StatusOK || string(body) != content {
			e.errorf("download from %s through %s = %d %q, want %q", id, r.Host().Name, code, body, content)
		}
		count(r, id)
		x := e.replica(w)
		code, res := e.do(x, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat /workspace/whoami.txt; echo; hostname", "timeout_seconds": 30})
		if want := content + "\nsbx-" + id[len(id)-12:] + "\n"; code != http.StatusOK || res["output"] != want || res["exit_code"] != 0.0 {
			e.errorf("exec in %s through %s = %d %v, want output %q", id, x.Host().Name, code, res, want)
		}
		count(x, id)
	})
	// Two of three draws land on a replica of another node.
	if forwarded < len(ids) {
		e.errorf("only %d of %d data-plane calls went through another node's replica", forwarded, 3*len(ids))
	}
}

// elsewhere is a replica that is not on id's node, other than not.
func (e *env) elsewhere(id string, not ...*harness.Replica) *harness.Replica {
	for _, r := range e.replicas {
		if r.Host().Name != e.nodeOf[id] && !slices.Contains(not, r) {
			return r
		}
	}
	e.t.Fatalf("no replica off %s's node %s", id, e.nodeOf[id])
	return nil
}

// processesAcrossNodes starts a process in each of ids through a replica
// of another node, writes its stdin through a third, reads its output from
// the start and waits for its exit through either; then runs a terminal
// whose WebSocket goes through a replica of another node.
func (e *env) processesAcrossNodes(ids []string) {
	e.t.Helper()
	for _, id := range ids {
		a := e.elsewhere(id)
		b := e.elsewhere(id, a)
		base := "/v1/sandboxes/" + id + "/processes"
		code, p := e.do(a, http.MethodPost, base, map[string]any{"command": "cat; exit 6", "stdin": true})
		if code != http.StatusCreated {
			e.t.Fatalf("start through %s = %d %v", a.Host().Name, code, p)
		}
		one := fmt.Sprintf("%s/%.0f", base, p["pid"])
		if code, body := e.raw(b, http.MethodPost, one+"/stdin?close=true", []byte("typed on "+b.Host().Name+"\n")); code != http.StatusNoContent {
			e.t.Fatalf("stdin through %s = %d %s", b.Host().Name, code, body)
		}
		code, p = e.do(a, http.MethodGet, one+"?wait=30s", nil)
		if exit, _ := p["exit"].(map[string]any); code != http.StatusOK || exit["code"] != 6.0 {
			e.t.Fatalf("wait through %s = %d %v, want exit 6", a.Host().Name, code, p)
		}
		code, body := e.raw(b, http.MethodGet, one+"/output?from=start", nil)
		if want := "typed on " + b.Host().Name; code != http.StatusOK || !strings.Contains(string(body), want) || !strings.Contains(string(body), "event: exit") {
			e.t.Fatalf("output through %s = %d %q, want %q and the exit", b.Host().Name, code, body, want)
		}

		code, p = e.do(a, http.MethodPost, base, map[string]any{"command": "sh", "pty": map[string]any{"rows": 24, "cols": 80}})
		if code != http.StatusCreated {
			e.t.Fatalf("terminal start through %s = %d %v", a.Host().Name, code, p)
		}
		e.terminalThrough(b, id, fmt.Sprintf("%s/%.0f/terminal", base, p["pid"]))
	}
}

// terminalThrough types into a terminal whose WebSocket goes through r,
// sees the answer, and sees it end with the status typed.
func (e *env) terminalThrough(r *harness.Replica, id, path string) {
	e.t.Helper()
	url := "ws" + strings.TrimPrefix(r.URL(), "http") + path
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Sec-WebSocket-Protocol": {"tether.v1, tether.bearer." + apiKey}})
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		e.t.Fatalf("terminal of %s through %s: %v (%v)", id, r.Host().Name, err, resp)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.WriteMessage(websocket.BinaryMessage, []byte("echo node-$((6*7)); exit 5\r")); err != nil {
		e.t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var screen strings.Builder
	for {
		kind, data, err := conn.ReadMessage()
		if err != nil {
			e.t.Fatalf("terminal of %s through %s: %v; screen %q", id, r.Host().Name, err, screen.String())
		}
		if kind == websocket.BinaryMessage {
			screen.Write(data)
			continue
		}
		var ctl struct {
			Exit *struct {
				Code *int `json:"code"`
			} `json:"exit"`
		}
		if json.Unmarshal(data, &ctl) == nil && ctl.Exit != nil {
			if ctl.Exit.Code == nil || *ctl.Exit.Code != 5 || !strings.Contains(screen.String(), "node-42") {
				e.t.Fatalf("terminal of %s through %s ended %s, screen %q; want exit 5 after node-42", id, r.Host().Name, data, screen.String())
			}
			return
		}
	}
}

// stayReady checks, for the whole of d, that every one of ids stays ready.
func (e *env) stayReady(ids []string, d time.Duration) {
	e.t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		states := e.states()
		for _, id := range ids {
			if sb := states[id]; sb == nil || sb["state"] != "ready" {
				e.t.Fatalf("%s (node %s) is no longer ready: %v", id, e.nodeOf[id], sb)
			}
		}
	}
}

// states lists every sandbox of the test through a random replica.
func (e *env) states() map[string]map[string]any {
	e.t.Helper()
	out := map[string]map[string]any{}
	cursor := ""
	for {
		path := "/v1/sandboxes?limit=500&label=test=multihost"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		code, page := e.do(e.replica(), http.MethodGet, path, nil)
		if code != http.StatusOK {
			e.t.Fatalf("list = %d %v", code, page)
		}
		items, _ := page["items"].([]any)
		for _, it := range items {
			sb, _ := it.(map[string]any)
			out[sb["id"].(string)] = sb
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			return out
		}
		cursor = next
	}
}

// endAndRelease deletes each sandbox through a random replica and waits
// for its release; then none of its processes may be left on any host.
func (e *env) endAndRelease(ids []string) {
	e.t.Helper()
	e.parallel(ids, func(id string) {
		code, sb := e.do(e.replica(), http.MethodDelete, "/v1/sandboxes/"+id, nil)
		if code != http.StatusAccepted || sb["state"] != "terminated" {
			e.errorf("delete %s = %d %v", id, code, sb)
			return
		}
		if _, sb = e.do(e.replica(), http.MethodGet, "/v1/sandboxes/"+id+"?wait=30s&until=released", nil); sb["released"] != true {
			e.errorf("%s (node %s) not released: %v", id, e.nodeOf[id], sb)
		}
	})
	e.checkProcesses(nil, ids)
	// The node destroyed it: its folder is gone from the node's state folder.
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(e.hosts.Host(e.nodeOf[id]).StateDir, id)); !os.IsNotExist(err) {
			e.errorf("%s's folder is still on %s (%v)", id, e.nodeOf[id], err)
		}
	}
}

// waitFor polls the sandbox through random live replicas until cond holds.
func (e *env) waitFor(id string, limit time.Duration, what string, cond func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		_, sb := e.do(e.replica(), http.MethodGet, "/v1/sandboxes/"+id, nil)
		if cond(sb) {
			return sb
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s (node %s) not %s after %s: %v", id, e.nodeOf[id], what, limit, sb)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// whyLost returns what a lost sandbox tells its client about why: its
// error, or else the message of the event that ended it lost.
func (e *env) whyLost(id string, sb map[string]any) string {
	if why, _ := sb["error"].(string); why != "" {
		return why
	}
	_, page := e.do(e.replica(), http.MethodGet, "/v1/sandboxes/"+id+"/events?limit=100", nil)
	items, _ := page["items"].([]any)
	for _, it := range items {
		ev, _ := it.(map[string]any)
		if ev["to"] == "terminated" && ev["reason"] == "lost" {
			why, _ := ev["message"].(string)
			return why
		}
	}
	return ""
}

// byID returns the host's sandbox processes by sandbox id.
func byID(t testing.TB, h *harness.Host) map[string][]harness.SandboxProcess {
	t.Helper()
	ps, err := h.SandboxProcesses()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]harness.SandboxProcess{}
	for _, p := range ps {
		out[p.SandboxID] = append(out[p.SandboxID], p)
	}
	return out
}

func hasMonitor(ps []harness.SandboxProcess) bool {
	return slices.ContainsFunc(ps, func(p harness.SandboxProcess) bool { return p.Monitor })
}

// sameProcesses reports whether two lists name the same processes (pid and
// start time), and at least one.
func sameProcesses(a, b []harness.SandboxProcess) bool {
	key := func(ps []harness.SandboxProcess) []string {
		var out []string
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%d@%d", p.PID, p.Start))
		}
		slices.Sort(out)
		return out
	}
	return len(a) > 0 && slices.Equal(key(a), key(b))
}

func output(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

func portOf(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func timeOf(t testing.TB, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return ts
}

func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not the case after %s: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
