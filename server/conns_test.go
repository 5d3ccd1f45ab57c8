package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// trickler holds connections open the way a keyless attacker does: each
// sends what it was given, then one more byte every interval, until stop.
type trickler struct {
	t     *testing.T
	conns []net.Conn
	done  chan struct{}
	wg    sync.WaitGroup
}

// trickle opens n connections to addr from the local address from (empty:
// any), writes head on each, then a byte of fill every interval.
func trickle(t *testing.T, addr, from string, n int, head, fill string, interval time.Duration) *trickler {
	t.Helper()
	tr := &trickler{t: t, done: make(chan struct{})}
	d := net.Dialer{Timeout: 2 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		_, _ = io.WriteString(c, head)
		tr.conns = append(tr.conns, c)
	}
	for _, c := range tr.conns {
		tr.wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-tr.done:
					return
				case <-tick.C:
					if _, err := io.WriteString(c, fill[i%len(fill):i%len(fill)+1]); err != nil {
						return // the server closed it
					}
				}
			}
		})
	}
	t.Cleanup(tr.stop)
	return tr
}

func (tr *trickler) stop() {
	select {
	case <-tr.done:
		return
	default:
	}
	close(tr.done)
	for _, c := range tr.conns {
		_ = c.Close()
	}
	tr.wg.Wait()
}

// legitimate checks, for a while, that a new client is answered within a
// second: every 200 ms a fresh connection asks for /readyz.
func legitimate(t *testing.T, base, from string, during time.Duration) {
	t.Helper()
	d := &net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	for end := time.Now().Add(during); time.Now().Before(end); {
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		began := time.Now()
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("a legitimate request was not answered within a second (after %s): %v", time.Since(began), err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz = %d", resp.StatusCode)
		}
		time.Sleep(200 * time.Millisecond) // pacing the probes, not waiting for anything
	}
}

// TestKeylessLockout: 64 connections that trickle request bodies or headers
// without an API key cannot keep a legitimate client out at MAX_CONNS=64.
func TestKeylessLockout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, head, fill string }{
		// The attack: a body announced and sent a byte at a time
		// to a route that needs a key.
		{"slow bodies", "POST /v1/keys HTTP/1.1\r\nHost: tether\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n", "{"},
		// Headers that never end (cut by ReadHeaderTimeout after 10 s).
		{"slow headers", "GET /v1/sandboxes HTTP/1.1\r\nHost: tether\r\n", "X-Slow: y\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim",
				"MAX_CONNS": "64", "MAX_CONNS_PER_ADDR": "0"})
			addr := strings.TrimPrefix(s.base, "http://")
			trickle(t, addr, "", 64, tc.head, tc.fill, 500*time.Millisecond)
			legitimate(t, s.base, "", 3*time.Second)
		})
	}
}

// TestUnauthenticatedAnswersAtOnce: a request without a valid key that
// announces a body is answered 401 before the body arrives, and the
// connection is closed rather than kept to read the rest.
func TestUnauthenticatedAnswersAtOnce(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim"})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = io.WriteString(c, "POST /v1/keys HTTP/1.1\r\nHost: tether\r\nAuthorization: Bearer nope\r\nContent-Length: 200000\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer before the body arrived: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("got %d, close=%v; want 401 with Connection: close", resp.StatusCode, resp.Close)
	}
}

