package egressproxy

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
)

// What a connection's first bytes are.
const (
	kindTLS    = "tls"    // a TLS ClientHello
	kindHTTP   = "http"   // an HTTP/1 request line
	kindOther  = "other"  // something else
	kindSilent = "silent" // nothing yet: the server may speak first
)

// Bounds of what the proxy reads before it decides.
const (
	peekSize       = 32 << 10 // two TLS records of the largest size
	maxRequestLine = 8 << 10
	maxRecord      = 16384 + 2048
)

var errNotHello = errors.New("not a TLS ClientHello the proxy can read")

// sniffBytes tells what the client's first bytes, buffered in br (at
// least one), are, and the host name they ask for: a ClientHello's server
// name (the empty name when it has none). It consumes nothing. A
// connection that starts like TLS but is not a ClientHello the proxy can
// read is an error: what it asks for could not be checked.
func sniffBytes(br *bufio.Reader) (kind, name string, err error) {
	first, err := br.Peek(1)
	if err != nil {
		return "", "", err
	}
	switch {
	case first[0] == 0x16:
		name, err := readSNI(br)
		return kindTLS, name, err
	case first[0] >= 'A' && first[0] <= 'Z':
		if line, err := peekLine(br, maxRequestLine); err == nil && looksHTTP(line) {
			return kindHTTP, "", nil
		}
	}
	return kindOther, "", nil
}

// peekLine returns the first line buffered in br (without its "\n"),
// reading more as needed, up to max bytes.
func peekLine(br *bufio.Reader, limit int) ([]byte, error) {
	for n := 1; ; {
		buf, err := br.Peek(max(n, br.Buffered()))
		if i := bytes.IndexByte(buf[:min(len(buf), limit)], '\n'); i >= 0 {
			return buf[:i], nil
		}
		if err != nil {
			return nil, err
		}
		if n = len(buf) + 1; n > limit {
			return nil, errors.New("line too long")
		}
	}
}

// looksHTTP reports whether line is an HTTP/1 request line: a method in
// capitals, a target, and the version.
func looksHTTP(line []byte) bool {
	parts := strings.Split(strings.TrimSuffix(string(line), "\r"), " ")
	if len(parts) != 3 || parts[1] == "" || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") || len(parts[0]) > 20 {
		return false
	}
	return strings.Trim(parts[0], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" && parts[0] != ""
}

// peekHost returns the Host of the HTTP request buffered in br, reading
// its header (up to maxHeaderBytes); "" if it has none.
func peekHost(br *bufio.Reader) (string, error) {
	for n := 1; ; {
		buf, err := br.Peek(max(n, br.Buffered()))
		if end := bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			for line := range strings.SplitSeq(string(buf[:end]), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "host") {
					return strings.TrimSpace(v), nil
				}
			}
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if n = len(buf) + 1; n > min(maxHeaderBytes, peekSize) {
			return "", errors.New("header too large")
		}
	}
}

// readSNI reads (without consuming) the TLS ClientHello buffered in br,
// across records if it spans more than one, and returns its server name
// (lower case, no final dot), "" if it has none.
func readSNI(br *bufio.Reader) (string, error) {
	var hello []byte
	off, msgLen := 0, -1
	for msgLen < 0 || len(hello) < 4+msgLen {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return "", err
		}
		rec := hdr[off:]
		n := int(rec[3])<<8 | int(rec[4])
		if rec[0] != 0x16 || n == 0 || n > maxRecord {
			return "", errNotHello
		}
		body, err := br.Peek(off + 5 + n)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return "", errNotHello
			}
			return "", err
		}
		hello = append(hello, body[off+5:]...)
		off += 5 + n
		if msgLen < 0 && len(hello) >= 4 {
			if hello[0] != 1 {
				return "", errNotHello
			}
			msgLen = int(hello[1])<<16 | int(hello[2])<<8 | int(hello[3])
		}
	}
	name, ok := helloServerName(hello[4 : 4+msgLen])
	if !ok {
		return "", errNotHello
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), nil
}

// helloServerName parses a ClientHello's body for its server_name
// extension's host name; false if the body is malformed.
func helloServerName(b []byte) (string, bool) {
	r := reader(b)
	if !r.skip(2+32) || !r.skipVec(1) || !r.skipVec(2) || !r.skipVec(1) {
		return "", false
	}
	if len(r) == 0 {
		return "", true // no extensions
	}
	exts, ok := r.vec(2)
	if !ok {
		return "", false
	}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return "", false
		}
		if typ != 0 { // server_name
			continue
		}
		list, ok := data.vec(2)
		for ok && len(list) > 0 {
			var nameType []byte
			nameType, ok = list.take(1)
			host, ok2 := list.vec(2)
			if !ok || !ok2 {
				return "", false
			}
			if nameType[0] == 0 {
				return string(host), true
			}
		}
		return "", ok
	}
	return "", true
}

// reader reads a TLS message's fields.
type reader []byte

func (r *reader) take(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b, true
}

func (r *reader) skip(n int) bool {
	_, ok := r.take(n)
	return ok
}

func (r *reader) u16() (int, bool) {
	b, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return int(b[0])<<8 | int(b[1]), true
}

// vec takes a vector whose length is in its first lenBytes bytes.
func (r *reader) vec(lenBytes int) (reader, bool) {
	lb, ok := r.take(lenBytes)
	if !ok {
		return nil, false
	}
	n := 0
	for _, x := range lb {
		n = n<<8 | int(x)
	}
	b, ok := r.take(n)
	return reader(b), ok
}

func (r *reader) skipVec(lenBytes int) bool {
	_, ok := r.vec(lenBytes)
	return ok
}
