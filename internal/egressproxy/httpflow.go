package egressproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTP through the proxy: plain HTTP connections, and the TLS ones it
// terminated to add a credential, are served by net/http (its limits on
// slow clients and large headers), each request checked and sent on by a
// reverse proxy over connections of the flow's own to its upstream.

type flowKey struct{}

type credKey struct{}

// flowContext is the HTTP servers' ConnContext: a request's context
// carries its connection's flow.
func flowContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if fc, ok := c.(*flowConn); ok {
		return context.WithValue(ctx, flowKey{}, fc.f)
	}
	return ctx
}

func flowOf(ctx context.Context) *flow {
	f, _ := ctx.Value(flowKey{}).(*flow)
	return f
}

// serveRequest checks one request of a flow and sends it on. A plain
// connection's first request decides it (by its Host); a later one must
// ask for the same host. A terminated TLS connection's requests must ask
// for the name its ClientHello did, and get its credential added. Every
// request is checked against the sandbox's rules of the moment.
func (p *Proxy) serveRequest(w http.ResponseWriter, r *http.Request) {
	f := flowOf(r.Context())
	if f == nil {
		http.Error(w, "tether egress: no connection", http.StatusInternalServerError)
		return
	}
	if r.Method == http.MethodConnect {
		f.refuseRequest(w, http.StatusMethodNotAllowed, "CONNECT is not needed: this network is transparent, connect directly")
		return
	}
	host, err := requestHost(r.Host, f.dst.Port())
	if err != nil {
		f.refuseRequest(w, http.StatusBadRequest, err.Error())
		return
	}
	rules, v := f.decide(r.Context(), host)
	if !f.bind(v, host) {
		f.refuseRequest(w, http.StatusMisdirectedRequest, fmt.Sprintf("this connection is to %s, not %s", f.boundName(), host))
		return
	}
	if !v.allowed {
		f.refuseRequest(w, http.StatusForbidden, v.reason)
		return
	}
	ctx := r.Context()
	if f.mitm {
		cred, ok := rules.credential(host)
		if !ok {
			f.refuseRequest(w, http.StatusForbidden, fmt.Sprintf("%s has no credential any more", host))
			return
		}
		if cred.Suspended != "" {
			f.refuseRequest(w, http.StatusForbidden, fmt.Sprintf("the credential for %s is not in force: %s", host, cred.Suspended))
			return
		}
		ctx = context.WithValue(ctx, credKey{}, cred)
	}
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// bind makes v the connection's verdict if it has none yet (its first
// request's), and reports whether host is the connection's.
func (f *flow) bind(v verdict, host string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.decided {
		f.v, f.decided = v, true
		if f.v.name == "" {
			f.v.name = host
		}
		return true
	}
	if f.v.allowed && !v.allowed {
		f.v.reason = v.reason // refused since: the record says why it ended
	}
	return host == f.v.name
}

func (f *flow) boundName() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v.name
}

// refuseRequest answers a request the proxy refuses, and closes the
// connection after it.
func (f *flow) refuseRequest(w http.ResponseWriter, status int, reason string) {
	f.mu.Lock()
	if !f.decided {
		f.v, f.decided = verdict{reason: reason}, true
	} else if f.v.reason == "" {
		f.v.reason = reason
	}
	f.mu.Unlock()
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "tether egress: %s\n", reason)
}

// requestHost is a request's Host as rules match it: lower case, no port
// (which must be the connection's, if given), no brackets, no final dot.
func requestHost(hostport string, port uint16) (string, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		host, p = hostport, ""
	}
	if p != "" && p != strconv.Itoa(int(port)) {
		return "", fmt.Errorf("the request is for port %s, the connection to port %d", p, port)
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return "", errors.New("the request names no host")
	}
	return host, nil
}

// rewrite makes the outgoing request: to the flow's upstream (the
// transport dials it whatever the URL says), with the client's Host, and
// the credential's header if the request has one. No X-Forwarded-*
// header tells the upstream about the proxy or the sandbox.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	f := flowOf(pr.In.Context())
	pr.Out.URL.Scheme = "http"
	if f.mitm {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = pr.In.Host
	pr.Out.Host = pr.In.Host
	if cred, ok := pr.In.Context().Value(credKey{}).(Credential); ok {
		pr.Out.Header.Set(cred.headerName(), cred.value())
	}
}

// upstreamError answers a request whose upstream failed.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if f := flowOf(r.Context()); f != nil {
		f.noteEnd("the upstream failed: %v", err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = fmt.Fprintf(w, "tether egress: the upstream failed: %v\n", err)
}

// flowTransport sends each request over its flow's own transport.
type flowTransport struct{}

func (flowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f := flowOf(r.Context())
	if f == nil {
		return nil, errors.New("no flow")
	}
	return f.transport().RoundTrip(r)
}

// transport is the flow's own: its connections go to the flow's upstream
// only (over TLS verified for the flow's name when the proxy terminated
// the client's), and end with the flow.
func (f *flow) transport() *http.Transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tr == nil {
		up, name := f.v.upstream, f.v.name
		f.tr = &http.Transport{
			Proxy: nil, // never the environment's
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return f.p.dial(ctx, up)
			},
			TLSClientConfig:       &tls.Config{ServerName: name, RootCAs: f.p.cfg.RootCAs, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:     f.mitm,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   dialTimeout,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true,
		}
	}
	return f.tr
}

// chanListener is a listener the proxy feeds with connections it has
// decided to serve as HTTP.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to the server; false if the listener is closed.
func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
