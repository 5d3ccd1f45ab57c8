package main

import (
	"net"
	"net/http"
	"sync"
)

// connGuard bounds the API's connections: it accepts at most max at once
// (the rest wait to be accepted), and when they are all taken it closes an
// idle keep-alive connection, which HTTP allows, so that clients that hold
// connections open without using them cannot lock a new client out.
// Connections that never send a request are cut by the server's
// ReadHeaderTimeout.
type connGuard struct {
	max int

	mu   sync.Mutex
	open int
	idle map[net.Conn]struct{}
}

func newConnGuard(maxConns int) *connGuard {
	return &connGuard{max: maxConns, idle: map[net.Conn]struct{}{}}
}

// listener wraps ln so that it accepts at most max connections at once.
func (g *connGuard) listener(ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, slots: make(chan struct{}, g.max)}
}

// track is the server's ConnState hook.
func (g *connGuard) track(c net.Conn, state http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch state {
	case http.StateNew:
		g.open++
		if g.open >= g.max {
			for idle := range g.idle {
				delete(g.idle, idle)
				_ = idle.Close()
				break
			}
		}
	case http.StateIdle:
		g.idle[c] = struct{}{}
	case http.StateActive:
		delete(g.idle, c)
	case http.StateClosed, http.StateHijacked:
		delete(g.idle, c)
		g.open--
	}
}

// guardedListener accepts a connection only while it holds a free slot; the
// slot is freed when the connection closes.
type guardedListener struct {
	net.Listener
	slots chan struct{}
}

func (l *guardedListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

// slotConn frees its listener slot once, when it is first closed.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
