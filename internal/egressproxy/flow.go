package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Waits of a connection's start.
const (
	// firstBytesWait is how long the proxy waits for a client's first
	// bytes before it takes the protocol for one where the server speaks
	// first, and decides by address.
	firstBytesWait = 300 * time.Millisecond
	dialTimeout    = 10 * time.Second
	decideTimeout  = 10 * time.Second
)

// acceptTCP accepts the sandboxes' redirected connections until the
// listener closes.
func (p *Proxy) acceptTCP() {
	for {
		c, err := p.tcpLn.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			p.cfg.Log.Warn("egress proxy: accept", "err", err)
			time.Sleep(10 * time.Millisecond) // out of descriptors, say: let some close
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.handleTCP(c) })
	}
}

// handleTCP serves one connection: whose it is, where it was going, what
// it asks for; then the verdict, and the connection tunnelled, served as
// HTTP, or refused.
func (p *Proxy) handleTCP(c *net.TCPConn) {
	start := time.Now()
	sb, dst, err := p.identify(c)
	if err != nil {
		p.cfg.Log.Debug("egress proxy: a connection of no sandbox's", "from", c.RemoteAddr().String(), "err", err)
		p.untrack(c)
		reset(c)
		return
	}
	f := &flow{p: p, sb: sb, client: c, dst: dst, start: start, br: bufio.NewReaderSize(c, peekSize), proto: ProtoTCP}
	if n := sb.conns.Add(1); n > int32(p.cfg.MaxConnsPerSandbox) {
		f.v = refused("", "the sandbox has %d connections open, the most it may", n-1)
		f.finish()
		return
	}
	f.run()
}

// identify finds the sandbox a connection comes from (by its source
// address, which must be its link's, arriving at the host's end of that
// same link) and the destination it dialled.
func (p *Proxy) identify(c *net.TCPConn) (*sandboxState, netip.AddrPort, error) {
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	sb := p.sandboxAt(remote.Addr())
	switch {
	case sb == nil:
		return nil, netip.AddrPort{}, errors.New("no sandbox has that address")
	case sb.Gateway.IsValid() && local.Addr().Unmap() != sb.Gateway:
		return nil, netip.AddrPort{}, fmt.Errorf("arrived at %s, not at the sandbox's link", local.Addr())
	}
	dst, err := originalDst(c)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return sb, dst, nil
}

// reset closes c with a TCP reset: the client fails at once.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// flow is one connection of a sandbox's through the proxy.
type flow struct {
	p      *Proxy
	sb     *sandboxState
	client *net.TCPConn
	br     *bufio.Reader
	dst    netip.AddrPort
	start  time.Time
	proto  string
	// mitm is set when the proxy terminated the connection's TLS.
	mitm bool

	// mu guards the verdict (an HTTP connection's comes with its first
	// request), the credential's header name and the transport.
	mu         sync.Mutex
	v          verdict
	decided    bool
	credential string
	tr         *http.Transport

	out, in atomic.Int64
	once    sync.Once
}

// run decides the connection by its first bytes and serves it.
func (f *flow) run() {
	kind, name, err := f.sniff()
	switch {
	case err != nil:
		f.v = refused(name, "its first bytes could not be read: %v", err)
		f.finish()
		return
	case kind == kindHTTP:
		f.proto = ProtoHTTP
		f.serveHTTP()
		return
	case kind == kindTLS:
		f.proto = ProtoTLS
	}
	ctx, cancel := context.WithTimeout(context.Background(), decideTimeout)
	defer cancel()
	rules, v := f.decide(ctx, name)
	f.setVerdict(v)
	if !v.allowed {
		f.finish()
		return
	}
	if cred, ok := rules.credential(v.name); ok && kind == kindTLS && f.sb.CA != nil {
		f.terminate(ctx, cred)
		return
	}
	f.tunnel(ctx, kind == kindSilent)
}

// decide is the verdict on the connection under the sandbox's rules now.
func (f *flow) decide(ctx context.Context, name string) (Rules, verdict) {
	rules, ok := f.p.cfg.Policy.Lookup(ctx, f.sb.ID)
	if !ok {
		return rules, refused(name, "the sandbox has no rules")
	}
	return rules, f.p.decide(ctx, f.sb, rules, name, f.dst)
}

func (f *flow) setVerdict(v verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v, f.decided = v, true
}

// sniff waits for the client's first bytes (firstBytesWait, then the
// rest of a ClientHello or a request line, Config.HeaderTimeout) and tells what
// they are.
func (f *flow) sniff() (kind, name string, err error) {
	_ = f.client.SetReadDeadline(time.Now().Add(firstBytesWait))
	defer func() { _ = f.client.SetReadDeadline(time.Time{}) }()
	if _, err := f.br.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return kindSilent, "", nil
		}
		return "", "", err
	}
	_ = f.client.SetReadDeadline(time.Now().Add(f.p.cfg.HeaderTimeout))
	return sniffBytes(f.br)
}

