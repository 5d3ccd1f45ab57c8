package egressproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The proxy's DNS: a sandbox's only resolver. It answers A questions for
// names a rule allows (on any port) with the IPv4 addresses the proxy
// resolved for them and the sandbox may reach; AAAA and other questions
// for them with no records (the sandbox has IPv4 only, so its clients use
// the A answer at once); NXDOMAIN for every other name, and for an
// allowed one that has no address the sandbox may reach (the same answer:
// a tenant cannot map the operator's names by asking). No question for a
// name no rule allows is ever sent on, so DNS carries nothing out.

// dnsTTL is the time to live of the proxy's answers: short, since rules
// change (a connection is decided anew anyway).
const dnsTTL = 30

// Bounds of the DNS responder.
const (
	dnsTimeout       = 10 * time.Second
	maxQueriesPerTCP = 100
)

// serveUDP answers DNS over UDP until the socket closes, each question on
// a goroutine of its own (at most cap(dnsSem) at once; more are dropped,
// and the sandbox's resolver asks again).
func (p *Proxy) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := p.dnsConn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		sb := p.sandboxAt(from.Addr())
		if sb == nil {
			continue
		}
		query := slices.Clone(buf[:n])
		select {
		case p.dnsSem <- struct{}{}:
		default:
			continue
		}
		p.wg.Go(func() {
			defer func() { <-p.dnsSem }()
			if resp := p.answer(sb, query); resp != nil {
				_, _ = p.dnsConn.WriteToUDPAddrPort(resp, from)
			}
		})
	}
}

// acceptDNS serves DNS over TCP until the listener closes.
func (p *Proxy) acceptDNS() {
	for {
		c, err := p.dnsLn.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() {
			defer p.untrack(c)
			defer func() { _ = c.Close() }()
			p.serveDNSConn(c)
		})
	}
}

// serveDNSConn answers the questions of one DNS connection over TCP
// (each prefixed by its length).
func (p *Proxy) serveDNSConn(c *net.TCPConn) {
	sb := p.sandboxAt(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr())
	if sb == nil {
		return
	}
	for range maxQueriesPerTCP {
		_ = c.SetDeadline(time.Now().Add(dnsTimeout))
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp := p.answer(sb, query)
		if resp == nil {
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp)))); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// answer is the response to one DNS message of sb's, nil for none (a
// message that is not a question).
func (p *Proxy) answer(sb *sandboxState, query []byte) []byte {
	var parser dnsmessage.Parser
	h, err := parser.Start(query)
	if err != nil || h.Response {
		return nil
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	q, err := parser.Question()
	switch {
	case err != nil:
		resp.RCode = dnsmessage.RCodeFormatError
		return build(resp, nil, nil)
	case h.OpCode != 0:
		resp.RCode = dnsmessage.RCodeNotImplemented
		return build(resp, &q, nil)
	case q.Class != dnsmessage.ClassINET:
		resp.RCode = dnsmessage.RCodeRefused
		return build(resp, &q, nil)
	}
	start := time.Now()
	name := normalName(q.Name.String())
	rcode, addrs, rec := p.resolveQuestion(sb, name)
	rec.SandboxID, rec.Proto, rec.Host, rec.Start, rec.End = sb.ID, ProtoDNS, name, start, time.Now()
	if rec.Host == "" {
		rec.Host = q.Name.String()
	}
	p.record(rec)
	resp.RCode = rcode
	if q.Type != dnsmessage.TypeA {
		addrs = nil
	}
	return build(resp, &q, addrs)
}

// resolveQuestion decides a question for name: its answer code, the
// addresses to answer with, and a record of it.
func (p *Proxy) resolveQuestion(sb *sandboxState, name string) (dnsmessage.RCode, []netip.Addr, ConnRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	rules, ok := p.cfg.Policy.Lookup(ctx, sb.ID)
	switch {
	case !ok:
		return dnsmessage.RCodeRefused, nil, ConnRecord{Reason: "the sandbox has no rules"}
	case name == "" || !rules.namesAnyPort(name):
		return dnsmessage.RCodeNameError, nil, ConnRecord{Reason: "the name is not allowed"}
	}
	addrs, err := p.res.resolve(ctx, name)
	if err != nil && !isNotFound(err) {
		return dnsmessage.RCodeServerFailure, nil, ConnRecord{Reason: "the lookup failed"}
	}
	var v4 []netip.Addr
	reachable := false
	for _, a := range addrs {
		if p.reachable(a, rules) {
			reachable = true
			if a.Is4() {
				v4 = append(v4, a)
			}
		}
	}
	if !reachable {
		return dnsmessage.RCodeNameError, nil, ConnRecord{Reason: name + " has no address the sandbox may reach"}
	}
	sb.remember(name, v4)
	return dnsmessage.RCodeSuccess, v4, ConnRecord{Allowed: true}
}

// build writes a DNS response: the question, if any, and A records of
// addrs.
func build(h dnsmessage.Header, q *dnsmessage.Question, addrs []netip.Addr) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q == nil {
		msg, _ := b.Finish()
		return msg
	}
	_ = b.StartQuestions()
	_ = b.Question(*q)
	_ = b.StartAnswers()
	for _, a := range addrs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}
