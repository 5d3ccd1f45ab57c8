package httpapi

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// Quota defaults, for zero Config fields.
const (
	DefaultTenantMaxLive          = 1000
	DefaultTenantCreatesPerMinute = 6000
	DefaultKeyRequestsPerSecond   = 200
	// DefaultTenantRequestsPerSecond caps a tenant's requests over all its
	// keys, so that more keys do not mean more throughput.
	DefaultTenantRequestsPerSecond = 1000
	// DefaultAuthFailuresPerSecond caps the requests one client address
	// may make without a valid API key or preview token (missing, unknown
	// or revoked) that cost Tether a lookup or are refused; the burst is
	// four seconds' worth. Valid credentials never count (see authGuard).
	DefaultAuthFailuresPerSecond = 5
)

// NoLimit is the value of Config.TenantMaxLive or
// Config.TenantCreatesPerMinute that lifts that quota (0 there means its
// default): TENANT_MAX_LIVE=0 and TENANT_CREATES_PER_MINUTE=0 set it. A tenant's own quota in the tenants
// table (max_live_sandboxes, creates_per_minute) overrides the server's:
// NULL keeps the server's, 0 lifts it for that tenant.
const NoLimit = -1

// usageTTL is how long a tenant's live count is trusted before it is read
// again; creates admitted meanwhile are counted on top of it.
const usageTTL = 500 * time.Millisecond

// UsageReader is what the quotas read of a tenant's usage.
type UsageReader interface {
	TenantUsage(ctx context.Context, tenant string) (domain.TenantUsage, error)
}

// Quotas judges creates against each tenant's live-sandbox cap and create
// rate, and every request against its key's request rate. The rates are
// token buckets kept per process: with n replicas a tenant may get up to n
// times its rate. The live cap is read from Postgres at most every
// usageTTL, so replicas may together admit a few creates past it.
type Quotas struct {
	usage                          UsageReader
	maxLive, createsPerMinute, rps int
	tenantRPS                      int
	now                            func() time.Time

	mu      sync.Mutex
	tenants map[string]*tenantQuota
	keys    map[string]*bucket // by API key id
}

type tenantQuota struct {
	read     time.Time // when usage was read
	usage    domain.TenantUsage
	admitted int // creates admitted since
	// reading is closed when the usage read in flight lands; nil when
	// none is. One create reads a stale usage while the others judge by
	// the last one: a read counts every live sandbox of the tenant, and
	// 16 clients each reading it at once cost Postgres more than the
	// creates themselves.
	reading  chan struct{}
	creates  bucket
	requests bucket
}

// NewQuotas is the quotas of cfg, over the usage read from usage.
func NewQuotas(usage UsageReader, cfg Config) *Quotas {
	return &Quotas{usage: usage, maxLive: cfg.TenantMaxLive, createsPerMinute: cfg.TenantCreatesPerMinute,
		rps: cfg.KeyRequestsPerSecond, tenantRPS: cfg.TenantRequestsPerSecond,
		now: time.Now, tenants: map[string]*tenantQuota{}, keys: map[string]*bucket{}}
}

// bucket is a token bucket: rate tokens a second, up to burst.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token if there is one; otherwise it says how long until
// there is.
func (b *bucket) take(now time.Time, rate, burst float64) (bool, time.Duration) {
	b.tokens, b.last = b.available(now, rate, burst), now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// refund gives back a token taken, up to burst.
func (b *bucket) refund(burst float64) {
	b.tokens = math.Min(burst, b.tokens+1)
}

// available is how many tokens the bucket holds at now, without taking
// any (a bucket never used is full).
func (b *bucket) available(now time.Time, rate, burst float64) float64 {
	if b.last.IsZero() {
		return burst
	}
	return math.Min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
}

// Exceeded is the 429 of a quota, with when to retry.
func Exceeded(c *gin.Context, wait time.Duration, format string, args ...any) error {
	c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return domain.Errorf(domain.CodeQuotaExceeded, format, args...)
}

// checkKey takes one of the request tokens of the authenticated key keyID
// and one of its tenant's (bursts: two seconds' worth).
func (q *Quotas) checkKey(c *gin.Context, tenant, keyID string) error {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tenantRPS > 0 {
		t := q.tenant(tenant)
		if ok, wait := t.requests.take(now, float64(q.tenantRPS), float64(2*q.tenantRPS)); !ok {
			return Exceeded(c, wait, "tenant %s is over its rate of %d requests a second (over all its API keys)", tenant, q.tenantRPS)
		}
	}
	if q.rps <= 0 {
		return nil
	}
	b := q.keys[keyID]
	if b == nil {
		if len(q.keys) > 100_000 { // bound the memory however many keys there are
			clear(q.keys)
		}
		b = &bucket{}
		q.keys[keyID] = b
	}
	if ok, wait := b.take(now, float64(q.rps), float64(2*q.rps)); !ok {
		return Exceeded(c, wait, "this API key is over its rate of %d requests a second", q.rps)
	}
	return nil
}

// tenant is the tenant's quota record, made if missing. The caller holds
// q.mu.
func (q *Quotas) tenant(name string) *tenantQuota {
	t := q.tenants[name]
	if t == nil {
		t = &tenantQuota{}
		q.tenants[name] = t
	}
	return t
}

// CheckCreate admits a create of the tenant, or says which quota it is over.
func (q *Quotas) CheckCreate(c *gin.Context, tenant string) error {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tenant(tenant)
	if err := q.freshUsage(c.Request.Context(), t, tenant, now); err != nil {
		return err
	}
	maxLive, perMinute := q.maxLive, q.createsPerMinute
	if t.usage.MaxLive != nil {
		maxLive = *t.usage.MaxLive
	}
	if t.usage.CreatesPerMinute != nil {
		perMinute = *t.usage.CreatesPerMinute
	}
	if live := t.usage.Live + t.admitted; maxLive > 0 && live >= maxLive {
		return Exceeded(c, 5*time.Second, "tenant %s has %d live sandboxes, its limit; end some first", tenant, live)
	}
	if perMinute > 0 {
		rate := float64(perMinute) / 60
		if ok, wait := t.creates.take(now, rate, math.Max(1, float64(perMinute)/6)); !ok {
			return Exceeded(c, wait, "tenant %s is over its rate of %d creates a minute", tenant, perMinute)
		}
	}
	t.admitted++
	return nil
}

// freshUsage reads the tenant's usage again if it is older than usageTTL.
// Only one caller at a time reads it; the others judge by the last reading
// meanwhile, or wait for the first one when there is none. The caller holds
// q.mu, which freshUsage releases while it reads or waits.
func (q *Quotas) freshUsage(ctx context.Context, t *tenantQuota, tenant string, now time.Time) error {
	for now.Sub(t.read) > usageTTL {
		if t.reading == nil {
			done := make(chan struct{})
			t.reading = done
			before := t.admitted
			q.mu.Unlock()
			u, err := q.usage.TenantUsage(ctx, tenant)
			q.mu.Lock()
			t.reading = nil
			close(done)
			if err != nil {
				return err
			}
			// Creates admitted while the count ran may be missing from it:
			// they stay counted.
			t.read, t.usage, t.admitted = now, u, t.admitted-before
			return nil
		}
		if !t.read.IsZero() {
			return nil
		}
		wait := t.reading
		q.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			q.mu.Lock()
			return fmt.Errorf("quota: wait for the tenant's usage: %w", ctx.Err())
		}
		q.mu.Lock()
	}
	return nil
}
