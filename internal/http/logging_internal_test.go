package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestRequestLogLevels checks the level of each request's log line: a
// capability a provider lacks (501) is no error, an unavailable dependency
// (503) a warning, and only other 5xx an error.
func TestRequestLogLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := gin.New()
	r.Use(withLogging(log))
	for _, status := range []int{200, 404, 500, 501, 502, 503} {
		r.GET("/"+strconv.Itoa(status), func(c *gin.Context) { c.Status(status) })
	}
	want := map[int]string{200: "INFO", 404: "INFO", 500: "ERROR", 501: "INFO", 502: "ERROR", 503: "WARN"}
	for status, level := range want {
		buf.Reset()
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/"+strconv.Itoa(status), nil))
		var line struct {
			Level  string `json:"level"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%d: log line %q: %v", status, buf.String(), err)
		}
		if line.Status != status || line.Level != level {
			t.Errorf("a %d is logged at %s (status %d), want %s", status, line.Level, line.Status, level)
		}
	}
}

// TestClientGoneIsNoError: a handler error caused by the client going away
// (its request's context cancelled) is logged at INFO with 499, not as a
// 500 ERROR; the same error on a live request still is one.
func TestClientGoneIsNoError(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := gin.New()
	r.Use(withLogging(log))
	r.GET("/renew", func(c *gin.Context) {
		writeError(c, log, fmt.Errorf("store: renew owner lease: %w", context.Canceled))
	})
	for _, tc := range []struct {
		gone   bool
		status int
	}{{true, statusClientClosedRequest}, {false, http.StatusInternalServerError}} {
		buf.Reset()
		ctx, cancel := context.WithCancel(context.Background())
		if tc.gone {
			cancel()
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/renew", nil).WithContext(ctx))
		cancel()
		if rec.Code != tc.status {
			t.Errorf("client gone %t: status %d, want %d", tc.gone, rec.Code, tc.status)
		}
		if got := strings.Contains(buf.String(), `"level":"ERROR"`); got == tc.gone {
			t.Errorf("client gone %t: logged at ERROR = %t\n%s", tc.gone, got, buf.String())
		}
	}
}