// TestSlowBodyCut: an authenticated body that arrives slower than
// MIN_BODY_RATE is 408 REQUEST_TIMEOUT once BODY_GRACE has passed, not
// after the 15-minute whole-request bound.
func TestSlowBodyCut(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim",
		"BOOTSTRAP_API_KEY": "slow-key", "BODY_GRACE": "1s", "MIN_BODY_RATE": "1000"})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	began := time.Now()
	_, _ = io.WriteString(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: tether\r\nAuthorization: Bearer slow-key\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	})
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the slow body was not cut: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"REQUEST_TIMEOUT"`) {
		t.Errorf("got %d %s; want 408 REQUEST_TIMEOUT", resp.StatusCode, body)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("cut after %s; want about BODY_GRACE (1s)", took)
	}
}

// TestConnsPerAddr: one address holds at most MAX_CONNS_PER_ADDR
// connections; another address still gets in.
func TestConnsPerAddr(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim",
		"MAX_CONNS": "64", "MAX_CONNS_PER_ADDR": "8"})
	addr := strings.TrimPrefix(s.base, "http://")
	tr := trickle(t, addr, "127.0.0.3", 20, "GET /readyz HTTP/1.1\r\nHost: tether\r\n", "X-Slow: y\r\n", time.Hour)
	closed := 0
	for _, c := range tr.conns {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) || isReset(err) {
			closed++
		}
	}
	if closed != 12 {
		t.Errorf("%d of 20 connections from one address were closed; want 12 (cap 8)", closed)
	}
	legitimate(t, s.base, "127.0.0.2", time.Second)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestAuthFailuresLimited: an address that keeps sending bad keys is
// answered 429 before its keys are looked up; a key the replica knows
// still works from there.
func TestAuthFailuresLimited(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim", "AUTH_FAILURES_PER_SECOND": "1",
		"BOOTSTRAP_API_KEY": "known-key", "AUTH_CACHE_TTL": "1h"})
	if code, _ := s.do(t, http.MethodGet, "/v1/sandboxes", "known-key", ""); code != http.StatusOK {
		t.Fatalf("the bootstrap key = %d", code)
	}
	began := time.Now()
	codes := map[int]int{}
	for i := range 12 {
		code, _ := s.do(t, http.MethodGet, "/v1/sandboxes", fmt.Sprintf("bad-key-%d", i), "")
		codes[code]++
	}
	// A burst of four seconds' worth (4) is 401, plus what refilled
	// meanwhile; the rest 429.
	refilled := int(time.Since(began).Seconds()) + 1
	if n := codes[http.StatusUnauthorized]; n < 4 || n > 4+refilled || codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != 12 {
		t.Errorf("codes = %v; want 4 (up to %d) × 401, the rest 429", codes, 4+refilled)
	}
	// A key the replica knows (cached) still works from that address.
	if code, _ := s.do(t, http.MethodGet, "/v1/sandboxes", "known-key", ""); code != http.StatusOK {
		t.Errorf("a cached key from the throttled address = %d; want 200", code)
	}
}

// TestFitConns: MAX_CONNS is checked against the open-file limit.
func TestFitConns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max       int
		isDefault bool
		nofile    uint64
		want      int
		wantErr   bool
	}{
		{2048, true, 1 << 20, 2048, false},
		{2048, true, 1024, 1024 - 300, false}, // the default is lowered to fit
		{300, false, 256, 0, true},            // a value set that does not fit refuses the start
		{64, false, 1024, 64, false},
		{2048, true, 200, 0, true}, // nothing sensible fits
	} {
		got, err := fitConns(tc.max, tc.isDefault, tc.nofile, 300)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("fitConns(%d, %v, %d) = %d, %v; want %d, error %v", tc.max, tc.isDefault, tc.nofile, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestGuardVictim: at the cap the guard closes an idle connection first,
// else the oldest that has not authenticated, and never an authenticated
// busy one.
func TestGuardVictim(t *testing.T) {
	t.Parallel()
	g := newConnGuard(4, 0)
	conns := make([]net.Conn, 4)
	for i := range conns {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		conns[i] = a
		g.conns[a] = &connInfo{seq: uint64(i + 1)}
	}
	g.conns[conns[0]].authed = true
	g.conns[conns[2]].idle, g.conns[conns[2]].authed = true, true
	if v := g.victim(conns[3]); v != conns[2] {
		t.Errorf("victim is not the idle connection")
	}
	g.conns[conns[2]].idle = false
	if v := g.victim(conns[3]); v != conns[1] {
		t.Errorf("victim is not the oldest unauthenticated connection")
	}
	g.conns[conns[1]].authed = true
	if v := g.victim(conns[3]); v != nil {
		t.Errorf("an authenticated busy connection was chosen")
	}
}

// TestRefusedBodyAnswerIsRead: a client still sending a body the server
// refused without reading (too large, or no key) reads the refusal, not a
// connection reset: the server closes such a connection gracefully.
func TestRefusedBodyAnswerIsRead(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim",
		"BOOTSTRAP_API_KEY": "big-key", "MAX_BODY_BYTES": "65536"})
	// A raw client: it sends part of a large body, then reads. A server
	// that closed at once, with the rest unread, would have reset the
	// connection, and the reset discards the answer before it is read.
	for i := range 5 {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: tether\r\nAuthorization: Bearer big-key\r\nContent-Length: 4194304\r\n\r\n")
		_, _ = c.Write(make([]byte, 512<<10))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			_ = c.Close()
			t.Fatalf("raw try %d: the 413 was not read: %v", i, err)
		}
		_ = resp.Body.Close()
		_ = c.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("raw try %d: %d; want 413", i, resp.StatusCode)
		}
	}
	big := strings.Repeat("x", 4<<20)
	for i := range 10 {
		for _, tc := range []struct {
			key  string
			want int
		}{{"big-key", http.StatusRequestEntityTooLarge}, {"", http.StatusUnauthorized}} {
			req, err := http.NewRequest(http.MethodPost, s.base+"/v1/sandboxes", strings.NewReader(big))
			if err != nil {
				t.Fatal(err)
			}
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := (&http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("try %d: the refusal was not read: %v", i, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("try %d: %d; want %d", i, resp.StatusCode, tc.want)
			}
		}
	}
}

// TestSmugglingRefused: a request with both Transfer-Encoding and
// Content-Length (as a front proxy that frames by Content-Length passes it
// on, with a request hidden in what it takes for the body) is answered 400
// problem+json and its connection closed: what follows its chunked body is
// never served as a request. Requests framed one way go on being served on
// one connection, pipelined.
func TestSmugglingRefused(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim"})
	addr := strings.TrimPrefix(s.base, "http://")
	// send writes raw on a new connection and reads every answer until the
	// server closes it.
	type answer struct {
		status int
		header http.Header
		body   string
		close  bool
	}
	send := func(raw string) []answer {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		var out []answer
		for {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() || len(out) == 0 {
						t.Fatalf("reading answer %d: %v", len(out)+1, err)
					}
				}
				return out
			}
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			out = append(out, answer{status: res.StatusCode, header: res.Header, body: string(body), close: res.Close})
			if res.Close {
				return out
			}
		}
	}
	smuggled := "GET /readyz HTTP/1.1\r\nHost: tether\r\n\r\n"
	for name, head := range map[string]string{
		"TE then CL": "GET /healthz HTTP/1.1\r\nHost: tether\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n",
		"CL then TE": "GET /healthz HTTP/1.1\r\nHost: tether\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		body := "0\r\n\r\n" + smuggled
		answers := send(fmt.Sprintf(head, len(body)) + body)
		if len(answers) != 1 {
			t.Errorf("%s: %d answers; want one, the refusal (the hidden request must not be served)", name, len(answers))
			continue
		}
		a := answers[0]
		if a.status != http.StatusBadRequest || a.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(a.body, `"code":"INVALID_REQUEST"`) || !a.close {
			t.Errorf("%s: %d %v %s; want 400 problem+json INVALID_REQUEST with Connection: close", name, a.status, a.header, a.body)
		}
	}
	// Framed one way only, chunked or by length, requests are served one
	// after another on one connection.
	pipelined := "GET /healthz HTTP/1.1\r\nHost: tether\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" +
		"GET /healthz HTTP/1.1\r\nHost: tether\r\nContent-Length: 5\r\n\r\nhello" +
		"GET /readyz HTTP/1.1\r\nHost: tether\r\nConnection: close\r\n\r\n"
	answers := send(pipelined)
	if len(answers) != 3 {
		t.Fatalf("pipelined requests: %d answers; want 3", len(answers))
	}
	for i, a := range answers {
		if a.status != http.StatusOK || (i < 2 && a.close) {
			t.Errorf("pipelined request %d: %d, close=%v; want 200, the connection kept", i+1, a.status, a.close)
		}
	}
}
