// Package webhooktest is a webhook receiver for tests: a real HTTP server
// on loopback that verifies each delivery's signature, records what it
// got, and can be taken down and brought back.
package webhooktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/webhook"
)

// Attempt is one request the receiver got.
type Attempt struct {
	Delivery  string
	Signature string
	UserAgent string
	Body      []byte
	Payload   webhook.Payload
	// Verified: the signature matched the body under the secret.
	Verified bool
	// Answered is the status the receiver answered.
	Answered int
}

// Receiver is a webhook receiver on loopback.
type Receiver struct {
	*httptest.Server

	mu       sync.Mutex
	secret   string
	down     bool
	attempts []Attempt
}

// New starts a receiver, closed when the test ends. It answers 204 while
// up and 503 while down.
func New(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// SetSecret sets the secret signatures are checked with (the one the
// endpoint's create returned).
func (r *Receiver) SetSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = s
}

// SetDown takes the receiver down (503 to everything) or brings it back.
func (r *Receiver) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	a := Attempt{Delivery: req.Header.Get(webhook.HeaderDelivery), Signature: req.Header.Get(webhook.HeaderSignature),
		UserAgent: req.Header.Get("User-Agent"), Body: body}
	_ = json.Unmarshal(body, &a.Payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	a.Verified = webhook.Verify(r.secret, a.Signature, body, 5*time.Minute, time.Now()) == nil &&
		req.Header.Get("Content-Type") == "application/json"
	a.Answered = http.StatusNoContent
	if r.down {
		a.Answered = http.StatusServiceUnavailable
	}
	r.attempts = append(r.attempts, a)
	w.WriteHeader(a.Answered)
}

// Attempts returns every request so far, in arrival order.
func (r *Receiver) Attempts() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

// Delivered returns the deliveries answered 2xx, each once, in the order
// they were first answered so. It checks what a receiver relies on and
// returns an error if any fails: every request was signed right, and every
// request with one delivery id carried the same body.
func (r *Receiver) Delivered() ([]webhook.Payload, error) {
	bodies := map[string][]byte{}
	seen := map[string]bool{}
	var out []webhook.Payload
	for _, a := range r.Attempts() {
		if !a.Verified {
			return nil, fmt.Errorf("delivery %s: bad signature %q", a.Delivery, a.Signature)
		}
		if a.Delivery != a.Payload.ID {
			return nil, fmt.Errorf("Tether-Delivery %s names another delivery than the body's %s", a.Delivery, a.Payload.ID)
		}
		if prev, ok := bodies[a.Delivery]; ok && !bytes.Equal(prev, a.Body) {
			return nil, fmt.Errorf("delivery %s was sent with two bodies:\n%s\n%s", a.Delivery, prev, a.Body)
		}
		bodies[a.Delivery] = a.Body
		if a.Answered/100 == 2 && !seen[a.Delivery] {
			seen[a.Delivery] = true
			out = append(out, a.Payload)
		}
	}
	return out, nil
}

// Events returns the events of Delivered's deliveries, in order.
func Events(ps []webhook.Payload) []webhook.Event {
	var out []webhook.Event
	for _, p := range ps {
		out = append(out, p.Events...)
	}
	return out
}
