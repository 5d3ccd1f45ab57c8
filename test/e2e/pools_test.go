package e2e

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// poolLease is the owner's heartbeat lease in TestPoolLocal, and
// poolInterval the janitor's and the refiller's interval.
const (
	poolLease    = 3 * time.Second
	poolInterval = time.Second
)

// TestPoolLocal: a warm pool of real bubblewrap sandboxes fills; a claim
// answers 201 with a ready member, which runs its owner's commands; the
// owner, a real process heartbeating its lease, is SIGKILLed, and the
// claimed sandbox ends within the lease and one interval (owner_expired)
// with its processes gone; the pool refills; /metrics counts all of it.
// The owner's first lease (from its claim) is long, so that the owner
// process has time to start on a loaded machine; its heartbeats make it
// poolLease.
func TestPoolLocal(t *testing.T) {
	t.Parallel()
	e := setup(t, "POOL_REFILL_INTERVAL="+poolInterval.String(), "DEFAULT_OWNER_TTL=60s")
	code, p := e.do(http.MethodPost, "/v1/pools", map[string]any{"name": "agents", "provider": "local", "min_ready": 2, "max_size": 2})
	if code != http.StatusCreated {
		t.Fatalf("create pool = %d %v", code, p)
	}
	e.waitPoolReady("agents", 2)

	owner := "agent-pool-e2e"
	code, sb := e.do(http.MethodPost, "/v1/sandboxes", map[string]any{"pool": "agents", "owner": owner, "labels": map[string]string{"task": "t1"}})
	if code != http.StatusCreated || sb["state"] != "ready" || sb["owner"] != owner {
		t.Fatalf("claim = %d %v; want 201, ready, owner %s", code, sb, owner)
	}
	id := sb["id"].(string)
	if labels, _ := sb["labels"].(map[string]any); labels["tether.pool"] != "agents" || labels["task"] != "t1" {
		t.Errorf("claimed labels = %v", sb["labels"])
	}
	if code, res := e.exec(id, "printf ok; id -u >/dev/null"); code != http.StatusOK || res["output"] != "ok" || res["exit_code"] != float64(0) {
		t.Fatalf("exec in the claimed member = %d %v", code, res)
	}
	bg := marker(t)
	if code, res := e.exec(id, bg+" >/dev/null 2>&1 &"); code != http.StatusOK {
		t.Fatalf("exec of a background process = %d %v", code, res)
	}
	if !running(bg) {
		t.Fatal("the claimed member's background process does not run")
	}

	proc := e.startOwner(owner, poolLease)
	// The heartbeats hold the sandbox past the first lease.
	time.Sleep(poolLease + poolInterval)
	if _, sb := e.do(http.MethodGet, "/v1/sandboxes/"+id, nil); sb["state"] != "ready" {
		t.Fatalf("the claimed sandbox of a live owner = %v", sb)
	}
	killed := time.Now()
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	sb = e.waitFor(id, "ended", func(sb map[string]any) bool { return sb["state"] == "terminated" })
	took := time.Since(killed)
	bound := poolLease + poolInterval
	t.Logf("the claimed sandbox ended %s after its owner's SIGKILL (lease %s + interval %s = %s)", took, poolLease, poolInterval, bound)
	if sb["reason"] != "owner_expired" {
		t.Errorf("reason = %v, want owner_expired", sb["reason"])
	}
	// Slack for the poll and a loaded machine.
	if took > bound+3*time.Second {
		t.Errorf("the claimed sandbox outlived its owner by %s, more than lease + interval (%s) and slack", took, bound)
	}
	e.waitFor(id, "released", released)
	waitGone(t, bg)

	// The claim was replaced: the pool is full again, and /metrics says so.
	e.waitPoolReady("agents", 2)
	m := e.metrics()
	for name, want := range map[string]float64{
		`tether_pool_claims_total{outcome="hit"}`:                 1,
		`tether_pool_claim_duration_seconds_count{outcome="hit"}`: 1,
		`tether_pool_ready{pool="agents",tenant="default"}`:       2,
		`tether_pool_size{pool="agents",tenant="default"}`:        2,
		`tether_pool_min_ready{pool="agents",tenant="default"}`:   2,
		// Its members never failed: no backoff.
		`tether_pool_refill_failures{pool="agents",tenant="default"}`:        0,
		`tether_pool_refill_backoff_seconds{pool="agents",tenant="default"}`: 0,
		`tether_pool_members_failed_total`:                                   0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("/metrics %s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if got := m["tether_pool_refills_total"]; got < 3 {
		t.Errorf("/metrics tether_pool_refills_total = %v, want at least 3 (two members, then the claimed one's replacement)", got)
	}
}

// waitPoolReady waits until the pool has n members ready.
func (e *env) waitPoolReady(name string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, p := e.do(http.MethodGet, "/v1/pools/"+name, nil)
		if code == http.StatusOK && p["ready"] == float64(n) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pool %s never had %d ready: %d %v", name, n, code, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metrics reads the replica's /metrics: each sample by its name and
// labels, as the text format writes them.
func (e *env) metrics() map[string]float64 {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.replica.URL()+"/metrics", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("/metrics = %d %s", resp.StatusCode, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
