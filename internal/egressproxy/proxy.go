// Package egressproxy is the per-host transparent egress proxy of
// allow-list sandboxes: every TCP connection such a sandbox makes, and
// every DNS question it asks, is redirected to it (by nftables rules that
// internal/host/egress makes), and it decides each one by the sandbox's
// rules, which a Policy gives it per connection, so that they may change
// while the sandbox runs.
//
// The proxy knows a sandbox by the source address of its connections
// (each sandbox has a /30 link of its own, which nothing inside it can
// change), and the destination the sandbox dialled by the address
// conntrack kept (SO_ORIGINAL_DST). What it decides by:
//
//   - TLS: the server name of the ClientHello (SNI); the TLS then passes
//     through untouched, unless a rule holds a credential for that name:
//     then the proxy terminates it with the sandbox's own CA (which the
//     sandbox trusts), adds the credential's header to every request,
//     and sends it on over a new TLS connection to the real host,
//     verified against the host's roots;
//   - plain HTTP: the Host of each request (one connection serves one
//     host);
//   - other TCP: the address alone (address rules, or the name the
//     proxy's DNS gave the address for).
//
// The proxy resolves names itself (Config.Lookup), and connects only to
// an address it resolved for the name, or one an address rule allows:
// DNS rebinding and Host/SNI tricks get nowhere. Its DNS answers only
// names a rule allows, with the addresses it resolved; it never forwards
// a question for another name (no DNS tunnel out). See decide for the
// verdict, reachable for the addresses no rule opens.
package egressproxy

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultResolveTTL         = 30 * time.Second
	DefaultMaxConnsPerSandbox = 512
	DefaultHeaderTimeout      = 10 * time.Second
)

// Config is a proxy's configuration.
type Config struct {
	// Policy gives each sandbox's rules; required.
	Policy Policy
	// Recorder receives a record of every connection; nil: none.
	Recorder Recorder
	// Lookup resolves names (StaticLookup of EGRESS_HOSTS); nil: the
	// host's resolver.
	Lookup LookupFunc
	// ResolveTTL is how long a resolution is kept (DefaultResolveTTL).
	ResolveTTL time.Duration
	// AllowPrivate lets rules reach private, loopback and link-local
	// addresses and the host's own (EGRESS_ALLOW_PRIVATE).
	AllowPrivate bool
	// RootCAs verify the hosts the proxy terminates TLS for (those with
	// a credential); nil: the host's roots.
	RootCAs *x509.CertPool
	// ListenAddr is the address the proxy listens on, its ports chosen
	// by the kernel; "" is 0.0.0.0 (the redirect delivers to the host's
	// end of each sandbox's link).
	ListenAddr string
	// MaxConnsPerSandbox bounds one sandbox's connections at once
	// (DefaultMaxConnsPerSandbox).
	MaxConnsPerSandbox int
	// HeaderTimeout bounds how long a client may take to send what the
	// proxy decides by: a ClientHello, a request's header, a TLS
	// handshake (DefaultHeaderTimeout).
	HeaderTimeout time.Duration
	// Log receives what goes wrong in the proxy itself; nil: discarded.
	Log *slog.Logger
}

// Sandbox is a sandbox the proxy serves.
type Sandbox struct {
	ID string
	// Addr is the sandbox's address on its link: its connections come
	// from it. Gateway is the host's end of the link, where they arrive.
	Addr, Gateway netip.Addr
	// CA is the sandbox's own certificate authority, which it trusts;
	// nil: no credential can be added for it.
	CA *CA
}

// Proxy is a running egress proxy. Its methods are safe for concurrent
// use.
type Proxy struct {
	cfg Config
	res resolver

	tcpLn, dnsLn *net.TCPListener
	dnsConn      *net.UDPConn
	// plain and mitm serve HTTP connections, the second after the proxy
	// terminated their TLS; their listeners are fed by the proxy.
	plain, mitm     *http.Server
	plainLn, mitmLn *chanListener
	rp              *httputil.ReverseProxy

	hostAddrs hostAddrs

	mu           sync.Mutex
	byAddr       map[netip.Addr]*sandboxState
	byID         map[string]*sandboxState
	deniedRanges []netip.Prefix
	conns        map[net.Conn]struct{}
	stopped      bool

	wg      sync.WaitGroup
	started atomic.Bool
	dnsSem  chan struct{}
}

