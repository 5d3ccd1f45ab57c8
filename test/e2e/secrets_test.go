package e2e

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNothingOfTethersReachesASandbox is invariant 7 for secrets: with a
// sentinel, the real DATABASE_URL and the bootstrap key in Tether's
// environment, a watcher inside a sandbox scans the environment and command
// line of every process it can see while 200 exec calls run, and finds none
// of them; neither does the files API on the sandbox's init.
func TestNothingOfTethersReachesASandbox(t *testing.T) {
	t.Parallel()
	sentinel := "tether-sentinel-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	e := setup(t, "TETHER_SENTINEL="+sentinel)
	dbURL := e.replica.Env("DATABASE_URL")
	secrets := []string{sentinel, dbURL, key}
	id := e.createReady(map[string]any{"provider": "local"})

	// The watcher's patterns reach it through a file, so that its own
	// command line holds none of them. The canary is set on every exec: the
	// watcher must see it, or it was not looking.
	canary := "exec-canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	e.putFile(id, "/workspace/patterns", strings.Join(append([]string{canary}, secrets...), "\n")+"\n")
	code, res := e.exec(id, `(while :; do
		for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' <"$f"; done 2>/dev/null |
			grep -F -f /workspace/patterns >>/workspace/found
		echo >>/workspace/scans
	done) </dev/null >/dev/null 2>&1 &`)
	if code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("starting the watcher = %d %v", code, res)
	}

	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range work {
				command := "true"
				if i%10 == 0 {
					command = "sleep 0.2" // long enough for the watcher to see it whole
				}
				code, res := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{
					"command": command, "timeout_seconds": 30, "env": map[string]string{"CANARY": canary},
				})
				if code != http.StatusOK || res["exit_code"] != 0.0 {
					t.Errorf("exec %d = %d %v", i, code, res)
				}
			}
		})
	}
	for i := range 200 {
		work <- i
	}
	close(work)
	wg.Wait()

	found := e.getFile(id, "/workspace/found")
	if scans := strings.Count(e.getFile(id, "/workspace/scans"), "\n"); scans < 10 {
		t.Fatalf("the watcher scanned only %d times", scans)
	}
	if !strings.Contains(found, canary) {
		t.Fatalf("the watcher never saw an exec's environment; it proves nothing")
	}
	for _, s := range secrets {
		if strings.Contains(found, s) {
			t.Errorf("a process in the sandbox carries %q", s)
		}
	}
	if env := e.getFile(id, "/proc/1/environ"); containsAny(env, secrets) {
		t.Errorf("the files API shows Tether's environment in /proc/1/environ: %q", env)
	}
}

// TestHostNetworkIsOperatorOnly: params.network "host" is refused with 403
// FORBIDDEN and nothing is created, unless the operator enables it; a
// default sandbox reaches neither Postgres nor Tether on the host's
// loopback, and a host-network one (the control) does.
func TestHostNetworkIsOperatorOnly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	host := map[string]any{"provider": "local", "params": map[string]any{"network": "host"}}
	code, body := e.do(http.MethodPost, "/v1/sandboxes", host)
	if code != http.StatusForbidden || body["code"] != "FORBIDDEN" {
		t.Fatalf("create with network host = %d %v, want 403 FORBIDDEN", code, body)
	}
	if code, list := e.do(http.MethodGet, "/v1/sandboxes", nil); code != http.StatusOK || len(list["items"].([]any)) != 0 {
		t.Fatalf("a refused create wrote a sandbox: %d %v", code, list)
	}

	pgPort := mustPort(t, e.replica.Env("DATABASE_URL"))
	probe := func(e *env, id string, port string) string {
		t.Helper()
		code, res := e.exec(id, `timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/`+port+`' 2>/dev/null && echo open || echo closed`)
		if code != http.StatusOK {
			t.Fatalf("probe = %d %v", code, res)
		}
		return strings.TrimSpace(res["output"].(string))
	}
	id := e.createReady(map[string]any{"provider": "local"})
	for name, port := range map[string]string{"Postgres": pgPort, "Tether": strconv.Itoa(e.replica.Port)} {
		if got := probe(e, id, port); got != "closed" {
			t.Errorf("a default sandbox reaches %s on the host's 127.0.0.1:%s: %s", name, port, got)
		}
	}

	open := setup(t, "LOCAL_ALLOW_HOST_NETWORK=true")
	id = open.createReady(host)
	if got := probe(open, id, strconv.Itoa(open.replica.Port)); got != "open" {
		t.Errorf("a host-network sandbox (enabled by the operator) does not reach the host's loopback: %s", got)
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func mustPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in %q: %v", raw, err)
	}
	return u.Port()
}

func (e *env) putFile(id, path, content string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPut, e.replica.URL()+"/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(path), strings.NewReader(content))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("PUT %s: %v", path, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		e.t.Fatalf("PUT %s = %d", path, resp.StatusCode)
	}
}

func (e *env) getFile(id, path string) string {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s = %d %v %s", path, resp.StatusCode, err, b)
	}
	return string(b)
}
