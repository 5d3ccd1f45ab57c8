package sim

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/provider"
)

// A simulated sandbox's ports: params.ports names the ports its
// simulated server listens on (none by default). A dial to one of them
// is answered, in this process, by an HTTP server of its own on the other
// end of an in-memory pipe (nothing listens on the host): it echoes
// requests (their body streamed back; GET /headers answers the request's
// headers as JSON; GET /response-headers answers with each query parameter
// as a header, as httpbin's does, for apps that set cookies) and WebSocket
// messages. A dial to any other port is
// refused, as a real sandbox's would be.

// Headers the simulated server answers every plain request with.
const (
	HeaderSandbox = "Sim-Sandbox"
	HeaderPort    = "Sim-Port"
	HeaderMethod  = "Sim-Method"
	HeaderURI     = "Sim-Uri"
)

// DialPort implements provider.PortDialer.
func (p *Provider) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validName(sandboxID) {
		return nil, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s is not held by the simulator", sandboxID)
	}
	raw, err := os.ReadFile(filepath.Join(p.dir, sandboxID))
	if err != nil {
		return nil, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s is not held by the simulator", sandboxID)
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, provider.Errorf(provider.CodeProviderUnavailable, "sandbox %s's simulated resource is unreadable", sandboxID)
	}
	params, _ := parseParams(rec.Params)
	if !slices.Contains(params.Ports, port) {
		return nil, provider.Errorf(provider.CodePortUnreachable, "nothing listens on port %d in sandbox %s (connection refused)", port, sandboxID)
	}
	client, server := net.Pipe()
	serveEcho(server, sandboxID, port)
	return client, nil
}

// serveEcho answers the requests that come over conn, on goroutines that
// end when conn is closed.
func serveEcho(conn net.Conn, id string, port int) {
	srv := &http.Server{Handler: echoHandler(id, port), ReadHeaderTimeout: time.Minute}
	// Serve returns once the listener has given its one connection; the
	// connection's own goroutine ends with it.
	go func() { _ = srv.Serve(&oneConnListener{conn: conn}) }()
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func echoHandler(id string, port int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if websocket.IsWebSocketUpgrade(r) {
			echoWebSocket(w, r)
			return
		}
		h := w.Header()
		h.Set(HeaderSandbox, id)
		h.Set(HeaderPort, strconv.Itoa(port))
		h.Set(HeaderMethod, r.Method)
		h.Set(HeaderURI, r.RequestURI)
		switch r.URL.Path {
		case "/headers":
			h.Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(r.Header)
			return
		case "/response-headers":
			for name, values := range r.URL.Query() {
				for _, v := range values {
					h.Add(name, v)
				}
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		h.Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		// Streamed back as it comes.
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				_ = http.NewResponseController(w).Flush()
			}
			if err != nil {
				return
			}
		}
	}
}

// echoWebSocket sends every message back as it came.
func echoWebSocket(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer func() { _ = ws.Close() }()
	for {
		kind, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if err := ws.WriteMessage(kind, msg); err != nil {
			return
		}
	}
}

// oneConnListener gives one connection, then reports itself closed.
type oneConnListener struct {
	mu   sync.Mutex
	conn net.Conn
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil, net.ErrClosed
	}
	c := l.conn
	l.conn = nil
	return c, nil
}

func (l *oneConnListener) Close() error { return nil }

func (l *oneConnListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "sim" }
