package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

	"github.com/tetherhq/tether/internal/domain"
)

// Call is a request to forward, and to whom.
type Call struct {
	// Node is the id of the node to forward to.
	Node string
	// As is who the call acts for.
	As Caller
	// RequestID is sent as X-Request-ID, so that both nodes log the call
	// under one id.
	RequestID string
	// Cut, if not nil, ends the node's answer once done: the answer then
	// reads as ended, and Forward returns ErrCut.
	Cut context.Context
}

// Why Forward could not pass a node's answer on. Anything Forward returns
// but ErrCut means nothing was written to the client: its caller answers.
var (
	// ErrNodeDown: the node has no heartbeat record, or no recent one.
	ErrNodeDown = errors.New("the node is not alive")
	// ErrHop: the call did not reach the node, or its answer did not
	// come back. It wraps the cause: the request's *http.MaxBytesError
	// (the body was over its limit), ErrNodeRefused, or the transport's
	// error (the node did not answer).
	ErrHop = errors.New("the hop to the node failed")
	// ErrNodeRefused is a node's 401 to a forwarded call: the caller's key
	// was good here, so the node refused the call itself. Forward returns
	// it as a *RefusedError, which says why.
	ErrNodeRefused = errors.New("the node refused the forwarded call")
	// ErrCut: the answer was cut short by Call.Cut; part of it may have
	// been written.
	ErrCut = errors.New("the forwarded answer was cut")
)

// Forward proxies r, signed (see Sign), to the node call names, and
// streams the node's answer to w as it comes. It fails with ErrNodeDown,
// ErrHop, ErrCut, or the error of the node's lookup.
func (c *Cluster) Forward(w http.ResponseWriter, r *http.Request, call Call) error {
	node, err := c.Finder.Node(r.Context(), call.Node)
	switch {
	case errors.Is(err, domain.ErrNotFound) || (err == nil && !node.Alive):
		return fmt.Errorf("cluster: forward to node %s: %w", call.Node, ErrNodeDown)
	case err != nil:
		return fmt.Errorf("cluster: find node %s: %w", call.Node, err)
	}
	target, err := url.Parse(node.URL)
	if err != nil {
		return fmt.Errorf("cluster: node %s's URL: %w", call.Node, err)
	}
	var failed error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("X-Request-ID", call.RequestID)
			c.Sign(pr.Out, call.Node, call.As)
		},
		Transport:      c.transport,
		FlushInterval:  -1, // exec output and downloads stream as they come
		ModifyResponse: checkNodeAnswer,
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			failed = fmt.Errorf("cluster: forward to node %s: %w: %w", call.Node, ErrHop, err)
		},
	}
	if call.Cut == nil {
		proxy.ServeHTTP(w, r)
		return failed
	}
	// The node's answer is cut (which ends a streamed command there) as if
	// it had ended.
	var cut atomic.Bool
	proxy.ModifyResponse = func(resp *http.Response) error {
		if err := checkNodeAnswer(resp); err != nil {
			return err
		}
		body := resp.Body
		stop := context.AfterFunc(call.Cut, func() {
			cut.Store(true)
			_ = body.Close()
		})
		resp.Body = &cutBody{ReadCloser: body, cut: &cut, stop: stop}
		return nil
	}
	proxy.ServeHTTP(w, r)
	if cut.Load() {
		return ErrCut
	}
	return failed
}

// checkNodeAnswer passes a node's answer on, but for its request id (the
// same; the forwarding replica set it already) and a refusal of the call
// itself, which is the cluster's fault and not the caller's.
func checkNodeAnswer(resp *http.Response) error {
	if resp.StatusCode == http.StatusUnauthorized {
		_ = resp.Body.Close()
		return &RefusedError{Why: Refusal(resp.Header.Get(hdrRefused))}
	}
	resp.Header.Del("X-Request-ID")
	return nil
}

// cutBody is a node's streamed answer that reads as ended once it was cut.
type cutBody struct {
	io.ReadCloser
	cut  *atomic.Bool
	stop func() bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.cut.Load() {
		return n, io.EOF
	}
	return n, err
}

func (b *cutBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}