// New makes a proxy listening on its ports (Ports), which serves nothing
// until Start: connections wait in the listeners' queues meanwhile.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, errors.New("egressproxy: a Policy is required")
	}
	cfg.ResolveTTL = cmp.Or(cfg.ResolveTTL, DefaultResolveTTL)
	cfg.MaxConnsPerSandbox = cmp.Or(cfg.MaxConnsPerSandbox, DefaultMaxConnsPerSandbox)
	cfg.ListenAddr = cmp.Or(cfg.ListenAddr, "0.0.0.0")
	cfg.HeaderTimeout = cmp.Or(cfg.HeaderTimeout, DefaultHeaderTimeout)
	if cfg.Lookup == nil {
		cfg.Lookup = HostLookup
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, res: resolver{lookup: cfg.Lookup, ttl: cfg.ResolveTTL},
		byAddr: map[netip.Addr]*sandboxState{}, byID: map[string]*sandboxState{}, conns: map[net.Conn]struct{}{},
		dnsSem: make(chan struct{}, 64)}
	if err := p.listen(); err != nil {
		p.closeListeners()
		return nil, err
	}
	p.buildHTTP()
	return p, nil
}

// listen takes the proxy's TCP port and its DNS port (UDP and TCP, the
// same number).
func (p *Proxy) listen() error {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort(p.cfg.ListenAddr, "0"))
	if err != nil {
		return fmt.Errorf("egressproxy: listen: %w", err)
	}
	p.tcpLn = ln.(*net.TCPListener)
	var lastErr error
	for range 20 {
		dl, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort(p.cfg.ListenAddr, "0"))
		if err != nil {
			return fmt.Errorf("egressproxy: listen for DNS: %w", err)
		}
		port := dl.Addr().(*net.TCPAddr).Port
		uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(p.cfg.ListenAddr), uint16(port))))
		if err == nil {
			p.dnsLn, p.dnsConn = dl.(*net.TCPListener), uc
			return nil
		}
		lastErr = err
		_ = dl.Close()
	}
	return fmt.Errorf("egressproxy: listen for DNS on UDP: %w", lastErr)
}

func (p *Proxy) closeListeners() {
	if p.tcpLn != nil {
		_ = p.tcpLn.Close()
	}
	if p.dnsLn != nil {
		_ = p.dnsLn.Close()
	}
	if p.dnsConn != nil {
		_ = p.dnsConn.Close()
	}
}

// buildHTTP makes the two HTTP servers and the reverse proxy they share.
func (p *Proxy) buildHTTP() {
	p.plainLn, p.mitmLn = newChanListener(p.tcpLn.Addr()), newChanListener(p.tcpLn.Addr())
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     flowTransport{},
		FlushInterval: -1,
		ErrorHandler:  p.upstreamError,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	mk := func() *http.Server {
		return &http.Server{
			Handler:           http.HandlerFunc(p.serveRequest),
			ReadHeaderTimeout: p.cfg.HeaderTimeout,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    maxHeaderBytes,
			ConnContext:       flowContext,
			ErrorLog:          log.New(io.Discard, "", 0),
		}
	}
	p.plain, p.mitm = mk(), mk()
	p.plain.SetKeepAlivesEnabled(true)
}

// Ports are the proxy's TCP port (where sandboxes' TCP is redirected) and
// DNS port (UDP and TCP).
func (p *Proxy) Ports() (tcp, dns uint16) {
	return uint16(p.tcpLn.Addr().(*net.TCPAddr).Port), uint16(p.dnsLn.Addr().(*net.TCPAddr).Port)
}

// Parser is how rules for this proxy are parsed: with its denied ranges
// and its operator's choice on private addresses.
func (p *Proxy) Parser() Parser {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Parser{AllowPrivate: p.cfg.AllowPrivate, Denied: append([]netip.Prefix(nil), p.deniedRanges...)}
}

