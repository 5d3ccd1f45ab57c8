package microvm

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/tetherhq/tether/internal/vmwire"
)

// sessionIdle is how long a session with no stream open is kept for the
// next operation before it is closed. QEMU serves one connection to the
// port at a time: a session held for ever would lock out every other
// provider value over the same folder (a restarted Tether whose old
// process is still going away, a test's second provider).
const sessionIdle = time.Second

// agentConn is Tether's connection to one guest's agent: a yamux session
// over the VM's virtio-serial socket, made when an operation needs it and
// closed once none has needed it for sessionIdle.
type agentConn struct {
	// socket returns the path of the port's socket.
	socket func() (string, error)

	mu      sync.Mutex
	session *yamux.Session
	open    int         // streams open on session
	idle    *time.Timer // closes session when it fires
}

// stream opens a stream for one operation and sends its request. The
// stream's Close ends the operation.
func (a *agentConn) stream(ctx context.Context, req vmwire.Request) (net.Conn, error) {
	s, err := a.acquire(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.OpenStream()
	if err != nil {
		// A broken session: one more try on a new one.
		a.release(s, true)
		if s, err = a.acquire(ctx); err != nil {
			return nil, err
		}
		if st, err = s.OpenStream(); err != nil {
			a.release(s, true)
			return nil, fmt.Errorf("opening a stream to the guest: %w", err)
		}
	}
	c := &agentStream{Stream: st, release: func() { a.release(s, false) }}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetWriteDeadline(dl)
	}
	if err := vmwire.NewWriter(st).JSON(vmwire.KindRequest, req); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = st.SetWriteDeadline(time.Time{})
	return c, nil
}

// agentStream is a stream that gives its session back when closed.
type agentStream struct {
	*yamux.Stream
	once    sync.Once
	release func()
}

func (s *agentStream) Close() error {
	err := s.Stream.Close()
	s.once.Do(s.release)
	return err
}

// acquire returns the session, made if there is none, counting a stream
// open on it.
func (a *agentConn) acquire(ctx context.Context) (*yamux.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session != nil && !a.session.IsClosed() {
		a.open++
		if a.idle != nil {
			a.idle.Stop()
			a.idle = nil
		}
		return a.session, nil
	}
	s, err := a.dial(ctx)
	if err != nil {
		return nil, err
	}
	a.session, a.open = s, 1
	return s, nil
}

// release counts a stream of s closed; broken closes s at once.
func (a *agentConn) release(s *yamux.Session, broken bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session != s {
		return
	}
	a.open--
	if broken {
		a.session = nil
		_ = s.Close()
		return
	}
	if a.open == 0 {
		a.idle = time.AfterFunc(sessionIdle, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.session == s && a.open == 0 {
				a.session = nil
				_ = s.Close()
			}
		})
	}
}

// dial connects to the port and makes a session over it.
func (a *agentConn) dial(ctx context.Context) (*yamux.Session, error) {
	path, err := a.socket()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to the guest's agent: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	br, err := vmwire.Hello(conn)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("greeting the guest's agent: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	cfg.StreamOpenTimeout = 30 * time.Second
	s, err := yamux.Client(vmwire.Conn{Reader: br, Writer: conn, Closer: conn}, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("starting a session with the guest: %w", err)
	}
	return s, nil
}

// close closes the session, whatever uses it (the VM is going away).
func (a *agentConn) close() {
	a.mu.Lock()
	s := a.session
	a.session, a.open = nil, 0
	if a.idle != nil {
		a.idle.Stop()
		a.idle = nil
	}
	a.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// ping asks the agent to answer.
func (a *agentConn) ping(ctx context.Context) error {
	return a.simple(ctx, vmwire.Request{Op: vmwire.OpPing})
}

// simple runs an operation whose answer is one frame of kind OK.
func (a *agentConn) simple(ctx context.Context, req vmwire.Request) error {
	st, err := a.stream(ctx, req)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Now()) })
	defer stop()
	return vmwire.ReadJSON(st, vmwire.KindOK, nil)
}
