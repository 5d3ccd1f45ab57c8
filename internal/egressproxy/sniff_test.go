package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello is the first flight a Go TLS client sends for serverName.
func clientHello(t *testing.T, serverName string, nextProtos ...string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer func() { _ = s.Close() }()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: serverName, NextProtos: nextProtos, InsecureSkipVerify: serverName == ""}) //nolint:gosec // never completes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tc.HandshakeContext(ctx)
		_ = c.Close()
	}()
	buf := make([]byte, 64<<10)
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := s.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestReadSNI: the server name of real ClientHellos, whole or split
// across records, is read without consuming a byte; no name is "";
// truncated or damaged ones are errors, never a panic.
func TestReadSNI(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pypi.org", "Files.PythonHosted.ORG", ""} {
		hello := clientHello(t, name, "h2", "http/1.1")
		br := bufio.NewReaderSize(bytes.NewReader(hello), peekSize)
		kind, got, err := sniffBytes(br)
		if err != nil || kind != kindTLS || got != strings.ToLower(name) {
			t.Errorf("sniff of a ClientHello for %q = %s, %q, %v", name, kind, got, err)
		}
		if br.Buffered() != len(hello) {
			t.Errorf("sniff consumed bytes: %d buffered of %d", br.Buffered(), len(hello))
		}
		// The same handshake message split over two records.
		body := hello[5:]
		cut := len(body) / 3
		split := append(append([]byte{0x16, 3, 1, byte(cut >> 8), byte(cut)}, body[:cut]...),
			append([]byte{0x16, 3, 1, byte((len(body) - cut) >> 8), byte(len(body) - cut)}, body[cut:]...)...)
		if _, got, err := sniffBytes(bufio.NewReaderSize(bytes.NewReader(split), peekSize)); err != nil || got != strings.ToLower(name) {
			t.Errorf("split ClientHello for %q = %q, %v", name, got, err)
		}
		for i := range 300 {
			damaged := bytes.Clone(hello[:rand.IntN(len(hello))])
			if i%2 == 0 {
				damaged = bytes.Clone(hello)
				damaged[5+rand.IntN(len(hello)-5)] ^= byte(1 + rand.IntN(255))
			}
			_, _, _ = sniffBytes(bufio.NewReaderSize(bytes.NewReader(damaged), peekSize))
		}
	}
	for _, bad := range [][]byte{{0x16, 3, 1, 0, 0}, {0x16, 3, 1, 0xff, 0xff}, {0x16, 3, 1, 0, 4, 2, 0, 0, 0}} {
		if _, _, err := sniffBytes(bufio.NewReaderSize(bytes.NewReader(bad), peekSize)); err == nil {
			t.Errorf("sniff of %x passed", bad)
		}
	}
}

// TestSniffHTTP: an HTTP/1 request line is HTTP; anything else that
// starts with a capital (an SSH banner, a line without a version) is not.
func TestSniffHTTP(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n":                    kindHTTP,
		"POST /x?y=1 HTTP/1.0\r\n\r\n":                                 kindHTTP,
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n":                             kindOther,
		"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n":                           kindOther,
		"GET /\r\n":                                                    kindOther,
		"get / HTTP/1.1\r\n":                                           kindOther,
		"\x00\x00\x00\x08\x04\xd2\x16\x2f":                             kindOther,
		"GET / HTTP/1.1":                                               kindOther, // no end of line yet, then EOF
		"GET " + strings.Repeat("a", maxRequestLine) + " HTTP/1.1\r\n": kindOther,
	} {
		kind, _, err := sniffBytes(bufio.NewReaderSize(strings.NewReader(in), peekSize))
		if err != nil || kind != want {
			t.Errorf("sniff(%.30q) = %s, %v; want %s", in, kind, err, want)
		}
	}
	host, err := peekHost(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nAccept: */*\r\nhOsT:  a.example:8080 \r\n\r\nbody")))
	if err != nil || host != "a.example:8080" {
		t.Errorf("peekHost = %q, %v", host, err)
	}
}
