package framing

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// pipeConn is the server's end of a connection whose client sent in, in
// reads of at most step bytes.
type pipeConn struct {
	net.Conn // nil: only Read is used
	r        *bytes.Reader
	step     int
}

func (c *pipeConn) Read(b []byte) (int, error) {
	return c.r.Read(b[:min(len(b), c.step)])
}

// TestFraming: the Conn follows the framing of pipelined requests as Go's
// server reads them, refuses the request with both Transfer-Encoding and
// Content-Length and delivers nothing after its header, and says Unsure
// once it cannot follow; in whole reads and a byte at a time.
func TestFraming(t *testing.T) {
	t.Parallel()
	const get = "GET /next HTTP/1.1\r\nHost: t\r\n\r\n"
	long := "/" + strings.Repeat("a", 300)
	for _, tc := range []struct {
		name, in string
		want     []Verdict // the verdicts of the requests, in order
		cutAfter string    // the input must end right after this ("": never)
	}{
		{"pipelined", get + get + get, []Verdict{Clear, Clear, Clear}, ""},
		{"a Content-Length body", "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + get, []Verdict{Clear, Clear}, ""},
		{"a body that looks like requests",
			"POST / HTTP/1.1\r\nContent-Length: 66\r\n\r\nGET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + get,
			[]Verdict{Clear, Clear}, ""},
		{"a chunked body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get, []Verdict{Clear, Clear}, ""},
		{"chunks with extensions and a trailer",
			"PUT / HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nDigest: x\r\n\r\n" + get,
			[]Verdict{Clear, Clear}, ""},
		{"a long target", "GET " + long + " HTTP/1.1\r\n\r\n" + get, []Verdict{Clear, Clear}, ""},
		{"a long HTTP/1.0 target with Transfer-Encoding (ignored)",
			"GET " + long + " HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" + get, []Verdict{Clear, Clear}, ""},
		{"both", "POST / HTTP/1.1\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n", []Verdict{Ambiguous}, "chunked\r\n\r\n"},
		{"both, smuggling", "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 37\r\n\r\n0\r\n\r\n" + get,
			[]Verdict{Ambiguous}, "Content-Length: 37\r\n\r\n"},
		{"both, after a clear one", get + "POST / HTTP/1.0\r\ncontent-length: 0\r\nTRANSFER-ENCODING: gzip\r\n\r\n" + get,
			[]Verdict{Clear, Ambiguous}, "gzip\r\n\r\n"},
		{"both, after OPTIONS *", "OPTIONS * HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get,
			[]Verdict{Ambiguous}, "chunked\r\n\r\n"},
		{"an upgrade", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello" + get, []Verdict{Clear, Unsure}, ""},
		{"a chunk line with a bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n" + get,
			[]Verdict{Unsure, Unsure}, ""},
		{"a folded Content-Length", "POST / HTTP/1.1\r\nContent-Length:\r\n 5\r\n\r\nhello" + get, []Verdict{Unsure, Unsure}, ""},
		{"two Content-Lengths that differ", "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!" + get,
			[]Verdict{Unsure, Unsure}, ""},
	} {
		for _, step := range []int{len(tc.in), 7, 1} {
			c := Wrap(&pipeConn{r: bytes.NewReader([]byte(tc.in)), step: step})
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			want := tc.in
			if tc.cutAfter != "" {
				want = tc.in[:strings.Index(tc.in, tc.cutAfter)+len(tc.cutAfter)]
			}
			if string(got) != want {
				t.Errorf("%s, reads of %d: the server read %q; want %q", tc.name, step, got, want)
			}
			for i, v := range tc.want {
				if g := c.Next(); g != v {
					t.Errorf("%s, reads of %d: request %d is %v; want %v", tc.name, step, i+1, g, v)
				}
			}
		}
	}
}
