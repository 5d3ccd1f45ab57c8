package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// wire is the load generator's HTTP/1.1 client: keep-alive connections, one
// write per request and a plain parse of the response, the way wrk and
// pgbench drive their servers. Go's net/http client costs several times
// more CPU per request, and on a two-core machine every core-second the
// load generator spends is one Tether and Postgres do not get; the
// baselines' pgbench pays no such tax.
type wire struct {
	addr   string
	header []byte // Host and Authorization lines, ready to send
	idle   chan *wireConn
}

type wireConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte // the request being written, reused
}

func newWire(addr, key string, conns int) *wire {
	return &wire{
		addr:   addr,
		header: []byte("Host: " + addr + "\r\nAuthorization: Bearer " + key + "\r\n"),
		idle:   make(chan *wireConn, conns),
	}
}

// do sends one request and reads its response; body is handed to read
// (when not nil) before the connection goes back to the pool.
func (w *wire) do(ctx context.Context, method, path string, body []byte, read func(status int, body []byte) error) error {
	c, err := w.conn(ctx)
	if err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	_ = c.c.SetDeadline(deadline)
	keep, err := c.roundTrip(method, path, w.header, body, read)
	if err != nil || !keep {
		_ = c.c.Close()
		return err
	}
	select {
	case w.idle <- c:
	default:
		_ = c.c.Close()
	}
	return nil
}

func (w *wire) conn(ctx context.Context) (*wireConn, error) {
	select {
	case c := <-w.idle:
		return c, nil
	default:
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", w.addr)
	if err != nil {
		return nil, err
	}
	return &wireConn{c: c, r: bufio.NewReaderSize(c, 32<<10)}, nil
}

// close closes the idle connections.
func (w *wire) close() {
	for {
		select {
		case c := <-w.idle:
			_ = c.c.Close()
		default:
			return
		}
	}
}

var errMalformed = errors.New("malformed HTTP response")

// roundTrip writes the request and reads the response. keep says whether
// the connection may carry another request.
func (c *wireConn) roundTrip(method, path string, header, body []byte, read func(int, []byte) error) (keep bool, err error) {
	if err := c.writeRequest(method, path, header, body); err != nil {
		return false, err
	}
	status, err := c.readStatus()
	if err != nil {
		return false, err
	}
	h, err := c.readHeader()
	if err != nil {
		return false, err
	}
	payload, err := c.readBody(&h)
	if err != nil {
		return false, err
	}
	if read != nil {
		if err := read(status, payload); err != nil {
			return h.keep, err
		}
	}
	return h.keep, nil
}

// writeRequest writes the request in one write, its buffer reused.
func (c *wireConn) writeRequest(method, path string, header, body []byte) error {
	b := c.buf[:0]
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\n"...)
	b = append(b, header...)
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	c.buf = b
	_, err := c.c.Write(b)
	return err
}

// readStatus reads the status line and returns its code.
func (c *wireConn) readStatus() (int, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, errMalformed
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, errMalformed
	}
	return status, nil
}

// wireHeader is what the client reads of a response's header: how its
// body is framed (length -1 when not given) and whether the connection
// stays open.
type wireHeader struct {
	length  int
	chunked bool
	keep    bool
}

// readHeader reads the header lines up to the empty line.
func (c *wireConn) readHeader() (wireHeader, error) {
	h := wireHeader{length: -1, keep: true}
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, errMalformed
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if h.length, err = strconv.Atoi(string(value)); err != nil || h.length < 0 {
				return h, errMalformed
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			h.keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
}

// readBody reads the body framed as h says; a body that runs to the end
// of the connection clears h.keep.
func (c *wireConn) readBody(h *wireHeader) ([]byte, error) {
	switch {
	case h.chunked:
		return c.readChunked()
	case h.length >= 0:
		payload := make([]byte, h.length)
		_, err := io.ReadFull(c.r, payload)
		return payload, err
	default: // the body runs to the end of the connection
		h.keep = false
		return io.ReadAll(c.r)
	}
}

func (c *wireConn) readChunked() ([]byte, error) {
	var out []byte
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseInt(string(sizeText), 16, 32)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("%w: chunk size %q", errMalformed, sizeText)
		}
		if size == 0 {
			// Trailers, if any, end with an empty line.
			for {
				line, err := c.r.ReadSlice('\n')
				if err != nil {
					return nil, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return out, nil
				}
			}
		}
		start := len(out)
		out = append(out, make([]byte, size)...)
		if _, err := io.ReadFull(c.r, out[start:]); err != nil {
			return nil, err
		}
		if _, err := c.r.Discard(2); err != nil { // the chunk's CRLF
			return nil, err
		}
	}
}
