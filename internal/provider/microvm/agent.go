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

// agentConn is Tether's connection to one guest's agent: a yamux session
// over the VM's virtio-serial socket, made on first use and again after
// it breaks.
type agentConn struct {
	// socket returns the path of the port's socket.
	socket func() (string, error)

	mu      sync.Mutex
	session *yamux.Session
}

// stream opens a stream for one operation and sends its request.
func (a *agentConn) stream(ctx context.Context, req vmwire.Request) (net.Conn, error) {
	s, err := a.sessionFor(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.OpenStream()
	if err != nil {
		// A broken session: one more try on a new one.
		a.drop(s)
		if s, err = a.sessionFor(ctx); err != nil {
			return nil, err
		}
		if st, err = s.OpenStream(); err != nil {
			a.drop(s)
			return nil, fmt.Errorf("opening a stream to the guest: %w", err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetWriteDeadline(dl)
	}
	if err := vmwire.NewWriter(st).JSON(vmwire.KindRequest, req); err != nil {
		_ = st.Close()
		return nil, err
	}
	_ = st.SetWriteDeadline(time.Time{})
	return st, nil
}

func (a *agentConn) sessionFor(ctx context.Context) (*yamux.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session != nil && !a.session.IsClosed() {
		return a.session, nil
	}
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
	a.session = s
	return s, nil
}

func (a *agentConn) drop(s *yamux.Session) {
	a.mu.Lock()
	if a.session == s {
		a.session = nil
	}
	a.mu.Unlock()
	_ = s.Close()
}

func (a *agentConn) close() {
	a.mu.Lock()
	s := a.session
	a.session = nil
	a.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// ping asks the agent to answer.
func (a *agentConn) ping(ctx context.Context) error {
	st, err := a.stream(ctx, vmwire.Request{Op: vmwire.OpPing})
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Now()) })
	defer stop()
	return vmwire.ReadJSON(st, vmwire.KindOK, nil)
}

// simple runs an operation whose answer is one frame of kind OK.
func (a *agentConn) simple(ctx context.Context, req vmwire.Request) error {
	st, err := a.stream(ctx, req)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Now()) })
	defer stop()
	return vmwire.ReadJSON(st, vmwire.KindOK, nil)
}
