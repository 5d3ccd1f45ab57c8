package microvm

import (
	"context"
	"net"
	"time"

	"github.com/tetherhq/tether/internal/vmwire"
	"github.com/tetherhq/tether/provider"
)

// DialPort implements provider.PortDialer: the agent connects to the
// port on the guest's loopback and the stream becomes the connection.
// The guest has no network of its own, so nothing but its own processes
// and Tether, through the agent, ever reaches the port.
func (p *Provider) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, provider.Errorf(provider.CodeInvalidRequest, "microvm: port %d", port)
	}
	if _, err := p.live(sandboxID); err != nil {
		return nil, err
	}
	st, err := p.agent(sandboxID).stream(ctx, vmwire.Request{Op: vmwire.OpDial, Port: port})
	if err != nil {
		return nil, p.lostOr(sandboxID, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = st.SetReadDeadline(time.Now()) })
	err = vmwire.ReadJSON(st, vmwire.KindOK, nil)
	if !stop() && err != nil {
		_ = st.Close()
		return nil, provider.Errorf(provider.CodePortUnreachable, "microvm: nothing answered on port %d before the deadline", port)
	}
	if err != nil {
		_ = st.Close()
		return nil, p.failure(sandboxID, "dial", err)
	}
	_ = st.SetReadDeadline(time.Time{})
	return st, nil
}
