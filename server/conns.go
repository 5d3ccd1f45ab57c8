package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/tetherhq/tether/internal/framing"
)

// connGuard bounds the API's connections: it accepts at most max at once
// (the rest wait to be accepted) and at most perAddr from one remote
// address (the rest are closed at once). When every slot is taken it closes
// one connection to make room for the next: an idle keep-alive connection
// if there is one, which HTTP allows, else the oldest connection that has
// not authenticated (a request that never sent a valid API key: slow
// headers, a trickled body). So neither idle clients nor keyless ones can
// lock a new client out; only authenticated clients hold their slots, and
// each of those is bounded by the body pacing and the server's timeouts.
type connGuard struct {
	max, perAddr int

	mu     sync.Mutex
	seq    uint64
	conns  map[net.Conn]*connInfo
	byAddr map[string]int
}

// connInfo is what the guard knows of an open connection.
type connInfo struct {
	seq    uint64 // accept order: lower is older
	idle   bool
	authed bool
}

func newConnGuard(maxConns, perAddr int) *connGuard {
	return &connGuard{max: maxConns, perAddr: perAddr, conns: map[net.Conn]*connInfo{}, byAddr: map[string]int{}}
}

// listener wraps ln so that it accepts at most max connections at once, and
// at most perAddr from one address.
func (g *connGuard) listener(ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, g: g, slots: make(chan struct{}, g.max)}
}

// connKey is the context key of a connection's *slotConn (ConnContext).
type connKey struct{}

// connContext is the server's ConnContext hook: it lets a request mark its
// connection authenticated (authenticated).
func (g *connGuard) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// requestFraming is the verdict on the framing of the request whose
// context this is (package framing: the server's connections are watched
// by framing.Listener), asked once per request; Clear for a connection
// that is not watched.
func requestFraming(ctx context.Context) framing.Verdict {
	if c, ok := ctx.Value(connKey{}).(*framing.Conn); ok {
		return c.Next()
	}
	return framing.Clear
}

// authenticated marks the connection of the request whose context this is
// as one that sent a valid API key.
func (g *connGuard) authenticated(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if info := g.conns[c]; info != nil {
		info.authed = true
	}
}

// track is the server's ConnState hook.
func (g *connGuard) track(c net.Conn, state http.ConnState) {
	var victim net.Conn
	defer func() {
		if victim != nil {
			_ = victim.Close() // outside g.mu: closing frees its slot, which takes g.mu
		}
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch state {
	case http.StateNew:
		g.seq++
		g.conns[c] = &connInfo{seq: g.seq}
		if len(g.conns) >= g.max {
			if victim = g.victim(c); victim != nil {
				delete(g.conns, victim)
			}
		}
	case http.StateIdle:
		if info := g.conns[c]; info != nil {
			info.idle = true
		}
	case http.StateActive:
		if info := g.conns[c]; info != nil {
			info.idle = false
		}
	case http.StateClosed, http.StateHijacked:
		delete(g.conns, c)
	}
}

// victim is the connection to close to make room: the oldest idle one, else
// the oldest that has not authenticated, never keep. Nil if every other
// connection is authenticated and busy. The caller holds g.mu.
func (g *connGuard) victim(keep net.Conn) net.Conn {
	var idle, unauthed net.Conn
	var idleSeq, unauthedSeq uint64
	for c, info := range g.conns {
		switch {
		case c == keep:
		case info.idle && (idle == nil || info.seq < idleSeq):
			idle, idleSeq = c, info.seq
		case !info.authed && (unauthed == nil || info.seq < unauthedSeq):
			unauthed, unauthedSeq = c, info.seq
		}
	}
	if idle != nil {
		return idle
	}
	return unauthed
}

// admit counts a new connection from addr, or refuses it when that address
// holds perAddr connections already.
func (g *connGuard) admit(addr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.perAddr > 0 && g.byAddr[addr] >= g.perAddr {
		return false
	}
	g.byAddr[addr]++
	return true
}

func (g *connGuard) release(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byAddr[addr]--; g.byAddr[addr] <= 0 {
		delete(g.byAddr, addr)
	}
}

// remoteHost is the address a connection's cap counts it under: the remote
// IP, without the port.
func remoteHost(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// guardedListener accepts a connection only while it holds a free slot and
// its address is under its cap; the slot is freed when the connection
// closes.
type guardedListener struct {
	net.Listener
	g     *connGuard
	slots chan struct{}
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		addr := remoteHost(c)
		if !l.g.admit(addr) {
			_ = c.Close()
			<-l.slots
			continue
		}
		return &slotConn{Conn: c, free: func() { l.g.release(addr); <-l.slots }}, nil
	}
}

// slotConn frees its listener slot once, when it is first closed.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

// CloseWrite half-closes the connection, as the server does before it
// lingers on a connection it answered without reading the whole request.
func (c *slotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// fdReserve is the open files the service needs besides its API
// connections: its Postgres pools, sandbox commands' pipes, files, and the
// runtime's own.
func fdReserve(dbMaxConns int) int {
	return dbMaxConns + max(4, dbMaxConns/2) + 256
}

// fitConns checks MAX_CONNS against the open-file limit: each connection
// holds a descriptor, and a process out of descriptors cannot accept, reach
// Postgres or run a command. The default is lowered to fit (with a warning
// from the caller); a value the operator set that does not fit refuses the
// start.
func fitConns(maxConns int, isDefault bool, nofile uint64, reserve int) (int, error) {
	need := uint64(maxConns) + uint64(reserve)
	if need <= nofile {
		return maxConns, nil
	}
	fit := int(nofile) - reserve
	if !isDefault || fit < 16 {
		return 0, fmt.Errorf("MAX_CONNS=%d needs about %d open files (%d more for Postgres and sandboxes), but the limit is %d: raise it (ulimit -n, LimitNOFILE=) or lower MAX_CONNS",
			maxConns, need, reserve, nofile)
	}
	return fit, nil
}
