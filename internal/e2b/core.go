package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// core calls Tether's own API in process, as the caller: with its key,
// its address and its forwarding headers, so that authentication, quotas,
// audit and the rest apply as they would to a /v1 call of its own.
type core struct {
	api http.Handler
}

// reply is a /v1 answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// ok reports a 2xx answer.
func (r reply) ok() bool { return r.status >= 200 && r.status < 300 }

// decode reads the answer's JSON body into v.
func (r reply) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("e2b: decode a /v1 answer (status %d): %w", r.status, err)
	}
	return nil
}

// recorder is the ResponseWriter an in-process call writes to.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n, err := w.body.Write(b)
	if err != nil {
		return n, fmt.Errorf("e2b: record: %w", err)
	}
	return n, nil
}

// forwarded are the headers of the caller's request an in-process call
// keeps: who the client is (for the API's address checks) and the
// request's id.
var forwarded = []string{"X-Forwarded-For", "X-Real-Ip", "Forwarded", "X-Request-Id", "User-Agent"}

// call makes the /v1 call method path (with query) with body (JSON when
// not nil) as the caller of from, with key.
func (c core) call(ctx context.Context, from *http.Request, key, method, path string, body any) (reply, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{}, fmt.Errorf("e2b: %s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return reply{}, fmt.Errorf("e2b: %s %s: %w", method, path, err)
	}
	return c.do(req, from, key, "application/json"), nil
}

// do serves req through the API as the caller of from, with key.
func (c core) do(req *http.Request, from *http.Request, key, contentType string) reply {
	for _, h := range forwarded {
		if v := from.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	req.RemoteAddr = from.RemoteAddr
	req.Host = from.Host
	req.Header.Set("Authorization", "Bearer "+key)
	if contentType != "" && req.Body != http.NoBody {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	w := &recorder{header: http.Header{}}
	c.api.ServeHTTP(w, req)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return reply{status: w.status, header: w.header, body: w.body.Bytes()}
}

// v1Sandbox is what this package reads of a /v1 sandbox.
type v1Sandbox struct {
	ID        string            `json:"id"`
	State     string            `json:"state"`
	Provider  string            `json:"provider"`
	Labels    map[string]string `json:"labels"`
	Owner     string            `json:"owner"`
	Node      *string           `json:"node"`
	WorkDir   string            `json:"work_dir"`
	Error     string            `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	ReadyAt   *time.Time        `json:"ready_at"`
	ExpiresAt *time.Time        `json:"expires_at"`
}

// live reports whether the sandbox has not ended (E2B knows no ended
// sandboxes: they are not found).
func (s v1Sandbox) live() bool {
	switch s.State {
	case "cancelled", "terminated", "failed":
		return false
	}
	return true
}

// sandboxPath is /v1's path of the sandbox id, with query q.
func sandboxPath(id, suffix string, q url.Values) string {
	p := "/v1/sandboxes/" + url.PathEscape(id) + suffix
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// get reads the sandbox id through /v1, waiting up to wait (0: not at
// all) while it is in a passing state.
func (c core) get(ctx context.Context, from *http.Request, key, id string, wait time.Duration) (v1Sandbox, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	rep, err := c.call(ctx, from, key, http.MethodGet, sandboxPath(id, "", q), nil)
	if err != nil {
		return v1Sandbox{}, err
	}
	if rep.status == http.StatusBadRequest || rep.status == http.StatusNotFound {
		// /v1 refuses a malformed id; E2B knows only sandboxes found or not.
		return v1Sandbox{}, errorf(http.StatusNotFound, "sandbox %q not found", id)
	}
	if !rep.ok() {
		return v1Sandbox{}, fromV1(rep)
	}
	var s v1Sandbox
	if err := rep.decode(&s); err != nil {
		return v1Sandbox{}, err
	}
	return s, nil
}
