package httpapi

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/jsoncodec"
)

// Config holds the API's limits and defaults.
type Config struct {
	// DefaultProvider serves creates that name no provider.
	DefaultProvider string
	// DefaultTTL is the lifetime of a sandbox created without ttl_seconds
	// and without an owner.
	DefaultTTL time.Duration
	// DefaultOwnerTTL is the lease an owner named by a create gets when it
	// has no live lease.
	DefaultOwnerTTL time.Duration
	// MaxLifetime caps every sandbox's lifetime, from its creation.
	MaxLifetime time.Duration
	// CreateTimeout bounds a sandbox's creation; past it the sandbox fails.
	CreateTimeout time.Duration
	// MaxBodyBytes caps JSON request bodies.
	MaxBodyBytes int64
	// PauseTimeout bounds a pause or a resume: past it the sandbox fails.
	PauseTimeout time.Duration
	// SnapshotTimeout bounds the taking of a snapshot: past it, it fails.
	SnapshotTimeout time.Duration
	// SnapshotRetention sets a snapshot's expires_at, from when it was
	// asked for; zero: kept until deleted.
	SnapshotRetention time.Duration
	// SnapshotMaxPerTenant and SnapshotMaxBytesPerTenant are each
	// tenant's snapshot quota (creating and ready ones), unless the
	// tenant's own say otherwise; zero: no limit.
	SnapshotMaxPerTenant      int
	SnapshotMaxBytesPerTenant int64
	// DefaultOnEnd is the on_end of a create that names none, for a
	// provider that snapshots ("" or "snapshot").
	DefaultOnEnd string
	// MaxWait caps GET /v1/sandboxes/{id}?wait=.
	MaxWait time.Duration
	// MaxFileBytes caps file uploads.
	MaxFileBytes int64
	// MaxExecTimeout caps an exec's timeout_seconds.
	MaxExecTimeout time.Duration
	// MaxExecOutput caps the output an exec returns, in bytes.
	MaxExecOutput int
	// TenantMaxLive caps each tenant's live sandboxes and
	// TenantCreatesPerMinute its creates (0: the default; NoLimit: none),
	// unless the tenant's own quotas say otherwise; KeyRequestsPerSecond
	// caps each API key's requests (burst: two seconds' worth). Past them
	// a request is 429 QUOTA_EXCEEDED with Retry-After.
	TenantMaxLive          int
	TenantCreatesPerMinute int
	KeyRequestsPerSecond   int
	// TenantRequestsPerSecond caps each tenant's requests over all its
	// keys (burst: two seconds' worth); AuthFailuresPerSecond caps the
	// requests without a valid key or preview token from one client
	// address (burst: four seconds' worth): past it, such a request is 429
	// before any lookup, while valid ones still pass (see authGuard).
	TenantRequestsPerSecond int
	AuthFailuresPerSecond   int
	// TrustedProxies are the addresses of the proxies in front of Tether
	// whose X-Forwarded-For tells the client's address (see clientAddr);
	// none by default, when the header is never read.
	TrustedProxies []netip.Prefix
	// TenantMaxKeys caps each tenant's API keys that are not revoked.
	TenantMaxKeys int
	// MaxStreamsPerTenant bounds each tenant's open event streams.
	MaxStreamsPerTenant int
	// AuthCacheTTL is how long a successful API key lookup is remembered;
	// 0 looks every key up on every request.
	AuthCacheTTL time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second on average, once BodyGrace has passed; MaxBodyTime bounds a
	// body however fast it comes. Slower bodies are 408 REQUEST_TIMEOUT.
	MinBodyRate int64
	BodyGrace   time.Duration
	MaxBodyTime time.Duration
	// WebhookMaxEndpoints caps each tenant's webhook endpoints;
	// WebhookAllowPrivate lets endpoint URLs name internal addresses
	// (loopback, private, link-local, metadata).
	WebhookMaxEndpoints int
	WebhookAllowPrivate bool
	// PreviewBaseURL is Tether's external address, which preview URLs
	// begin with ("" takes the request's scheme and Host). PreviewTTL is a
	// preview's lifetime when its create asks for none, PreviewMaxTTL the
	// most one may ask for. PreviewHost, if set, turns on wildcard host
	// mode: previews are {port}-{sandbox}.PreviewHost, an origin of their
	// own each, rather than /p/{token}/ on Tether's host.
	PreviewBaseURL string
	PreviewTTL     time.Duration
	PreviewMaxTTL  time.Duration
	PreviewHost    string
	// E2BDisabled turns off E2B's protocol under /e2b (docs/e2b.md).
	// E2BDomain, if set, is the domain of E2B's per-sandbox hosts,
	// {port}-{sandbox}.E2BDomain, which E2B's creates answer as their
	// domain (the SDK's getHost builds them); it may be PreviewHost.
	E2BDisabled bool
	E2BDomain   string
}

