package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/test/harness"
)

// TestOutageDoesNotEndLiveOwners: an owner that keeps heartbeating through
// a Postgres outage (every heartbeat a 503) keeps its sandbox once Postgres
// is back; an owner that stopped heartbeating before the outage still ends.
func TestOutageDoesNotEndLiveOwners(t *testing.T) {
	t.Parallel()
	harness.Postgres(t, "start", "outage")
	t.Cleanup(func() { harness.Postgres(t, "stop", "outage") })
	r := harness.NewReplica(t, harness.Build(t), filepath.Join(t.TempDir(), "tether.log"),
		"DATABASE_URL="+harness.CreateDatabase(t, "outage", "outage"),
		"BOOTSTRAP_API_KEY="+key, "PROVIDERS=sim", "SIM_STATE_DIR="+t.TempDir(),
		"JANITOR_INTERVAL=1s", "DEFAULT_OWNER_TTL=3s", "EXECUTOR_LEASE=3s")
	r.Start()
	r.WaitReady(60 * time.Second)
	e := &env{t: t, replica: r, client: harness.Client{Key: key, HTTP: &http.Client{Timeout: 5 * time.Second}}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tether log:\n%s", harness.Tail(r.LogPath, 60))
		}
	})

	alive := e.createReady(map[string]any{"owner": "alive"})
	quitter := e.createReady(map[string]any{"owner": "quitter"})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _, _ = e.client.Do(http.MethodPut, r.URL()+"/v1/owners/alive/lease", map[string]any{"ttl_seconds": 3})
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	harness.Postgres(t, "stop", "outage", "TETHER_PG_STOP_MODE=immediate")
	down := time.Now()
	for time.Since(down) < 8*time.Second { // longer than the lease: every heartbeat fails meanwhile
		code, _, _ := e.client.Do(http.MethodPut, r.URL()+"/v1/owners/alive/lease", map[string]any{"ttl_seconds": 3})
		if code == http.StatusOK {
			t.Fatal("a heartbeat succeeded while Postgres was down")
		}
		time.Sleep(500 * time.Millisecond)
	}
	harness.Postgres(t, "start", "outage")
	r.WaitReady(60 * time.Second)

	// Several janitor intervals after the recovery: the heartbeating owner's
	// sandbox lives; the quitter's lease lapsed before the outage began.
	time.Sleep(4 * time.Second) // several janitor intervals: its chances to act wrongly
	if _, sb := e.do(http.MethodGet, "/v1/sandboxes/"+alive, nil); sb["state"] != "ready" {
		t.Errorf("the owner that kept heartbeating lost its sandbox: %v", sb)
	}
	e.waitFor(quitter, "ended by its owner's lapse", func(sb map[string]any) bool { return sb["reason"] == "owner_expired" })
	// The credit that kept it is in its history, saying why.
	_, page := e.do(http.MethodGet, "/v1/sandboxes/"+alive+"/events", nil)
	items, _ := page["items"].([]any)
	var credits []map[string]any
	for _, it := range items {
		if ev, _ := it.(map[string]any); ev["reason"] == "outage_credited" {
			credits = append(credits, ev)
		}
	}
	if len(credits) != 1 || !strings.Contains(fmt.Sprint(credits[0]["message"]), "no replica reached Postgres") {
		t.Errorf("the kept sandbox's history has credit events %v, want one explaining the outage", credits)
	}
}
