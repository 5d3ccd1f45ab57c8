package http_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
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
