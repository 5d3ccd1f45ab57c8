package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/internal/host/hostos"
	"github.com/tetherhq/tether/provider"
)

// portsNote says, in GET /v1/providers, where a sandbox's ports are
// reached.
const portsNote = "ports: /v1/sandboxes/{id}/ports/{port}/ and preview URLs reach 127.0.0.1:{port} in the sandbox's own network namespace (the host's only with params.network \"host\")"

// DialPort implements provider.PortDialer: it connects to 127.0.0.1:port
// in the network namespace of the sandbox's init, whatever the sandbox's
// network mode: its own loopback-only namespace by default, the one made
// for it with an allow list, and the host's only when the operator let
// the sandbox share it (params.network "host").
//
// The socket is made on an OS thread of its own that joined that
// namespace (hostos.OnOwnThread), which ends with the dial: the thread,
// whose namespace is the sandbox's, never runs anything else of Tether's.
// A socket keeps the namespace it was made in, so the connection lives in
// the sandbox's network after the thread is gone.
func (p *Provider) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, provider.Errorf(provider.CodeInvalidRequest, "port must be 1-65535 (got %d)", port)
	}
	m, err := p.running(sandboxID)
	if err != nil {
		return nil, err
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(m.InitPID) + "/ns/net")
	if err != nil {
		return nil, provider.Errorf(provider.CodeProviderUnavailable,
			"sandbox %s no longer runs on this host; the janitor will mark it lost", sandboxID)
	}
	defer func() { _ = ns.Close() }()
	// The namespace opened is the init's, not that of a later process that
	// took its pid, if the init still runs now that it is open.
	if !m.alive() {
		return nil, provider.Errorf(provider.CodeProviderUnavailable,
			"sandbox %s no longer runs on this host; the janitor will mark it lost", sandboxID)
	}
	var conn net.Conn
	err = hostos.OnOwnThread(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("local: dial port: entering the sandbox's network namespace: %w", err)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		conn = c
		return err
	})
	if err != nil {
		return nil, dialError(ctx, sandboxID, port, err)
	}
	return conn, nil
}

// dialError is a failed dial as the provider contract has it: nothing
// listening is CodePortUnreachable; a caller that gave up is its
// context's error.
func dialError(ctx context.Context, id string, port int, err error) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return provider.Errorf(provider.CodePortUnreachable, "nothing listens on port %d in sandbox %s (connection refused)", port, id)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return provider.Errorf(provider.CodePortUnreachable, "port %d in sandbox %s did not accept the connection in time", port, id)
	case ctx.Err() != nil:
		return fmt.Errorf("local: dial port %d of %s: %w", port, id, ctx.Err())
	}
	return fmt.Errorf("local: dial port %d of %s: %w", port, id, err)
}
