package local

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// startWebServer starts, in the background, python3's http.server in
// sandbox id on port, serving an index.html that says body, and waits
// until DialPort reaches it.
func startWebServer(t *testing.T, p *Provider, id string, port int, body string) {
	t.Helper()
	execIn(t, p, id, fmt.Sprintf(`mkdir -p /workspace/www && printf %%s %q > /workspace/www/index.html && cd /workspace/www &&
		(python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &)`, body, port))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := p.DialPort(t.Context(), id, port)
		if err == nil {
			_ = conn.Close()
			return
		}
		if provider.ErrorCode(err) != provider.CodePortUnreachable || time.Now().After(deadline) {
			t.Fatalf("the web server in %s never listened on %d: %v", id, port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getThrough sends GET /index.html over conn and returns the body.
func getThrough(t *testing.T, conn net.Conn) string {
	t.Helper()
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// netnsOf is the network namespace of task (a thread id, or "self").
func netnsOf(t *testing.T, task string) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/task/" + task + "/ns/net")
	if err != nil {
		return "" // the thread ended meanwhile
	}
	return ns
}

// TestDialPortStaysInTheSandbox: DialPort reaches 127.0.0.1:port of the
// sandbox itself, in the default (loopback-only) and the allow-list
// network, never a listener on the host's loopback nor one in another
// sandbox; and no thread of Tether's is left in a sandbox's namespace.
func TestDialPortStaysInTheSandbox(t *testing.T) {
	t.Parallel()
	p, _ := newEgressProvider(t, nil)
	// A server on the host's loopback, on the port the sandboxes use: a
	// proxy that dialled the host's 127.0.0.1 would reach it.
	hostAddr := serve(t, "", "127.0.0.1:0", "host-loopback")
	_, portStr, _ := net.SplitHostPort(hostAddr)
	port, _ := strconv.Atoi(portStr)
	hostNS := netnsOf(t, strconv.Itoa(os.Getpid()))

	none := createIn(t, p, nil)
	other := createIn(t, p, nil)
	allow := createIn(t, p, map[string]any{"network": "allowlist", "allow": []string{"10.0.0.0/8"}})

	// Nothing listens in the sandbox yet: refused there, whatever the
	// host's loopback has.
	for _, id := range []string{none, allow} {
		conn, err := p.DialPort(t.Context(), id, port)
		if err == nil {
			body := getThrough(t, conn)
			t.Fatalf("DialPort(%s, %d) reached %q, want PORT_UNREACHABLE: the host's loopback is not the sandbox's", id, port, body)
		}
		if provider.ErrorCode(err) != provider.CodePortUnreachable {
			t.Fatalf("DialPort with nothing listening = %v, want PORT_UNREACHABLE", err)
		}
	}

	startWebServer(t, p, none, port, "sandbox-none")
	startWebServer(t, p, allow, port, "sandbox-allowlist")
	for id, want := range map[string]string{none: "sandbox-none", allow: "sandbox-allowlist"} {
		for range 20 { // a few dials, each on a thread of its own
			conn, err := p.DialPort(t.Context(), id, port)
			if err != nil {
				t.Fatalf("DialPort(%s): %v", id, err)
			}
			if got := getThrough(t, conn); got != want {
				t.Fatalf("DialPort(%s, %d) reached %q, want %q", id, port, got, want)
			}
		}
	}
	// Another sandbox's port is not this one's.
	if conn, err := p.DialPort(t.Context(), other, port); err == nil {
		t.Fatalf("DialPort(other) reached %q: another sandbox's server", getThrough(t, conn))
	} else if provider.ErrorCode(err) != provider.CodePortUnreachable {
		t.Fatalf("DialPort(other) = %v, want PORT_UNREACHABLE", err)
	}

	// Every thread of this process is back in the host's namespace, once
	// the dials' own threads have ended (a moment after their goroutine).
	deadline := time.Now().Add(10 * time.Second)
	for {
		stray := strayThreads(t, hostNS)
		if len(stray) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads left in a sandbox's network namespace: %v", stray)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Bad ports, and a sandbox that is gone.
	for _, bad := range []int{0, 65536, -1} {
		if _, err := p.DialPort(t.Context(), none, bad); provider.ErrorCode(err) != provider.CodeInvalidRequest {
			t.Errorf("DialPort(port %d) = %v, want INVALID_REQUEST", bad, err)
		}
	}
	if err := p.Destroy(context.Background(), none); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DialPort(t.Context(), none, port); provider.ErrorCode(err) != provider.CodeProviderUnavailable {
		t.Errorf("DialPort of a destroyed sandbox = %v, want PROVIDER_UNAVAILABLE", err)
	}
	if _, err := p.DialPort(t.Context(), provider.NewSandboxID(), port); provider.ErrorCode(err) != provider.CodeProviderUnavailable {
		t.Errorf("DialPort of an unknown sandbox = %v, want PROVIDER_UNAVAILABLE", err)
	}
}

// strayThreads are this process's threads in another network namespace
// than hostNS.
func strayThreads(t *testing.T, hostNS string) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var stray []string
	for _, task := range tasks {
		if ns := netnsOf(t, task.Name()); ns != "" && ns != hostNS {
			stray = append(stray, task.Name()+" in "+ns)
		}
	}
	return stray
}
