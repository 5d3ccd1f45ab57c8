package httpapi

import (
	"bufio"
	"net"
	"time"

	"github.com/gin-gonic/gin"
)

// UpgradeWriter is a response writer whose hijacked connection (a
// WebSocket's, once upgraded) has no deadline: the server's read timeout
// bounds a request, not a connection that is no longer HTTP.
type UpgradeWriter struct{ gin.ResponseWriter }

// Hijack takes the connection over, with no deadline.
func (w UpgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.ResponseWriter.Hijack()
	if err == nil {
		_ = conn.SetDeadline(time.Time{})
	}
	return conn, brw, err
}
