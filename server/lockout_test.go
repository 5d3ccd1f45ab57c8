package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// clientFrom is an HTTP client whose connections come from the local
// address from, without keep-alives (as a script in a loop).
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// call makes one request and returns its status and body.
func call(t *testing.T, c *http.Client, method, u, key, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, u, err)
		return 0, nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// randomText is n random bytes, base64url.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// badCredential is the i-th guess of a flood: an unknown key of every
// shape (junk, an old-style tk_ key, a key of Tether's tagged shape with a
// wrong tag) or an unknown preview token; and whether it is a preview
// path.
func badCredential(i int) (key string, preview bool) {
	switch i % 4 {
	case 0:
		return "guess-" + randomText(9), false
	case 1:
		return "tk_" + randomText(32), false
	case 2:
		return "tk_" + randomText(40), false
	default:
		return "tpv_" + randomText(32+8*(i/4%2)), true
	}
}

// flood sends bad credentials from one address until stop, each with a
// made-up X-Forwarded-For (which must not buy it another address), and
// counts the answers' statuses.
type flood struct {
	mu    sync.Mutex
	codes map[int]int
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startFlood(t *testing.T, c *http.Client, base string) *flood {
	f := &flood{codes: map[int]int{}, stop: make(chan struct{})}
	f.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-f.stop:
				return
			default:
			}
			cred, preview := badCredential(i)
			u, key := base+"/v1/sandboxes", cred
			if preview {
				u, key = base+"/p/"+cred+"/", ""
			}
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", i%200, i/200%200, i%7))
			resp, err := c.Do(req)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			f.mu.Lock()
			f.codes[resp.StatusCode]++
			f.mu.Unlock()
			time.Sleep(5 * time.Millisecond) // pacing the flood, not waiting for anything
		}
	})
	t.Cleanup(f.end)
	return f
}

func (f *flood) end() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
}

func (f *flood) counts() map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int{}
	for k, v := range f.codes {
		out[k] = v
	}
	return out
}

// reverseProxy serves a plain httputil.ReverseProxy to target on loopback
// (it adds the client's address to X-Forwarded-For) and returns its URL.
func reverseProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// registerKey records key for tenant default straight in the database, as
// a key made before this server started (and so never seen by it).
func registerKey(t *testing.T, dbURL, key string) {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Connect(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := store.New(pool).RegisterAPIKey(ctx, "default", "legacy", key); err != nil {
		t.Fatal(err)
	}
}

// TestBadKeyFloodLocksOutNobody: a client that floods Tether with bad API
// keys and preview tokens from an address slows only itself. Valid keys
// sent from the same address all keep working, past several
// AUTH_CACHE_TTLs: the bootstrap key, a key used before the flood, a key
// of the old format never used on this server, a key made during the
// flood; and so does a preview URL. Run directly, behind a reverse proxy
// Tether does not trust (everyone shares the proxy's address), and behind
// one it trusts (TRUSTED_PROXIES: each client is counted by its own
// address, from X-Forwarded-For).
func TestBadKeyFloodLocksOutNobody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		proxy, trusted bool
		bystander      int // what an unknown key from another client is answered
	}{
		{"direct", false, false, http.StatusUnauthorized},
		{"untrusted proxy", true, false, http.StatusTooManyRequests},
		{"trusted proxy", true, true, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL := storetest.NewURL(t)
			env := map[string]string{"DATABASE_URL": dbURL, "PROVIDERS": "sim", "BOOTSTRAP_API_KEY": "boot-key-lockout",
				"AUTH_CACHE_TTL": "1s", "AUTH_FAILURES_PER_SECOND": "2"}
			if tc.trusted {
				env["TRUSTED_PROXIES"] = "127.0.0.1/32, ::1/128"
			}
			s := start(t, env)
			base := s.base
			if tc.proxy {
				base = reverseProxy(t, s.base)
			}
			floodLockout(t, base, dbURL, tc.bystander)
		})
	}
}