// tunnel connects to the verdict's upstream and copies both ways (the
// kernel splices them) until both sides are done. A silent client's first
// bytes are checked when they come: a ClientHello or a request that asks
// for a name the rules do not allow there ends the connection.
func (f *flow) tunnel(ctx context.Context, silent bool) {
	defer f.finish()
	up, err := f.p.dial(ctx, f.v.upstream)
	if err != nil {
		f.noteEnd("connecting to %s failed: %v", f.v.upstream, err)
		return
	}
	if !f.p.track(up) {
		_ = up.Close()
		return
	}
	defer f.p.untrack(up)
	defer func() { _ = up.Close() }()
	var wg sync.WaitGroup
	wg.Go(func() {
		n, err := io.Copy(f.client, up)
		f.in.Add(n)
		endCopy(f.client, up, err)
	})
	defer wg.Wait()
	if silent {
		if err := f.checkLate(); err != nil {
			f.refuseLate(err.Error())
			_ = up.Close()
			return
		}
	}
	if prefix, _ := f.br.Peek(f.br.Buffered()); len(prefix) > 0 {
		n, err := up.Write(prefix)
		f.out.Add(int64(n))
		if err != nil {
			_ = up.Close()
			return
		}
	}
	n, err := io.Copy(up, f.client)
	f.out.Add(n)
	endCopy(up, f.client, err)
}

// endCopy ends a copy to dst from src: on its end of input dst's writing
// half is closed (the other direction goes on); on an error, both.
func endCopy(dst, src *net.TCPConn, err error) {
	if err == nil {
		_ = dst.CloseWrite()
		return
	}
	_ = dst.Close()
	_ = src.Close()
}

// checkLate waits for a silent client's first bytes and checks the name
// they ask for, if any.
func (f *flow) checkLate() error {
	if _, err := f.br.Peek(1); err != nil {
		return nil // closed before it said anything: nothing to check
	}
	_ = f.client.SetReadDeadline(time.Now().Add(f.p.cfg.HeaderTimeout))
	defer func() { _ = f.client.SetReadDeadline(time.Time{}) }()
	kind, name, err := sniffBytes(f.br)
	if err != nil {
		return fmt.Errorf("its first bytes could not be read: %w", err)
	}
	if kind == kindHTTP {
		host, err := peekHost(f.br)
		if err != nil {
			return fmt.Errorf("its request could not be read: %w", err)
		}
		if name, err = requestHost(host, f.dst.Port()); err != nil {
			return err
		}
	}
	if name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), decideTimeout)
	defer cancel()
	if _, v := f.decide(ctx, name); !v.allowed {
		return errors.New(v.reason)
	}
	return nil
}

// refuseLate marks an allowed connection refused after all.
func (f *flow) refuseLate(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v.allowed, f.v.reason = false, reason
}

// noteEnd says why an allowed connection ended early.
func (f *flow) noteEnd(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.v.reason == "" {
		f.v.reason = fmt.Sprintf(format, args...)
	}
}

// dial connects to an upstream address.
func (p *Proxy) dial(ctx context.Context, to netip.AddrPort) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", to.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// terminate ends the sandbox's TLS at the proxy, with a certificate for
// the name from the sandbox's CA, and hands the connection to the HTTP
// server that adds cred to each request.
func (f *flow) terminate(ctx context.Context, cred Credential) {
	f.mitm = true
	f.mu.Lock()
	f.credential = cred.headerName()
	f.mu.Unlock()
	name := f.v.name
	tc := tls.Server(&flowConn{Conn: f.client, f: f}, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.sb.CA.leaf(name) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	_ = tc.SetDeadline(time.Now().Add(f.p.cfg.HeaderTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		f.noteEnd("the TLS handshake with the sandbox failed: %v", err)
		f.finish()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	if !f.p.mitmLn.push(tc) {
		f.finish()
	}
}

// serveHTTP hands a plain HTTP connection to the HTTP server, which
// decides on its first request.
func (f *flow) serveHTTP() {
	if !f.p.plainLn.push(&flowConn{Conn: f.client, f: f}) {
		f.finish()
	}
}

// finish ends the flow once: the client's connection closes (with a reset
// if it was refused), the sandbox's count drops and the record goes out.
func (f *flow) finish() {
	f.once.Do(func() {
		f.mu.Lock()
		v, decided, cred, tr := f.v, f.decided, f.credential, f.tr
		f.mu.Unlock()
		if !v.allowed && f.in.Load() == 0 {
			reset(f.client)
		} else {
			_ = f.client.Close()
		}
		if tr != nil {
			tr.CloseIdleConnections()
		}
		f.p.untrack(f.client)
		f.sb.conns.Add(-1)
		if !decided && v.reason == "" {
			return // an HTTP connection closed before any request: nothing was asked
		}
		rec := ConnRecord{SandboxID: f.sb.ID, Proto: f.proto, Host: v.name, Addr: f.dst, Allowed: v.allowed,
			Rule: v.rule, Reason: v.reason, Credential: cred, BytesOut: f.out.Load(), BytesIn: f.in.Load(), Start: f.start, End: time.Now()}
		if v.allowed {
			rec.Upstream = v.upstream
		}
		f.p.record(rec)
	})
}

// flowConn is a flow's client connection as the HTTP servers and TLS see
// it: it reads what the proxy buffered first, counts bytes both ways, and
// its Close finishes the flow. It embeds net.Conn, not *net.TCPConn, so
// that no copy bypasses its reads (io.WriterTo, io.ReaderFrom).
type flowConn struct {
	net.Conn
	f *flow
}

func (c *flowConn) Read(b []byte) (int, error) {
	n, err := c.f.br.Read(b)
	c.f.out.Add(int64(n))
	return n, err
}

func (c *flowConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.f.in.Add(int64(n))
	return n, err
}

func (c *flowConn) Close() error {
	c.f.finish()
	return nil
}
