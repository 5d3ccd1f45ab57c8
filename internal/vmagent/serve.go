//go:build linux

package vmagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/vmwire"
)

// PortName is the virtio-serial port the agent serves.
const PortName = "tether"

// Serve serves the port for as long as the guest runs: one connection of
// Tether's after another, each a yamux session.
func Serve() error {
	path, err := waitPort()
	if err != nil {
		return err
	}
	for {
		if err := serveConn(path); err != nil {
			fmt.Fprintf(os.Stderr, "vmagent: %v\n", err)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func waitPort() (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		path, err := port(PortName)
		if err == nil {
			return path, nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serveConn serves one connection: the handshake, then streams until the
// session breaks (Tether went away, or a newer connection's hello came).
func serveConn(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening the port: %w", err)
	}
	defer func() { _ = f.Close() }()
	br, err := vmwire.Greet(hangupRetry{f})
	if err != nil {
		return err
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	session, err := yamux.Server(vmwire.Conn{Reader: br, Writer: f, Closer: f}, cfg)
	if err != nil {
		return fmt.Errorf("starting the session: %w", err)
	}
	defer func() { _ = session.Close() }()
	for {
		stream, err := session.AcceptStream()
		if err != nil {
			return nil //nolint:nilerr // the session ended: wait for the next hello
		}
		go serveStream(stream)
	}
}

// hangupRetry reads the port while no host is connected: a read then
// ends at once with nothing, and waiting a little before the next keeps
// the handshake's loop from spinning.
type hangupRetry struct{ f *os.File }

func (h hangupRetry) Read(p []byte) (int, error) {
	for {
		n, err := h.f.Read(p)
		if n > 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return n, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h hangupRetry) Write(p []byte) (int, error) { return h.f.Write(p) }

// serveStream serves one operation.
func serveStream(stream net.Conn) {
	defer func() { _ = stream.Close() }()
	w := vmwire.NewWriter(stream)
	var req vmwire.Request
	kind, payload, err := vmwire.ReadFrame(stream)
	if err != nil {
		return
	}
	if kind != vmwire.KindRequest || json.Unmarshal(payload, &req) != nil {
		_ = w.Fail(vmwire.FailBadRequest, "the first frame is not a request")
		return
	}
	switch req.Op {
	case vmwire.OpPing:
		_ = w.Frame(vmwire.KindOK, nil)
	case vmwire.OpSync:
		unix.Sync()
		_ = w.Frame(vmwire.KindOK, nil)
	case vmwire.OpIdentity:
		if err := takeIdentity(req); err != nil {
			_ = w.Fail(vmwire.FailInternal, "%v", err)
			return
		}
		_ = w.Frame(vmwire.KindOK, nil)
	case vmwire.OpExec:
		runExec(stream, w, req)
	case vmwire.OpReadFile:
		readFile(w, req)
	case vmwire.OpWriteFile:
		writeFile(stream, w, req)
	case vmwire.OpReadTar:
		readTar(w, req)
	case vmwire.OpWriteTar:
		writeTar(stream, w, req)
	case vmwire.OpDial:
		dial(stream, w, req)
	default:
		_ = w.Fail(vmwire.FailBadRequest, "unknown operation %q", req.Op)
	}
}

// dial connects the stream to a port on the guest's loopback.
func dial(stream net.Conn, w *vmwire.Writer, req vmwire.Request) {
	if req.Port < 1 || req.Port > 65535 {
		_ = w.Fail(vmwire.FailBadRequest, "port %d", req.Port)
		return
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	conn, err := d.DialContext(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", req.Port))
	if err != nil {
		_ = w.Fail(vmwire.FailRefused, "nothing answers on port %d", req.Port)
		return
	}
	defer func() { _ = conn.Close() }()
	if w.Frame(vmwire.KindOK, nil) != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(stream, conn)
	_ = stream.Close()
	<-done
}