func floodLockout(t *testing.T, base, dbURL string, bystander int) {
	const boot = "boot-key-lockout"
	shared := clientFrom("127.0.0.2") // the flood's address, and the good clients'
	legacy := "tk_" + randomText(32)
	registerKey(t, dbURL, legacy)

	code, body := call(t, shared, http.MethodPost, base+"/v1/keys", boot, `{"name":"used"}`)
	var minted struct{ Secret string }
	if code != http.StatusCreated || json.Unmarshal(body, &minted) != nil {
		t.Fatalf("mint = %d %s", code, body)
	}
	used := minted.Secret
	if code, _ := call(t, shared, http.MethodGet, base+"/v1/sandboxes", used, ""); code != http.StatusOK {
		t.Fatalf("the minted key = %d", code)
	}
	preview := previewOf(t, shared, base, boot)

	f := startFlood(t, shared, base)
	time.Sleep(300 * time.Millisecond) // let the flood spend the address's budget
	fresh := ""
	for i := 0; i < 20; i++ { // 20 × 200 ms: past three AUTH_CACHE_TTLs
		keys := map[string]string{"bootstrap": boot, "used before": used, "old format, never used here": legacy}
		if i == 5 {
			code, body := call(t, shared, http.MethodPost, base+"/v1/keys", boot, `{"name":"fresh"}`)
			if code != http.StatusCreated || json.Unmarshal(body, &minted) != nil {
				t.Fatalf("round %d: mint during the flood = %d %s", i, code, body)
			}
			fresh = minted.Secret
		}
		if fresh != "" {
			keys["made during the flood"] = fresh
		}
		for name, key := range keys {
			if code, body := call(t, shared, http.MethodGet, base+"/v1/sandboxes", key, ""); code != http.StatusOK {
				t.Errorf("round %d: the %s key from the flooding address = %d %s; want 200", i, name, code, body)
			}
		}
		if code, body := call(t, shared, http.MethodGet, base+preview+"index.html", "", ""); code != http.StatusOK {
			t.Errorf("round %d: the preview from the flooding address = %d %s; want 200", i, code, body)
		}
		time.Sleep(200 * time.Millisecond) // pacing the rounds
	}
	if code, _ := call(t, clientFrom("127.0.0.3"), http.MethodGet, base+"/v1/sandboxes", "tk_"+randomText(32), ""); code != bystander {
		t.Errorf("an unknown key from another client = %d; want %d", code, bystander)
	}
	f.end()
	got := f.counts()
	if got[http.StatusTooManyRequests] == 0 {
		t.Errorf("the flood's answers %v: its address was never slowed (no 429)", got)
	}
	if got[http.StatusOK] != 0 {
		t.Errorf("the flood's answers %v: a bad credential was let in", got)
	}
	t.Logf("the flood's answers: %v", got)
}

// previewOf makes a sim sandbox with a port, waits until it is ready, and
// returns the path of a preview of that port.
func previewOf(t *testing.T, c *http.Client, base, key string) string {
	t.Helper()
	code, body := call(t, c, http.MethodPost, base+"/v1/sandboxes", key, `{"provider":"sim","params":{"ports":[8080]}}`)
	var sb struct{ ID, State string }
	if code != http.StatusAccepted || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create = %d %s", code, body)
	}
	code, body = call(t, c, http.MethodGet, base+"/v1/sandboxes/"+sb.ID+"?wait=20s", key, "")
	if code != http.StatusOK || json.Unmarshal(body, &sb) != nil || sb.State != "ready" {
		t.Fatalf("sandbox = %d %s", code, body)
	}
	code, body = call(t, c, http.MethodPost, base+"/v1/sandboxes/"+sb.ID+"/previews", key, `{"port":8080}`)
	var p struct{ URL string }
	if code != http.StatusCreated || json.Unmarshal(body, &p) != nil {
		t.Fatalf("preview = %d %s", code, body)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, c, http.MethodGet, base+u.Path, "", ""); code != http.StatusOK {
		t.Fatalf("the preview before the flood = %d %s", code, body)
	}
	return u.Path
}
