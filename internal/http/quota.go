package http

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/sandbox"
)

// Quota defaults, for zero Config fields.
const (
	DefaultTenantMaxLive          = 1000
	DefaultTenantCreatesPerMinute = 6000
	DefaultKeyRequestsPerSecond   = 200
)

// usageTTL is how long a tenant's live count is trusted before it is read
// again; creates admitted meanwhile are counted on top of it.
const usageTTL = 500 * time.Millisecond

type usageReader interface {
	TenantUsage(ctx context.Context, tenant string) (sandbox.TenantUsage, error)
}

// quotas judges creates against each tenant's live-sandbox cap and create
// rate, and every request against its key's request rate. The rates are
// token buckets kept per process: with n replicas a tenant may get up to n
// times its rate. The live cap is read from Postgres at most every
// usageTTL, so replicas may together admit a few creates past it.
type quotas struct {
	usage                          usageReader
	maxLive, createsPerMinute, rps int
	now                            func() time.Time

	mu      sync.Mutex
	tenants map[string]*tenantQuota
	keys    map[string]*bucket // by API key id
}

type tenantQuota struct {
	read     time.Time // when usage was read
	usage    sandbox.TenantUsage
	admitted int // creates admitted since
	creates  bucket
}

func newQuotas(usage usageReader, cfg Config) *quotas {
	return &quotas{usage: usage, maxLive: cfg.TenantMaxLive, createsPerMinute: cfg.TenantCreatesPerMinute,
		rps: cfg.KeyRequestsPerSecond, now: time.Now, tenants: map[string]*tenantQuota{}, keys: map[string]*bucket{}}
}

// bucket is a token bucket: rate tokens a second, up to burst.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token if there is one; otherwise it says how long until
// there is.
func (b *bucket) take(now time.Time, rate, burst float64) (bool, time.Duration) {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = math.Min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// exceeded is the 429 of a quota, with when to retry.
func exceeded(c *gin.Context, wait time.Duration, format string, args ...any) error {
	c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return sandbox.Errorf(sandbox.CodeQuotaExceeded, format, args...)
}

// checkKey takes one of the request tokens of the authenticated key
// keyID (burst: two seconds' worth).
func (q *quotas) checkKey(c *gin.Context, keyID string) error {
	if q.rps <= 0 {
		return nil
	}
	q.mu.Lock()
	b := q.keys[keyID]
	if b == nil {
		if len(q.keys) > 100_000 { // bound the memory however many keys there are
			clear(q.keys)
		}
		b = &bucket{}
		q.keys[keyID] = b
	}
	ok, wait := b.take(q.now(), float64(q.rps), float64(2*q.rps))
	q.mu.Unlock()
	if !ok {
		return exceeded(c, wait, "this API key is over its rate of %d requests a second", q.rps)
	}
	return nil
}

// checkCreate admits a create of the tenant, or says which quota it is over.
func (q *quotas) checkCreate(c *gin.Context, tenant string) error {
	now := q.now()
	q.mu.Lock()
	t := q.tenants[tenant]
	if t == nil {
		t = &tenantQuota{}
		q.tenants[tenant] = t
	}
	stale := now.Sub(t.read) > usageTTL
	q.mu.Unlock()
	if stale {
		u, err := q.usage.TenantUsage(c.Request.Context(), tenant)
		if err != nil {
			return err
		}
		q.mu.Lock()
		t.read, t.usage, t.admitted = now, u, 0
		q.mu.Unlock()
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	maxLive, perMinute := q.maxLive, q.createsPerMinute
	if t.usage.MaxLive != nil {
		maxLive = *t.usage.MaxLive
	}
	if t.usage.CreatesPerMinute != nil {
		perMinute = *t.usage.CreatesPerMinute
	}
	if live := t.usage.Live + t.admitted; maxLive > 0 && live >= maxLive {
		return exceeded(c, 5*time.Second, "tenant %s has %d live sandboxes, its limit; end some first", tenant, live)
	}
	if perMinute > 0 {
		rate := float64(perMinute) / 60
		if ok, wait := t.creates.take(now, rate, math.Max(1, float64(perMinute)/6)); !ok {
			return exceeded(c, wait, "tenant %s is over its rate of %d creates a minute", tenant, perMinute)
		}
	}
	t.admitted++
	return nil
}

// withCreateQuota refuses a create over the tenant's quotas with 429
// QUOTA_EXCEEDED and Retry-After, before anything is written.
func withCreateQuota(log errorWriter, q *quotas) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := q.checkCreate(c, tenantOf(c)); err != nil {
			log(c, err)
			return
		}
		c.Next()
	}
}

// errorWriter renders an error as a problem and aborts the request.
type errorWriter func(c *gin.Context, err error)
