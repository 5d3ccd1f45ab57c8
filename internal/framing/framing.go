// Package framing watches the requests of an HTTP/1.x connection for the
// framing two parsers read two ways: a request with both Transfer-Encoding
// and Content-Length. Go's server (1.26) serves such a request by its
// Transfer-Encoding, drops the Content-Length and keeps the connection, so
// what follows the chunked body is served as the next request; a proxy in
// front that trusted the Content-Length took those bytes for the body of
// the first. That is request smuggling, and RFC 9112 (section 6.1) lets a
// server refuse such a request and makes it close the connection.
//
// A Conn reads the connection's bytes as the server reads them, follows
// each request's framing (its header, then its body by Content-Length or
// by chunks) and, at the end of a header that has both, ends the
// connection's input: nothing after it is ever read, and Next tells the
// server's handler to refuse that request. Where it cannot follow (an
// upgrade, which turns the connection into something else, or bytes it
// cannot read as Go's server would), it stops and Next says Unsure: the
// server then closes the connection after each answer.
package framing

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
)

// Verdict is what a Conn knows of a request's framing.
type Verdict int

// The verdicts.
const (
	// Clear: the request is framed one way only.
	Clear Verdict = iota
	// Ambiguous: the request has both Transfer-Encoding and
	// Content-Length; refuse it (400) and close. Nothing after its header
	// is read.
	Ambiguous
	// Unsure: the Conn lost track of the connection's framing; serve the
	// request and close the connection after it.
	Unsure
)

// Conn is a server's connection whose requests' framing is watched.
type Conn struct {
	net.Conn

	mu     sync.Mutex
	p      parser
	served int  // requests the server has asked about (Next)
	cut    bool // the input ended after an ambiguous header
}

// Wrap watches c.
func Wrap(c net.Conn) *Conn { return &Conn{Conn: c, p: parser{line: make([]byte, 0, lineKeep)}} }

// Listener wraps every connection ln accepts.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Read reads from the connection, up to the end of an ambiguous request's
// header and no further: after it, the connection reads as ended.
func (c *Conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	cut := c.cut
	c.mu.Unlock()
	if cut {
		return 0, io.EOF
	}
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if keep, cut := c.p.feed(b[:n]); cut {
		c.cut = true
		return keep, nil
	}
	return n, err
}

// CloseWrite half-closes the connection, as the server does before it
// lingers on a connection it answered without reading the whole request.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Next is the verdict on the next request the server hands its handler
// on this connection: the server calls it once per request, in order.
func (c *Conn) Next() Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served++
	switch {
	case c.p.ambiguous == c.served:
		return Ambiguous
	case c.p.lostAt != 0 && c.served >= c.p.lostAt:
		return Unsure
	}
	return Clear
}

// lineKeep is how much of a line's start the parser keeps: enough for
// the names and values it reads (methods, the framing headers' values);
// tailKeep how much of its end (a long request line's version).
const (
	lineKeep = 128
	tailKeep = 16
)

// maxChunkLine is the longest chunk-size line Go's server reads.
const maxChunkLine = 4096

// The parser's states.
const (
	stRequestLine = iota // the request line
	stHeader             // header lines
	stBody               // remaining bytes of a Content-Length body
	stChunkSize          // a chunk-size line
	stChunkData          // remaining bytes of a chunk
	stChunkEnd           // the CRLF after a chunk's data
	stTrailer            // trailer lines
	stOff                // lost, or upgraded: bytes pass unread
)

// parser follows the framing of the requests of one connection, as Go's
// server frames them.
type parser struct {
	state     int
	line      []byte // the current line's first lineKeep bytes
	tail      []byte // and its last tailKeep bytes
	lineLen   int    // the current line's length so far
	remaining uint64 // bytes left of a body or a chunk
	req       request
	// requests counts the requests whose header ended that the server
	// hands its handler (all but OPTIONS *).
	requests int
	// ambiguous is the number of the ambiguous request (0: none); lostAt
	// that of the first request the parser cannot vouch for (0: none).
	ambiguous, lostAt int
}