// Deny adds a range no sandbox ever reaches through the proxy, whatever
// its rules: the sandboxes' own pool.
func (p *Proxy) Deny(pfx netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deniedRanges = append(p.deniedRanges, pfx.Masked())
}

// Attach starts serving sb: connections from its address are its own. A
// sandbox attached again (by id or address) replaces the earlier one.
func (p *Proxy) Attach(sb Sandbox) error {
	if sb.ID == "" || !sb.Addr.IsValid() {
		return errors.New("egressproxy: attach: a sandbox needs an id and an address")
	}
	st := &sandboxState{Sandbox: sb}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.byID[sb.ID]; old != nil {
		delete(p.byAddr, old.Addr)
	}
	if old := p.byAddr[sb.Addr]; old != nil {
		delete(p.byID, old.ID)
	}
	p.byAddr[sb.Addr], p.byID[sb.ID] = st, st
	return nil
}

// Detach stops serving sandbox id: its address is nobody's until another
// sandbox is attached at it. Its connections open now go on until they
// end.
func (p *Proxy) Detach(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.byID[id]; st != nil {
		delete(p.byAddr, st.Addr)
		delete(p.byID, id)
	}
}

// sandboxAt is the sandbox whose address a is, or nil.
func (p *Proxy) sandboxAt(a netip.Addr) *sandboxState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byAddr[a.Unmap()]
}

// Start serves the listeners until Stop.
func (p *Proxy) Start() {
	if !p.started.CompareAndSwap(false, true) {
		return
	}
	p.wg.Go(p.acceptTCP)
	p.wg.Go(p.acceptDNS)
	p.wg.Go(p.serveUDP)
	p.wg.Go(func() { _ = p.plain.Serve(p.plainLn) })
	p.wg.Go(func() { _ = p.mitm.Serve(p.mitmLn) })
}

// Stop closes the listeners and every connection and waits until all the
// proxy's goroutines have ended (or ctx does).
func (p *Proxy) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.closeListeners()
	_ = p.plain.Close()
	_ = p.mitm.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("egressproxy: stop: %w", ctx.Err())
	}
}

// track adds c to the connections Stop closes (false once stopped: the
// caller closes c); untrack removes it.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) record(r ConnRecord) {
	if p.cfg.Recorder != nil {
		p.cfg.Recorder.Record(r)
	}
}

// sandboxState is an attached sandbox and what the proxy keeps of it: its
// connections open, and the addresses its DNS answers gave it.
type sandboxState struct {
	Sandbox
	conns atomic.Int32

	mu       sync.Mutex
	answered map[netip.Addr]answer
}

// answer is what the proxy's DNS told a sandbox an address is: a name
// (or a few) and until when.
type answer struct {
	names []string
	until time.Time
}

// Bounds of what a sandbox's DNS answers are remembered by.
const (
	answeredTTL    = 10 * time.Minute
	maxAnswered    = 4096
	maxNamesPerIP  = 8
	maxHeaderBytes = 64 << 10
)

// remember records that the sandbox was told name is at addrs.
func (s *sandboxState) remember(name string, addrs []netip.Addr) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answered == nil {
		s.answered = map[netip.Addr]answer{}
	}
	if len(s.answered) >= maxAnswered {
		for a, an := range s.answered {
			if now.After(an.until) {
				delete(s.answered, a)
			}
		}
		if len(s.answered) >= maxAnswered {
			clear(s.answered)
		}
	}
	for _, a := range addrs {
		an := s.answered[a]
		if !slices.Contains(an.names, name) {
			if len(an.names) >= maxNamesPerIP {
				an.names = an.names[1:]
			}
			an.names = append(an.names, name)
		}
		an.until = now.Add(answeredTTL)
		s.answered[a] = an
	}
}

// namesAt are the names the sandbox was told a is, lately.
func (s *sandboxState) namesAt(a netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	an, ok := s.answered[a]
	if !ok || time.Now().After(an.until) {
		return nil
	}
	return append([]string(nil), an.names...)
}

// answeredFor reports whether the sandbox was told, lately, that name is
// at a.
func (s *sandboxState) answeredFor(a netip.Addr, name string) bool {
	return slices.Contains(s.namesAt(a), name)
}