// API defaults, for zero Config fields.
const (
	DefaultMaxLifetime   = 24 * time.Hour
	DefaultTTL           = time.Hour
	DefaultOwnerTTL      = time.Minute
	DefaultCreateTimeout = 5 * time.Minute
	DefaultMaxWait       = time.Minute
	DefaultPauseTimeout  = 2 * time.Minute
	// DefaultSnapshotTimeout bounds the taking of a snapshot.
	DefaultSnapshotTimeout = 10 * time.Minute
	// DefaultSnapshotMaxPerTenant caps each tenant's snapshots.
	DefaultSnapshotMaxPerTenant = 100
	DefaultMaxExecTimeout       = time.Hour
	// DefaultExecTimeout bounds an exec that asks for no timeout.
	DefaultExecTimeout   = time.Minute
	DefaultMaxBodyBytes  = 1 << 20
	DefaultMaxFileBytes  = 100 << 20
	DefaultMaxExecOutput = 1 << 20
	DefaultAuthCacheTTL  = 10 * time.Second
)

// WithDefaults fills zero limits with the defaults. AuthCacheTTL stays as
// given: zero turns the cache off.
func (c Config) WithDefaults() Config {
	c.MaxLifetime = cmp.Or(c.MaxLifetime, DefaultMaxLifetime)
	c.DefaultTTL = cmp.Or(c.DefaultTTL, DefaultTTL)
	c.DefaultOwnerTTL = cmp.Or(c.DefaultOwnerTTL, DefaultOwnerTTL)
	c.CreateTimeout = cmp.Or(c.CreateTimeout, DefaultCreateTimeout)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.PauseTimeout = cmp.Or(c.PauseTimeout, DefaultPauseTimeout)
	c.SnapshotTimeout = cmp.Or(c.SnapshotTimeout, DefaultSnapshotTimeout)
	c.MaxExecTimeout = cmp.Or(c.MaxExecTimeout, DefaultMaxExecTimeout)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxFileBytes = cmp.Or(c.MaxFileBytes, DefaultMaxFileBytes)
	c.MaxExecOutput = cmp.Or(c.MaxExecOutput, DefaultMaxExecOutput)
	c.TenantMaxLive = cmp.Or(c.TenantMaxLive, DefaultTenantMaxLive)
	c.TenantCreatesPerMinute = cmp.Or(c.TenantCreatesPerMinute, DefaultTenantCreatesPerMinute)
	c.KeyRequestsPerSecond = cmp.Or(c.KeyRequestsPerSecond, DefaultKeyRequestsPerSecond)
	c.TenantRequestsPerSecond = cmp.Or(c.TenantRequestsPerSecond, DefaultTenantRequestsPerSecond)
	c.AuthFailuresPerSecond = cmp.Or(c.AuthFailuresPerSecond, DefaultAuthFailuresPerSecond)
	c.TenantMaxKeys = cmp.Or(c.TenantMaxKeys, DefaultTenantMaxKeys)
	c.MaxStreamsPerTenant = cmp.Or(c.MaxStreamsPerTenant, DefaultMaxStreamsPerTenant)
	c.MinBodyRate = cmp.Or(c.MinBodyRate, DefaultMinBodyRate)
	c.BodyGrace = cmp.Or(c.BodyGrace, DefaultBodyGrace)
	c.MaxBodyTime = cmp.Or(c.MaxBodyTime, DefaultMaxBodyTime)
	c.WebhookMaxEndpoints = cmp.Or(c.WebhookMaxEndpoints, DefaultWebhookMaxEndpoints)
	c.PreviewTTL = cmp.Or(c.PreviewTTL, DefaultPreviewTTL)
	c.PreviewMaxTTL = cmp.Or(c.PreviewMaxTTL, DefaultPreviewMaxTTL)
	return c
}

// WithRequestID takes a sane X-Request-ID from the client or makes one, and
// echoes it in the response.
func WithRequestID() gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-ID")
		if !saneRequestID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
			id = hex.EncodeToString(b[:])
		}
		State(c).id = id
		c.Header("X-Request-ID", id)
		c.Next()
	}
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if r < '!' || r > '~' {
			return false
		}
	}
	return true
}

// WithLogging logs one structured line per request, at requestLevel.
func WithLogging(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status := c.Writer.Status()
		level := requestLevel(c, status)
		if !log.Enabled(c.Request.Context(), level) {
			return // spare building the record's attributes
		}
		log.Log(c.Request.Context(), level, "http request",
			"method", c.Request.Method, "route", c.FullPath(), "status", status,
			"duration_ms", float64(time.Since(start).Microseconds())/1000,
			"request_id", RequestID(c), "tenant", TenantOf(c))
	}
}

