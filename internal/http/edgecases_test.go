package http_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestHostileInputFoundInReview: inputs that once reached Postgres or exec
// and came back as 500s are refused as bad requests, writing nothing.
func TestHostileInputFoundInReview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, map[string]any{})
	before := b.counts(t)
	cursor := func(raw string) string {
		return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(raw + "|" + sb.ID)))
	}
	cases := []struct {
		name, method, path string
		body               any
	}{
		{"cursor before year 1", http.MethodGet, "/v1/sandboxes?cursor=" + cursor("-1152921504606846976"), nil},
		{"cursor at the int64 maximum", http.MethodGet, "/v1/sandboxes?cursor=" + cursor("9223372036854775807"), nil},
		{"cursor at the int64 minimum", http.MethodGet, "/v1/sandboxes?cursor=" + cursor("-9223372036854775808"), nil},
		{"provider filter with NUL", http.MethodGet, "/v1/sandboxes?provider=%00", nil},
		{"provider filter with invalid UTF-8", http.MethodGet, "/v1/sandboxes?provider=%FF", nil},
		{"exec command with NUL", http.MethodPost, "/v1/sandboxes/" + sb.ID + "/exec", map[string]any{"command": "echo \u0000"}},
		{"exec env value with NUL", http.MethodPost, "/v1/sandboxes/" + sb.ID + "/exec", map[string]any{"command": "true", "env": map[string]string{"A": "\u0000"}}},
		{"exec workdir with NUL", http.MethodPost, "/v1/sandboxes/" + sb.ID + "/exec", map[string]any{"command": "true", "workdir": "/tmp/\u0000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, b.do(t, tc.method, tc.path, tc.body), http.StatusBadRequest, "INVALID_REQUEST")
		})
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("rows changed: %s -> %s", before, after)
	}
}

// TestJSONKeysOnceEach: objects whose keys repeat only in different
// objects, or as values, are fine; the same key twice in one object is not.
func TestJSONKeysOnceEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantStatus(t, b.do(t, http.MethodPost, "/v1/sandboxes",
		`{"labels":{"labels":"labels","owner":"x"},"owner":"labels"}`), http.StatusAccepted)
	for _, body := range []string{
		`{"params":{"x":[{"a":1,"b":[],"a":2}]}}`,
		`{"params":{"x":[{"a":1},{"a":2}],"y":{"a":{}},"y":1}}`,
	} {
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body)
		wantProblem(t, r, http.StatusBadRequest, "INVALID_REQUEST")
		if !bytes.Contains(r.Body, []byte("appears twice")) {
			t.Errorf("%s: %s; want the repeated key named", body, r.Body)
		}
	}
}

// TestSwaggerCannotBeFramed: the API docs page tells browsers not to show
// it in another site's frame.
func TestSwaggerCannotBeFramed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/swagger/index.html", nil, noAuth())
	if r.Status != http.StatusOK || r.Header.Get("X-Frame-Options") != "DENY" || r.Header.Get("Content-Security-Policy") != "frame-ancestors 'none'" {
		t.Errorf("status %d, framing headers = %q, %q; want 200, DENY and frame-ancestors 'none'",
			r.Status, r.Header.Get("X-Frame-Options"), r.Header.Get("Content-Security-Policy"))
	}
}

// TestManyKeysStillChecked: an object with thousands of keys is checked
// in linear time, and a repeat among them is found (after unescaping).
func TestManyKeysStillChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var sb strings.Builder
	sb.WriteString(`{"labels":{`)
	for i := range 5000 {
		fmt.Fprintf(&sb, `"k%d":"v",`, i)
	}
	sb.WriteString(`"\u006b42":"again"}}`) // "k42", escaped
	r := b.do(t, http.MethodPost, "/v1/sandboxes", sb.String())
	wantProblem(t, r, http.StatusBadRequest, "INVALID_REQUEST")
	if !bytes.Contains(r.Body, []byte(`key \"k42\" appears twice`)) {
		t.Errorf("got %s; want the repeated key k42 named", r.Body)
	}
}
