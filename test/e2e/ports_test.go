package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsEcho is a WebSocket echo server in Python's standard library alone:
// the handshake, then every frame sent back as it came (FIN and opcode
// kept, so fragmented messages come back fragmented; a ping is answered
// with a pong, a close with a close).
const wsEcho = `import base64, hashlib, socket, struct, sys, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def exact(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b
def handle(c):
    try:
        req = b""
        while b"\r\n\r\n" not in req:
            d = c.recv(4096)
            if not d:
                return
            req += d
        key = ""
        for line in req.decode("latin-1").split("\r\n"):
            if line.lower().startswith("sec-websocket-key:"):
                key = line.split(":", 1)[1].strip()
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())
        while True:
            h = exact(c, 2)
            first, op, n = h[0] & 0x8F, h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", exact(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", exact(c, 8))[0]
            mask = exact(c, 4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(exact(c, n)))
            if op == 8:
                c.sendall(b"\x88\x00")
                return
            if op == 9:
                first = 0x8A
            if n < 126:
                hdr = bytes([first, n])
            elif n < 65536:
                hdr = bytes([first, 126]) + struct.pack(">H", n)
            else:
                hdr = bytes([first, 127]) + struct.pack(">Q", n)
            c.sendall(hdr + data)
    except (EOFError, OSError):
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// get sends GET url, with the API key unless keyless, and returns the
// status and body.
func (e *env) get(url string, keyless bool) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if !keyless {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// waitServing polls url (with the key) until it answers 200 with want.
func (e *env) waitServing(url, want string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := e.get(url, false)
		if code == http.StatusOK && body == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s never served %q: %d %s", url, want, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// echoes checks that the WebSocket at url echoes messages, small and
// large (the large one fragmented by the client).
func echoes(t *testing.T, url string, hdr http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, url, hdr)
	if err != nil {
		t.Fatalf("WebSocket %s: %v", url, err)
	}
	_ = res.Body.Close()
	defer func() { _ = ws.Close() }()
	for _, msg := range []string{"hello", strings.Repeat("0123456789", 20_000), "bye"} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, got, err := ws.ReadMessage()
		if err != nil || string(got) != msg {
			t.Fatalf("WebSocket echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
}

// TestPortsAndPreviews: servers in a local sandbox without network are
// reached through the API and through a preview URL (HTTP and WebSocket),
// only in that sandbox, and the preview dies with the sandbox without
// bringing anything back.
func TestPortsAndPreviews(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.createReady(map[string]any{"provider": "local"})
	b := e.createReady(map[string]any{"provider": "local"})
	start := `mkdir -p /workspace/www && printf %s "hello from $SANDBOX" > /workspace/www/index.html &&
		cat > /workspace/ws.py <<'PYEOF'
` + wsEcho + `PYEOF
		cd /workspace/www && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) &&
		(python3 /workspace/ws.py 8001 >/dev/null 2>&1 &)`
	for _, id := range []string{a, b} {
		code, res := e.do(http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{
			"command": start, "timeout_seconds": 30, "env": map[string]string{"SANDBOX": id},
		})
		if code != http.StatusOK || res["exit_code"] != 0.0 {
			t.Fatalf("start the servers in %s = %d %v", id, code, res)
		}
	}
	// b also serves on 8002, a not: a's URL never reaches b's server.
	if code, res := e.exec(b, `cd /workspace/www && (python3 -m http.server 8002 --bind 127.0.0.1 >/dev/null 2>&1 &)`); code != http.StatusOK {
		t.Fatalf("start b's 8002 = %d %v", code, res)
	}
	api := e.replica.URL()
	e.waitServing(api+"/v1/sandboxes/"+a+"/ports/8000/index.html", "hello from "+a)
	e.waitServing(api+"/v1/sandboxes/"+b+"/ports/8000/index.html", "hello from "+b)
	e.waitServing(api+"/v1/sandboxes/"+b+"/ports/8002/index.html", "hello from "+b)
	code, body := e.get(api+"/v1/sandboxes/"+a+"/ports/8002/index.html", false)
	if code != http.StatusBadGateway || !strings.Contains(body, `"PORT_UNREACHABLE"`) {
		t.Errorf("a's port 8002 (b's server only) = %d %s, want 502 PORT_UNREACHABLE", code, body)
	}
	if code, _ := e.get(api+"/v1/sandboxes/"+a+"/ports/8000/index.html", true); code != http.StatusUnauthorized {
		t.Errorf("a port without the API key = %d, want 401", code)
	}
	ws := "ws" + strings.TrimPrefix(api, "http")
	echoes(t, ws+"/v1/sandboxes/"+a+"/ports/8001/", http.Header{"Authorization": {"Bearer " + key}})

	// Preview URLs: no API key.
	preview := func(port int) string {
		code, p := e.do(http.MethodPost, "/v1/sandboxes/"+a+"/previews", map[string]any{"port": port})
		if code != http.StatusCreated {
			t.Fatalf("create a preview = %d %v", code, p)
		}
		return p["url"].(string)
	}
	web, sock := preview(8000), preview(8001)
	if code, body := e.get(web+"index.html", true); code != http.StatusOK || body != "hello from "+a {
		t.Errorf("the preview URL = %d %q, want a's page", code, body)
	}
	echoes(t, "ws"+strings.TrimPrefix(sock, "http"), nil)

	// The traffic is in a's activity.
	code, acts := e.do(http.MethodGet, "/v1/sandboxes/"+a+"/activity?limit=500", nil)
	raw, _ := json.Marshal(acts)
	if code != http.StatusOK || !strings.Contains(string(raw), `"kind":"preview"`) || !strings.Contains(string(raw), `"http_status":101`) {
		t.Errorf("a's activity = %d %s, want preview and WebSocket records", code, raw)
	}

	// a ends: its previews answer 410, and nothing is started again.
	if code, res := e.do(http.MethodDelete, "/v1/sandboxes/"+a, nil); code != http.StatusAccepted {
		t.Fatalf("delete a = %d %v", code, res)
	}
	e.waitFor(a, "released", released)
	for range 3 {
		code, body := e.get(web+"index.html", true)
		if code != http.StatusGone || !strings.Contains(body, `"PREVIEW_GONE"`) {
			t.Errorf("the preview of an ended sandbox = %d %s, want 410 PREVIEW_GONE", code, body)
		}
	}
	if _, sb := e.do(http.MethodGet, "/v1/sandboxes/"+a, nil); sb["state"] != "terminated" || !released(sb) {
		t.Errorf("after the preview's requests a is %v", sb)
	}
	_, list := e.do(http.MethodGet, "/v1/sandboxes?released=false", nil)
	if items, _ := list["items"].([]any); len(items) != 1 {
		t.Errorf("live sandboxes after a's end = %d, want b alone", len(items))
	}
	// b still serves.
	e.waitServing(api+"/v1/sandboxes/"+b+"/ports/8000/index.html", "hello from "+b)
}