// requestLevel is the level of a request's log line: a problem's is its
// code's (logLevelOf); an answer Tether passed on is INFO whatever its
// status (an app's 500 is the app's, and a node that answered a forwarded
// call logged it at the level its answer deserves, under the same request
// id); the probes' are DEBUG; any other 5xx is an ERROR.
func requestLevel(c *gin.Context, status int) slog.Level {
	st := State(c)
	switch {
	case st.code != "":
		return logLevelOf(st.code, status)
	case st.AnsweredBy != answeredHere:
		return slog.LevelInfo
	case status >= 500:
		return slog.LevelError
	case c.Request.URL.Path == "/healthz" || c.Request.URL.Path == "/readyz" || c.Request.URL.Path == "/metrics":
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// WithMetrics observes request latency by method, route and status, and
// counts the requests in flight (long-polls and streams included).
func WithMetrics(reg prometheus.Registerer) gin.HandlerFunc {
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tether_http_request_duration_seconds",
		Help:    "HTTP request latency by method, route and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 60},
	}, []string{"method", "route", "status"})
	inFlight := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_http_requests_in_flight",
		Help: "HTTP requests being served, long-polls and streams included.",
	})
	if reg != nil {
		reg.MustRegister(hist, inFlight)
	}
	return func(c *gin.Context) {
		start := time.Now()
		inFlight.Inc()
		defer inFlight.Dec()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		hist.WithLabelValues(c.Request.Method, route, strconv.Itoa(c.Writer.Status())).Observe(time.Since(start).Seconds())
	}
}

// WithRecovery turns a panic into a logged INTERNAL problem.
func WithRecovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				log.Error("panic serving request", "panic", v, "request_id", RequestID(c), "stack", string(debug.Stack()))
				if !c.Writer.Written() {
					WriteProblem(c, NewProblem(c, http.StatusInternalServerError, domain.CodeInternal,
						"an internal error occurred; quote the request id when reporting it", ""))
				}
			}
		}()
		c.Next()
	}
}

// WithBodyLimit caps the request body; reading past it fails with
// *http.MaxBytesError, which renders as PAYLOAD_TOO_LARGE.
func WithBodyLimit(limit int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.ContentLength > limit {
			WriteProblem(c, NewProblem(c, http.StatusRequestEntityTooLarge, domain.CodePayloadTooLarge,
				fmt.Sprintf("request body exceeds %d bytes", limit), ""))
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
		c.Next()
	}
}

// DecodeJSON decodes exactly one JSON object from the body into v, refusing
// unknown fields, and translates failures into INVALID_REQUEST messages a
// client can act on.
func DecodeJSON(c *gin.Context, v any) error {
	body, err := ReadJSONBody(c)
	if err != nil {
		return err
	}
	return jsoncodec.Decode(body, v)
}

// ReadJSONBody reads the whole request body, for decodeJSONBytes.
func ReadJSONBody(c *gin.Context) ([]byte, error) {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var (
			maxBytes *http.MaxBytesError
			coded    *domain.Error
		)
		if errors.As(err, &maxBytes) || errors.As(err, &coded) {
			return nil, err // too large, too slow, or not the body a forwarded call signed
		}
		return nil, domain.Errorf(domain.CodeInvalidRequest, "reading request body failed")
	}
	return body, nil
}

// RestoreBody gives raw, read already, again as the request's body (for
// the hop to another node, or the handler).
func RestoreBody(c *gin.Context, raw []byte) {
	c.Request.Body = io.NopCloser(bytes.NewReader(raw))
	c.Request.ContentLength = int64(len(raw))
}

// WriteJSON writes v with the given status. A client that went away is not
// an error worth reporting, so it returns nil.
func WriteJSON(c *gin.Context, status int, v any) error {
	c.Header("Content-Type", jsonContentType)
	c.Status(status)
	_ = jsoncodec.Encode(c.Writer, v)
	return nil
}

// AnswerNow writes v as JSON with status and sends it to the client at
// once, whole (its length declared), while the handler goes on.
func AnswerNow(c *gin.Context, status int, v any) {
	var buf bytes.Buffer
	_ = jsoncodec.Encode(&buf, v)
	c.Header("Content-Length", strconv.Itoa(buf.Len()))
	c.Data(status, jsonContentType, buf.Bytes())
	c.Writer.Flush()
}

// jsonContentType is the Content-Type of every JSON answer.
const jsonContentType = "application/json; charset=utf-8"
