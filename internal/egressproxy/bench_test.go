package egressproxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/egress"
)

// The proxy's cost, on this machine alone: a server in an upstream
// network namespace (a veth pair away, as a sandbox's would be), reached
// directly from the host or through the proxy from a sandbox, in turns.
// Run with
//
//	go test -run '^$' -bench Egress -benchtime 10x -count 5 ./internal/egressproxy/

const benchBytes = 64 << 20

// benchWorld is a proxy, a sandbox allowed bench.example, and an upstream
// serving: raw bytes (the client sends how many, as 8 bytes) on 9000,
// HTTP on 80, HTTPS on 443 (a body of ?n= bytes).
type benchWorld struct {
	s     *sbx
	u     upstream
	roots *tls.Config
}

func newBenchWorld(b *testing.B) *benchWorld {
	b.Helper()
	w := newWorld(b)
	ca, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	u := newUpstream(b)
	ln := u.listen(b, 9000)
	b.Cleanup(func() { _ = ln.Close() })
	go serveBulk(ln)
	body := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		rw.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = io.CopyN(rw, zeros{}, int64(n))
	})
	u.serve(b, 80, nil, body)
	u.serve(b, 443, ca, body)
	w.hosts.set("bench.example", u.addr)
	s := w.sandbox(b, "bench.example")
	return &benchWorld{s: s, u: u, roots: &tls.Config{RootCAs: pool(ca), ServerName: "bench.example"}}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// serveBulk sends each client the bytes it asks for.
func serveBulk(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			var size [8]byte
			if _, err := io.ReadFull(c, size[:]); err == nil {
				_, _ = io.CopyN(c, zeros{}, int64(binary.BigEndian.Uint64(size[:])))
			}
		}()
	}
}

// dialer is how a benchmark connects: from the host, or the sandbox
// (from a thread that stays in the sandbox's namespace, so that no dial
// pays for a thread of its own).
func (bw *benchWorld) dialer(b *testing.B, proxied bool) func(ctx context.Context, addr string) (net.Conn, error) {
	if !proxied {
		return func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", addr)
		}
	}
	type dialed struct {
		c   net.Conn
		err error
	}
	type request struct {
		addr string
		done chan dialed
	}
	requests := make(chan request)
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ns, err := os.Open(filepath.Join(egress.NetnsDir, egress.NetnsName(bw.s.id)))
		if err == nil {
			err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET)
			_ = ns.Close()
		}
		started <- err
		for {
			select {
			case r := <-requests:
				c, err := net.Dial("tcp4", r.addr)
				r.done <- dialed{c, err}
			case <-stop:
				return
			}
		}
	}()
	if err := <-started; err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		r := request{addr: addr, done: make(chan dialed, 1)}
		requests <- r
		d := <-r.done
		return d.c, d.err
	}
}

// BenchmarkEgressThroughput moves 64 MiB down a new connection per
// transfer, directly and through the proxy in turns (the machine's load
// moves; turns keep the two comparable), and reports each one's rate and
// their ratio.
func BenchmarkEgressThroughput(b *testing.B) {
	bw := newBenchWorld(b)
	direct, proxied := bw.dialer(b, false), bw.dialer(b, true)
	transfers := map[string]func(b *testing.B, dial func(context.Context, string) (net.Conn, error)){
		"tcp": func(b *testing.B, dial func(context.Context, string) (net.Conn, error)) {
			c, err := dial(b.Context(), netip.AddrPortFrom(bw.u.addr, 9000).String())
			if err != nil {
				b.Fatal(err)
			}
			_, _ = c.Write(binary.BigEndian.AppendUint64(nil, benchBytes))
			if n, err := io.Copy(io.Discard, c); err != nil || n != benchBytes {
				b.Fatalf("got %d bytes, %v", n, err)
			}
			_ = c.Close()
		},
		"https": func(b *testing.B, dial func(context.Context, string) (net.Conn, error)) {
			bw.fetch(b, bw.client(dial, true), fmt.Sprintf("https://bench.example/?n=%d", benchBytes), benchBytes)
		},
		"http": func(b *testing.B, dial func(context.Context, string) (net.Conn, error)) {
			bw.fetch(b, bw.client(dial, true), fmt.Sprintf("http://bench.example/?n=%d", benchBytes), benchBytes)
		},
	}
	for _, kind := range []string{"tcp", "https", "http"} {
		b.Run(kind, func(b *testing.B) {
			var took [2]time.Duration
			for b.Loop() {
				for i, dial := range []func(context.Context, string) (net.Conn, error){direct, proxied} {
					start := time.Now()
					transfers[kind](b, dial)
					took[i] += time.Since(start)
				}
			}
			mb := float64(b.N) * benchBytes / (1 << 20)
			b.ReportMetric(mb/took[0].Seconds(), "direct-MiB/s")
			b.ReportMetric(mb/took[1].Seconds(), "proxy-MiB/s")
			b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio")
		})
	}
}

// BenchmarkEgressConnect makes a new connection and one small request,
// directly and through the proxy in turns, and reports each one's time
// and what the proxy adds.
func BenchmarkEgressConnect(b *testing.B) {
	bw := newBenchWorld(b)
	clients := []*http.Client{bw.client(bw.dialer(b, false), true), bw.client(bw.dialer(b, true), true)}
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			var took [2]time.Duration
			for b.Loop() {
				for i, client := range clients {
					start := time.Now()
					bw.fetch(b, client, scheme+"://bench.example/?n=2", 2)
					took[i] += time.Since(start)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(took[0].Microseconds())/n, "direct-µs")
			b.ReportMetric(float64(took[1].Microseconds())/n, "proxy-µs")
			b.ReportMetric(float64((took[1]-took[0]).Microseconds())/n, "added-µs")
		})
	}
}

// client is an HTTP client that reaches bench.example by dial, a new
// connection for every request if fresh.
func (bw *benchWorld) client(dial func(context.Context, string) (net.Conn, error), fresh bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return dial(ctx, net.JoinHostPort(bw.u.addr.String(), port))
		},
		TLSClientConfig: bw.roots, DisableKeepAlives: fresh, DisableCompression: true, Proxy: nil,
	}}
}

func (bw *benchWorld) fetch(b *testing.B, client *http.Client, url string, want int64) {
	resp, err := client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil || n != want || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d, %d bytes, %v", url, resp.StatusCode, n, err)
	}
}
