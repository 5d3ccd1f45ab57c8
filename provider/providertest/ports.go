package providertest

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// The PortDialer's contract: a dial reaches the server a sandbox runs on
// its own loopback, never the host's; a port nothing listens on is
// CodePortUnreachable, a sandbox the provider does not hold (or no longer
// holds) CodeProviderUnavailable.

// PortServer is how the suite gets a server to dial in a sandbox.
type PortServer struct {
	// Params are the create params of a sandbox that can run the
	// server (the sim's {"ports":[8000]}).
	Params string
	// Port is the port the server listens on, inside the sandbox.
	Port int
	// Serve, if set, starts the server in the sandbox (a process of its
	// own), in the background: the suite dials until it answers.
	Serve func(t *testing.T, p provider.Provider, res provider.Resource)
}

func (s *suite) testPorts(t *testing.T) {
	skipWithout[provider.PortDialer](t, s, "PortDialer")
	if s.h.Ports == nil {
		t.Fatal("the provider dials ports: Harness.Ports must say how a sandbox serves one")
	}
	t.Parallel()
	t.Run("ServerAnswers", s.testPortAnswers)
	t.Run("NotTheHosts", s.testPortNotHosts)
	t.Run("UnknownSandbox", s.testPortUnknown)
}

// portSandbox makes a sandbox that serves Harness.Ports.Port.
func (s *suite) portSandbox(t *testing.T) (provider.Provider, provider.PortDialer, provider.Resource) {
	t.Helper()
	p, _ := s.open(t)
	pd := capability[provider.PortDialer](t, p, "PortDialer")
	res := s.create(t, p, provider.CreateSpec{Params: json.RawMessage(s.h.Ports.Params)})
	if s.h.Ports.Serve != nil {
		s.h.Ports.Serve(t, p, res)
	}
	return p, pd, res
}

// get dials the port and asks GET / over the connection, retrying while
// the server is not up yet, and returns the status.
func (s *suite) get(t *testing.T, pd provider.PortDialer, id string, port int) int {
	t.Helper()
	deadline := time.Now().Add(s.h.Timeout)
	conn, err := pd.DialPort(s.ctx(t), id, port)
	for provider.ErrorCode(err) == provider.CodePortUnreachable && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		conn, err = pd.DialPort(s.ctx(t), id, port)
	}
	if err != nil {
		t.Fatalf("DialPort(%s, %d): %v", id, port, err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(s.h.Timeout))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatalf("writing a request over the dialed connection: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer over the dialed connection: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *suite) testPortAnswers(t *testing.T) {
	t.Parallel()
	p, pd, res := s.portSandbox(t)
	if code := s.get(t, pd, res.SandboxID, s.h.Ports.Port); code <= 0 {
		t.Errorf("GET / over the dialed port: status %d", code)
	}
	s.destroy(t, p, res.SandboxID)
	_, err := pd.DialPort(s.ctx(t), res.SandboxID, s.h.Ports.Port)
	wantCode(t, "DialPort of a destroyed sandbox", err, provider.CodeProviderUnavailable)
}

// testPortNotHosts: a port the host listens on (on its loopback) is not
// the sandbox's.
func (s *suite) testPortNotHosts(t *testing.T) {
	t.Parallel()
	_, pd, res := s.portSandbox(t)
	var lc net.ListenConfig
	ln, err := lc.Listen(s.ctx(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := pd.DialPort(s.ctx(t), res.SandboxID, port)
	if err == nil {
		_ = conn.Close()
	}
	wantCode(t, "DialPort of a port only the host listens on", err, provider.CodePortUnreachable)
}

func (s *suite) testPortUnknown(t *testing.T) {
	t.Parallel()
	_, pd, _ := s.portSandbox(t)
	_, err := pd.DialPort(s.ctx(t), provider.NewSandboxID(), s.h.Ports.Port)
	wantCode(t, "DialPort of a sandbox the provider does not hold", err, provider.CodeProviderUnavailable)
}