// request is what the parser knows of the request whose header it reads.
type request struct {
	counted                 bool // the server hands it to its handler
	http10                  bool
	upgrade                 bool
	cl, te                  int // how many of each header
	teValue                 string
	lastFraming, contLoss   bool // the previous header was CL or TE; a continuation of one
	malformed               bool
	contentLength           uint64
	contentLengthMismatched bool
}

// feed reads p and returns how many of its bytes the server may read: all
// of them, or (cut) those up to the end of an ambiguous request's header,
// after which it may read nothing more.
func (ps *parser) feed(p []byte) (int, bool) {
	for i := 0; i < len(p); {
		switch ps.state {
		case stOff:
			return len(p), false
		case stBody, stChunkData:
			n := uint64(len(p) - i)
			if n > ps.remaining {
				n = ps.remaining
			}
			ps.remaining -= n
			i += int(n)
			if ps.remaining == 0 {
				if ps.state == stBody {
					ps.state = stRequestLine
				} else {
					ps.state, ps.lineLen, ps.line = stChunkEnd, 0, ps.line[:0]
				}
			}
			continue
		}
		j := bytes.IndexByte(p[i:], '\n')
		end := len(p)
		if j >= 0 {
			end = i + j + 1
		}
		ps.addToLine(p[i:end])
		i = end
		if j < 0 {
			if ps.state == stChunkEnd && ps.lineLen > 2 || ps.state == stChunkSize && ps.lineLen > maxChunkLine {
				ps.lose()
			}
			continue
		}
		if cut := ps.endLine(); cut {
			return i, true
		}
	}
	return len(p), false
}

func (ps *parser) addToLine(b []byte) {
	ps.lineLen += len(b)
	if room := lineKeep - len(ps.line); room > 0 {
		ps.line = append(ps.line, b[:min(room, len(b))]...)
	}
	ps.tail = append(ps.tail, b[max(0, len(b)-tailKeep):]...)
	if len(ps.tail) > tailKeep {
		ps.tail = append(ps.tail[:0], ps.tail[len(ps.tail)-tailKeep:]...)
	}
}

// endLine reads a whole line (ending in "\n"); true if the input must end
// after it.
func (ps *parser) endLine() bool {
	line, tail, long := ps.line, ps.tail, ps.lineLen > lineKeep
	ps.line, ps.tail, ps.lineLen = ps.line[:0], ps.tail[:0], 0
	switch ps.state {
	case stRequestLine:
		ps.requestLine(line, tail, long)
	case stHeader:
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return ps.headerEnd()
		}
		ps.headerLine(line, long)
	case stChunkSize:
		ps.chunkSize(line, long)
	case stChunkEnd:
		if string(line) != "\r\n" {
			ps.lose()
			break
		}
		ps.state = stChunkSize
	case stTrailer:
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			ps.state = stRequestLine
		}
	}
	return false
}

// requestLine starts a request, reading its line as Go's server does:
// METHOD, one space, the target, one space, the version.
func (ps *parser) requestLine(line, tail []byte, long bool) {
	ps.req = request{counted: true}
	ps.state = stHeader
	text := strings.TrimRight(string(line), "\r\n")
	method, rest, ok1 := strings.Cut(text, " ")
	target, version, ok2 := strings.Cut(rest, " ")
	if long {
		// Only the line's start and end were kept: the version is the end.
		v := strings.TrimRight(string(tail), "\r\n")
		sp := strings.LastIndexByte(v, ' ')
		version, ok2 = v[sp+1:], sp >= 0
	}
	switch {
	case !ok1 || !ok2 || len(version) != len("HTTP/1.1") || !strings.HasPrefix(version, "HTTP/1.") ||
		version[7] < '0' || version[7] > '9':
		ps.req.malformed = true // the server refuses it, and closes
	case version == "HTTP/1.0":
		ps.req.http10 = true
	}
	if method == "OPTIONS" && target == "*" {
		ps.req.counted = false // Go's server answers it itself
	}
	if method == "CONNECT" {
		ps.req.upgrade = true
	}
}

