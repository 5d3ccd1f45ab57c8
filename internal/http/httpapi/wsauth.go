package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"
)

// Browsers cannot set headers on a WebSocket, so a process's terminal
// (package processes' terminal.go, docs/processes.md) takes the API key
// in the subprotocol list too: "tether.v1, tether.bearer.<key>".

// BearerProtocol is the prefix of the subprotocol that carries an API key.
const BearerProtocol = "tether.bearer."

// TerminalRoute is the terminal's route, the one route whose key may come
// in the subprotocol list (a port's WebSocket passes its subprotocols on
// to the app, which must never see a key).
const TerminalRoute = "/v1/sandboxes/:id/processes/:pid/terminal"

// subprotocolKey is the API key a terminal's WebSocket upgrade carries in
// its subprotocol list ("tether.bearer.<key>"), and whether it carries
// one.
func subprotocolKey(c *gin.Context) (string, bool) {
	r := c.Request
	if c.FullPath() != TerminalRoute || !websocket.IsWebSocketUpgrade(r) {
		return "", false
	}
	for _, p := range websocket.Subprotocols(r) {
		if key, ok := strings.CutPrefix(p, BearerProtocol); ok && key != "" {
			return key, true
		}
	}
	return "", false
}

// DropKeyProtocol leaves the API key out of the request's subprotocol
// list once it was checked: it goes no further (not to another node, not
// into a log), as the Authorization header goes no further.
func DropKeyProtocol(r *http.Request) {
	protocols := websocket.Subprotocols(r)
	kept := protocols[:0]
	for _, p := range protocols {
		if !strings.HasPrefix(p, BearerProtocol) {
			kept = append(kept, p)
		}
	}
	r.Header.Del("Sec-WebSocket-Protocol")
	if len(kept) > 0 {
		r.Header.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
	}
}
