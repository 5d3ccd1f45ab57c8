package httpapi

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// Body pacing defaults, for zero Config fields.
const (
	// DefaultMinBodyRate is the slowest a request body may arrive, on
	// average, once DefaultBodyGrace has passed: 1 KiB a second.
	DefaultMinBodyRate = 1024
	// DefaultBodyGrace is how long a request body may take before
	// MinBodyRate applies.
	DefaultBodyGrace = 10 * time.Second
	// DefaultMaxBodyTime bounds the reading of any request body, however
	// fast it comes (the server's whole-request bound).
	DefaultMaxBodyTime = 15 * time.Minute
)

// WithBodyPacing makes a request body arrive at a minimum rate: its reads
// fail with REQUEST_TIMEOUT once fewer than minRate bytes a second have
// come since the request began (after the first grace, and never past
// maxTime). A client that trickles a body cannot hold a connection for the
// server's whole-request bound. It also records whether the body was read
// to its end, so that an answer given without reading it closes the
// connection instead of waiting for the rest (see writeProblem).
func WithBodyPacing(minRate int64, grace, maxTime time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			c.Next()
			return
		}
		b := &pacedBody{
			rc: r.Body, ctl: http.NewResponseController(c.Writer), start: time.Now(),
			minRate: minRate, grace: grace, maxTime: maxTime,
		}
		// A body nobody reads is bounded too: the server reads what is left
		// of a small one after the answer (unless the connection closes).
		_ = b.ctl.SetReadDeadline(b.start.Add(min(grace, maxTime)))
		r.Body = b
		State(c).paced = b
		c.Next()
		// The server looks at the request's own body after the handler, to
		// tell a body it gave up on (and then close the connection
		// gracefully, so that the client reads the answer rather than a
		// reset): give it back.
		r.Body = b.rc
	}
}

// lingerAfterAnswer bounds what is left of the body's reading to a
// moment from now: after an answer given without reading the body, the
// server reads what remains of a small one before it closes the
// connection (so that the client sees the answer, not a reset). A client
// that is sending it gets that moment; one that trickles it holds its
// connection no longer.
func (b *pacedBody) lingerAfterAnswer() {
	until := time.Now().Add(bodyLinger)
	if d := b.deadline(); d.Before(until) {
		until = d
	}
	_ = b.ctl.SetReadDeadline(until)
}

// bodyLinger is how long an unread body may still take after the answer.
const bodyLinger = time.Second

// pacedBody is a request body read under a deadline that grows with what
// has arrived.
type pacedBody struct {
	rc      io.ReadCloser
	ctl     *http.ResponseController
	start   time.Time
	minRate int64
	grace   time.Duration
	maxTime time.Duration

	n       int64
	eof     bool
	tooSlow bool
}

func (b *pacedBody) deadline() time.Time {
	allowed := b.grace
	if b.minRate > 0 {
		allowed += time.Duration(float64(b.n) / float64(b.minRate) * float64(time.Second))
	}
	return b.start.Add(min(allowed, b.maxTime))
}

// errBodyTooSlow is a body that did not keep to the minimum rate.
func (b *pacedBody) errTooSlow() error {
	return domain.Errorf(domain.CodeRequestTimeout,
		"the request body arrived slower than %d bytes a second (after the first %s); send it faster", b.minRate, b.grace)
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.tooSlow {
		return 0, b.errTooSlow()
	}
	_ = b.ctl.SetReadDeadline(b.deadline())
	n, err := b.rc.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		// The server clears the deadline for its own background read.
		b.eof = true
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.tooSlow = true
		return n, b.errTooSlow()
	}
	return n, err
}

func (b *pacedBody) Close() error { return b.rc.Close() }

// unreadBody is the request's body if it was not read to its end, else
// nil.
func unreadBody(c *gin.Context) *pacedBody {
	if b := State(c).paced; b != nil && !b.eof {
		return b
	}
	return nil
}

// BodyError is the error an operation that read the request body should
// report: the body's own failure (too slow; for a forwarded call, not the
// body that was signed) when there was one, else err. A provider that read
// the body sees only that its reads failed, and may say so in its own words.
func BodyError(c *gin.Context, err error) error {
	if err == nil {
		return nil
	}
	s := State(c)
	switch {
	case s.badBody != nil:
		return s.badBody
	case s.paced != nil && s.paced.tooSlow:
		return s.paced.errTooSlow()
	}
	return err
}
