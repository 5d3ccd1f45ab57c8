package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// Optional is s, or nil for the empty string (JSON null).
func Optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// UTC is t in UTC, or nil for nil.
func UTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// SandboxGetter reads one sandbox of a tenant.
type SandboxGetter interface {
	GetSandbox(ctx context.Context, tenant, id string) (domain.Sandbox, error)
}

// ChangeSubscriber tells of changes to sandboxes (for waits and streams).
type ChangeSubscriber interface {
	SubscribeSandbox(id string) (<-chan domain.Change, func())
}

// Limits on client-supplied values.
const (
	maxLabels         = 64
	maxLabelValue     = 256
	MaxEnv            = 128
	MaxEnvValue       = 32 << 10
	maxSetup          = 64 << 10
	MaxIdempotencyKey = 255
	maxOwner          = 128
)

var (
	labelKeyPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$`)
	ownerPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
	// EnvKeyPattern is the shape of an environment variable's name.
	EnvKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// ValidateOwner refuses an owner name of the wrong shape.
func ValidateOwner(owner string) error {
	if !ownerPattern.MatchString(owner) {
		return domain.Errorf(domain.CodeInvalidRequest,
			"owner must be 1-%d characters: letters, digits and . _ : @ -, starting with a letter or digit", maxOwner)
	}
	return nil
}

// ValidateClientOwner is validateOwner for an owner a client holds: the
// names of warm pools' owners (pool:NAME) are Tether's own.
func ValidateClientOwner(owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	if domain.ReservedOwner(owner) {
		return domain.Errorf(domain.CodeInvalidRequest, "owner names starting with pool: are reserved for warm pools")
	}
	return nil
}

// ValidateLabels refuses labels of the wrong shape, or too many.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return domain.Errorf(domain.CodeInvalidRequest, "at most %d labels are allowed", maxLabels)
	}
	for k, v := range labels {
		if k == "" {
			return domain.Errorf(domain.CodeInvalidRequest, "label keys must not be empty")
		}
		if !labelKeyPattern.MatchString(k) {
			return domain.Errorf(domain.CodeInvalidRequest,
				"label key %q must be 1-128 characters of letters, digits and . _ / -, starting and ending with a letter or digit", k)
		}
		if len(v) > maxLabelValue || strings.ContainsRune(v, 0) {
			return domain.Errorf(domain.CodeInvalidRequest, "label %q: value must be at most %d bytes with no NUL", k, maxLabelValue)
		}
	}
	return nil
}

// ValidateEnvAndSetup checks a create's env (names, sizes, no NUL) and
// setup script.
func ValidateEnvAndSetup(env map[string]string, setup string) error {
	if len(env) > MaxEnv {
		return domain.Errorf(domain.CodeInvalidRequest, "at most %d env variables are allowed", MaxEnv)
	}
	for k, v := range env {
		if !EnvKeyPattern.MatchString(k) {
			return domain.Errorf(domain.CodeInvalidRequest, "env name %q must match [A-Za-z_][A-Za-z0-9_]*", k)
		}
		if len(v) > MaxEnvValue || strings.ContainsRune(v, 0) {
			return domain.Errorf(domain.CodeInvalidRequest, "env %q: value must be at most %d bytes with no NUL", k, MaxEnvValue)
		}
	}
	if len(setup) > maxSetup || strings.ContainsRune(setup, 0) {
		return domain.Errorf(domain.CodeInvalidRequest, "setup must be at most %d bytes with no NUL", maxSetup)
	}
	return nil
}

// SandboxID returns the path's sandbox id, answering malformed ids as not
// found without a query.
func SandboxID(c *gin.Context) (string, error) {
	id := c.Param("id")
	if !domain.ValidID(id) {
		return "", domain.Errorf(domain.CodeNotFound, "sandbox %q not found", id)
	}
	return id, nil
}

// NotFoundAs is err, or for a sandbox that is not found, NOT_FOUND naming id.
func NotFoundAs(err error, id string) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.CodeNotFound, "sandbox %s not found", id)
	}
	return err
}

// ParseWait parses a wait query value (Go duration or seconds), at most maxWait.
func ParseWait(s string, maxWait time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		if n, nerr := strconv.ParseInt(s, 10, 64); nerr == nil {
			if n > int64(maxWait/time.Second) {
				return 0, domain.Errorf(domain.CodeInvalidRequest, "wait must be at most %s", maxWait)
			}
			d, err = time.Duration(n)*time.Second, nil
		}
	}
	if err != nil || d < 0 {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "wait must be a non-negative duration such as 30s")
	}
	if d > maxWait {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "wait must be at most %s", maxWait)
	}
	return d, nil
}

// OnlyQuery refuses query parameters other than the allowed ones, so that a
// misspelt filter is an error rather than silently ignored.
func OnlyQuery(c *gin.Context, allowed ...string) error {
	if c.Request.URL.RawQuery == "" {
		return nil // nothing to parse
	}
	for k := range c.Request.URL.Query() {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return domain.Errorf(domain.CodeInvalidRequest, "unknown query parameter %q", k)
			}
			return domain.Errorf(domain.CodeInvalidRequest, "unknown query parameter %q (allowed: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// ParseLimit is the limit query parameter: a page size, 50 if not given.
func ParseLimit(c *gin.Context) (int, error) {
	s, ok := c.GetQuery("limit")
	if !ok {
		return defaultPageSize, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, domain.Errorf(domain.CodeInvalidRequest, "limit must be an integer between 1 and %d", maxPageSize)
	}
	return n, nil
}

// The range of cursor times: 0001-01-01 to 9999-12-31, in Unix microseconds.
const (
	minCursorMicros = -62135596800 * 1e6
	maxCursorMicros = 253402300799 * 1e6
)

// EncodeCursor makes the opaque next_cursor of a sandbox listing.
func EncodeCursor(cur *domain.Cursor) *string {
	if cur == nil {
		return nil
	}
	s := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d|%s", cur.CreatedAt.UnixMicro(), cur.ID))
	return &s
}

// DecodeCursor decodes a sandbox list's cursor.
func DecodeCursor(s string) (*domain.Cursor, error) { return DecodeCursorOf(s, domain.ValidID) }

// DecodeCursorOf decodes a cursor whose id must be valid (a sandbox's, a
// snapshot's).
func DecodeCursorOf(s string, valid func(string) bool) (*domain.Cursor, error) {
	bad := domain.Errorf(domain.CodeInvalidRequest, "cursor is not valid: pass next_cursor from a previous page unchanged")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok || !valid(id) {
		return nil, bad
	}
	micros, err := strconv.ParseInt(ts, 10, 64)
	// Within years 1-9999: anything else is no cursor Tether made, and
	// Postgres or the driver would choke on it.
	if err != nil || micros < minCursorMicros || micros > maxCursorMicros {
		return nil, bad
	}
	return &domain.Cursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
}
