package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmpConn is a connection to QEMU's monitor (QMP), capabilities
// negotiated.
type qmpConn struct {
	conn *net.UnixConn
	r    *bufio.Reader
}

// dialQMP connects to the monitor's socket; the connection's deadline is
// ctx's, or ten seconds.
func dialQMP(ctx context.Context, socket string) (*qmpConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("connecting to QEMU's monitor: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	m := &qmpConn{conn: c.(*net.UnixConn), r: bufio.NewReader(c)}
	if _, err := m.r.ReadBytes('\n'); err != nil { // the greeting
		m.close()
		return nil, fmt.Errorf("reading QEMU's greeting: %w", err)
	}
	if _, err := m.run("qmp_capabilities", nil, nil); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *qmpConn) close() { _ = m.conn.Close() }

// run runs a command, with fd passed along (SCM_RIGHTS) if not nil, and
// returns its answer's "return".
func (m *qmpConn) run(command string, args any, fd *os.File) (json.RawMessage, error) {
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	var oob []byte
	if fd != nil {
		oob = unix.UnixRights(int(fd.Fd()))
	}
	if _, _, err := m.conn.WriteMsgUnix(append(b, '\n'), oob, nil); err != nil {
		return nil, fmt.Errorf("sending %s: %w", command, err)
	}
	for {
		line, err := m.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("%s: reading QEMU's answer: %w", command, err)
		}
		var ans struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &ans) != nil {
			continue
		}
		if ans.Error != nil {
			return nil, fmt.Errorf("%s: %s", command, ans.Error.Desc)
		}
		if ans.Return != nil {
			return ans.Return, nil
		}
		// An event: skip it.
	}
}

// status returns the VM's run state ("running", "paused", "inmigrate",
// "postmigrate", …).
func (m *qmpConn) status() (string, error) {
	ret, err := m.run("query-status", nil, nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(ret, &st); err != nil {
		return "", fmt.Errorf("query-status: %w", err)
	}
	return st.Status, nil
}

// migrateTo writes the VM's memory and device state into f (the VM
// stopped already) and waits for the end.
func (m *qmpConn) migrateTo(ctx context.Context, f *os.File) error {
	if _, err := m.run("getfd", map[string]string{"fdname": "tether-snapshot"}, f); err != nil {
		return err
	}
	if _, err := m.run("migrate", map[string]string{"uri": "fd:tether-snapshot"}, nil); err != nil {
		return err
	}
	return m.waitMigration(ctx)
}

// waitMigration polls query-migrate until the migration completed.
func (m *qmpConn) waitMigration(ctx context.Context) error {
	for {
		ret, err := m.run("query-migrate", nil, nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(ret, &st); err != nil {
			return fmt.Errorf("query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return errors.New("the VM's state was not saved: " + st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			_, _ = m.run("migrate_cancel", nil, nil)
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
