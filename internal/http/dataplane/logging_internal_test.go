package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// TestRequestLogLevels checks the level of each request's log line: an
// error only for Tether's own failure (INTERNAL, or a 5xx of no known
// code), a warning for an unavailable dependency (Postgres, a provider or
// a node), and INFO for what is about the request or its sandbox, 5xx or
// not: a capability the provider lacks (501), a port nothing listens on
// (502), and any answer Tether only passed on (an app's, a node's).
func TestRequestLogLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := gin.New()
	r.Use(httpapi.WithLogging(log))
	for _, tc := range []struct {
		path   string
		serve  gin.HandlerFunc
		status int
		level  string
	}{
		{"/ok", func(c *gin.Context) { c.Status(200) }, 200, "INFO"},
		{"/healthz", func(c *gin.Context) { c.Status(200) }, 200, "DEBUG"},
		{"/not-found", problem(log, domain.CodeNotFound), 404, "INFO"},
		{"/internal", problem(log, domain.CodeInternal), 500, "ERROR"},
		{"/uncoded", problem(log, errors.New("a bug")), 500, "ERROR"},
		{"/bare-500", func(c *gin.Context) { c.Status(500) }, 500, "ERROR"},
		{"/bare-502", func(c *gin.Context) { c.Status(502) }, 502, "ERROR"},
		{"/not-supported", problem(log, domain.CodeNotSupported), 501, "INFO"},
		{"/port-unreachable", problem(log, domain.CodePortUnreachable), 502, "INFO"},
		{"/provider-unavailable", problem(log, domain.CodeProviderUnavailable), 503, "WARN"},
		{"/unavailable", problem(log, domain.CodeUnavailable), 503, "WARN"},
		{"/app-500", answered(httpapi.AnsweredByApp, 500), 500, "INFO"},
		{"/app-502", answered(httpapi.AnsweredByApp, 502), 502, "INFO"},
		{"/node-500", answered(httpapi.AnsweredByNode, 500), 500, "INFO"},
		{"/node-502", answered(httpapi.AnsweredByNode, 502), 502, "INFO"},
	} {
		r.GET(tc.path, tc.serve)
		buf.Reset()
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.path, nil))
		line := requestLine(t, buf.Bytes())
		if line.Status != tc.status || line.Level != tc.level {
			t.Errorf("%s: logged at %s (status %d), want %s (status %d)", tc.path, line.Level, line.Status, tc.level, tc.status)
		}
	}
}

// problem answers with err, or a problem of code err, as a handler does.
func problem(log *slog.Logger, err any) gin.HandlerFunc {
	return func(c *gin.Context) {
		if code, ok := err.(domain.Code); ok {
			err = domain.Errorf(code, "test")
		}
		httpapi.WriteError(c, log, err.(error))
	}
}

// answered passes on an answer of status from who, as the port proxy and
// the forwarding to a node do.
func answered(who httpapi.Answerer, status int) gin.HandlerFunc {
	return func(c *gin.Context) {
		httpapi.State(c).AnsweredBy = who
		c.Status(status)
	}
}

// requestLine is the "http request" line among log lines.
func requestLine(t *testing.T, logs []byte) (line struct {
	Level  string `json:"level"`
	Status int    `json:"status"`
},
) {
	t.Helper()
	for l := range bytes.Lines(logs) {
		if bytes.Contains(l, []byte(`"msg":"http request"`)) {
			if err := json.Unmarshal(l, &line); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			return line
		}
	}
	t.Fatalf("no request line among %q", logs)
	return line
}

// appDialer is a sandbox whose app answers every request with status.
type appDialer struct{ status int }

func (d appDialer) DialPort(context.Context, string, int) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer func() { _ = server.Close() }()
		if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
			return
		}
		_, _ = fmt.Fprintf(server, "HTTP/1.1 %d %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno", d.status, http.StatusText(d.status))
	}()
	return client, nil
}

// TestAppErrorsAreNoErrors: an app's own 5xx through a port is passed on,
// and logged at INFO; it is the app's, not Tether's.
func TestAppErrorsAreNoErrors(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := gin.New()
	r.Use(httpapi.WithLogging(log))
	r.GET("/app/*path", httpapi.ErrorHandler(log)(func(c *gin.Context) error {
		_, _, err := dialAndProxy(c, appDialer{status: http.StatusBadGateway}, "sbx_test", 8080, "/", portTarget{prefix: "/app", skip: 1})
		return err
	}))
	srv := httptest.NewServer(r)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/app/x")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusBadGateway || string(body) != "no" {
		t.Fatalf("the app's answer came back as %d %q (%v), want its 502", res.StatusCode, body, err)
	}
	srv.Close() // the request's line is written once it is served
	if line := requestLine(t, buf.Bytes()); line.Level != "INFO" {
		t.Errorf("the app's 502 is logged at %s, want INFO", line.Level)
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
	r.Use(httpapi.WithLogging(log))
	r.GET("/renew", func(c *gin.Context) {
		httpapi.WriteError(c, log, fmt.Errorf("store: renew owner lease: %w", context.Canceled))
	})
	for _, tc := range []struct {
		gone   bool
		status int
	}{{true, httpapi.StatusClientClosedRequest}, {false, http.StatusInternalServerError}} {
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