// headerLine reads one header line.
func (ps *parser) headerLine(line []byte, long bool) {
	r := &ps.req
	if line[0] == ' ' || line[0] == '\t' {
		// A continuation: of a framing header, it changes what the
		// server reads as its value.
		if r.lastFraming {
			r.contLoss = true
		}
		return
	}
	name, value, ok := strings.Cut(strings.TrimRight(string(line), "\r\n"), ":")
	r.lastFraming = false
	if !ok {
		return // the server refuses it, and closes
	}
	value = strings.Trim(value, " \t")
	switch strings.ToLower(name) {
	case "content-length":
		r.cl++
		r.lastFraming = true
		n, err := strconv.ParseUint(value, 10, 63)
		switch {
		case long || err != nil || value == "" || strings.TrimLeft(value, "0123456789") != "":
			r.malformed = true
		case r.cl > 1 && n != r.contentLength:
			r.contentLengthMismatched = true
		}
		r.contentLength = n
	case "transfer-encoding":
		r.te++
		r.lastFraming = true
		r.teValue = value
		if long {
			r.malformed = true
		}
	case "upgrade":
		r.upgrade = true
	}
}

// headerEnd ends a request's header and sets how its body is read; true
// if the request is ambiguous and the input must end here.
func (ps *parser) headerEnd() bool {
	r := ps.req
	// cur is the number Next gives this request (or, for one the server
	// answers itself, the next request).
	cur := ps.requests + 1
	if r.counted {
		ps.requests++
	}
	switch {
	case r.cl > 0 && r.te > 0:
		if r.counted {
			ps.ambiguous = cur
		}
		ps.state = stOff
		return true
	case r.malformed || r.contLoss || r.contentLengthMismatched:
		ps.loseFrom(cur)
	case r.upgrade:
		// What follows may no longer be HTTP.
		ps.loseFrom(cur + 1)
	case r.te > 0 && !r.http10:
		if r.te != 1 || !strings.EqualFold(r.teValue, "chunked") {
			ps.loseFrom(cur) // the server refuses it, and closes
			return false
		}
		ps.state = stChunkSize
	case r.cl > 0 && r.contentLength > 0:
		ps.state, ps.remaining = stBody, r.contentLength
	default:
		ps.state = stRequestLine
	}
	return false
}

// chunkSize reads a chunk-size line as Go's chunked reader does: CRLF at
// its end and no CR before, an extension after ";" ignored, hex digits.
func (ps *parser) chunkSize(line []byte, long bool) {
	text := string(line)
	if long || !strings.HasSuffix(text, "\r\n") || strings.Count(text, "\r") != 1 {
		ps.lose()
		return
	}
	text = strings.TrimRight(strings.TrimSuffix(text, "\r\n"), " \t")
	text, _, _ = strings.Cut(text, ";") // no space before it, as for Go
	n, err := strconv.ParseUint(text, 16, 64)
	if err != nil || text == "" || len(text) > 16 || strings.ContainsAny(text, "+-xX_") {
		ps.lose()
		return
	}
	if n == 0 {
		ps.state = stTrailer
		return
	}
	ps.state, ps.remaining = stChunkData, n
}

// lose stops the parser within the request it reads: that request and the
// ones after it are Unsure.
func (ps *parser) lose() { ps.loseFrom(ps.requests) }

// loseFrom stops the parser: request n and the ones after it are Unsure.
func (ps *parser) loseFrom(n int) {
	if ps.lostAt == 0 || n < ps.lostAt {
		ps.lostAt = max(n, 1)
	}
	ps.state = stOff
}
