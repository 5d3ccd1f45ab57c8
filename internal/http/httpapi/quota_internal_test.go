package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
)

// slowUsage is a usage reader whose reads block until released, and
// which counts them.
type slowUsage struct {
	reads   atomic.Int32
	release chan struct{}
	live    int
	fail    atomic.Bool // the next read fails
}

func (u *slowUsage) TenantUsage(ctx context.Context, _ string) (domain.TenantUsage, error) {
	u.reads.Add(1)
	select {
	case <-u.release:
	case <-ctx.Done():
		return domain.TenantUsage{}, ctx.Err()
	}
	if u.fail.CompareAndSwap(true, false) {
		return domain.TenantUsage{}, errors.New("usage read failed")
	}
	return domain.TenantUsage{Live: u.live}, nil
}

func quotaContext(t *testing.T) *gin.Context {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/sandboxes", nil)
	return c
}

// TestQuotaUsageReadOnce: creates that find the tenant's usage stale read
// it once between them, not once each; those that come while it is read
// judge by the last reading, or, with none yet, wait for the read; a
// failed read is the caller's error and the next create reads again.
func TestQuotaUsageReadOnce(t *testing.T) {
	t.Parallel()
	u := &slowUsage{release: make(chan struct{}), live: 2}
	clock := time.Unix(1_000_000, 0)
	q := NewQuotas(u, Config{TenantMaxLive: 20})
	q.now = func() time.Time { return clock }

	// No reading yet: every create waits for the one read.
	const n = 20
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { errs <- q.CheckCreate(quotaContext(t), "a") })
	}
	waitFor(t, func() bool { return u.reads.Load() == 1 })
	time.Sleep(20 * time.Millisecond) // room for a second read, were there one
	close(u.release)
	wg.Wait()
	close(errs)
	admitted := 0
	for err := range errs {
		if err == nil {
			admitted++
		}
	}
	if got := u.reads.Load(); got != 1 {
		t.Errorf("%d creates at once read the usage %d times, want 1", n, got)
	}
	// 2 live + 18 admitted reach the cap of 20.
	if admitted != 18 {
		t.Errorf("%d of %d creates admitted with 2 live and a cap of 20, want 18", admitted, n)
	}

	// Stale, with a reading: one create reads, the others go on meanwhile.
	clock = clock.Add(time.Second)
	u.release = make(chan struct{})
	u.live = 0
	reader := make(chan error, 1)
	go func() { reader <- q.CheckCreate(quotaContext(t), "a") }()
	waitFor(t, func() bool { return u.reads.Load() == 2 })
	if err := q.CheckCreate(quotaContext(t), "a"); err == nil {
		t.Error("a create during the read was admitted past the last reading's cap")
	}
	close(u.release)
	if err := <-reader; err != nil {
		t.Errorf("the reading create: %v, want admitted (0 live)", err)
	}

	// A failed read fails its create; the next one reads again.
	clock = clock.Add(time.Second)
	u.fail.Store(true)
	if err := q.CheckCreate(quotaContext(t), "a"); err == nil {
		t.Error("a create whose usage read failed was admitted")
	}
	if err := q.CheckCreate(quotaContext(t), "a"); err != nil {
		t.Errorf("the create after a failed read: %v", err)
	}
	if got := u.reads.Load(); got != 4 {
		t.Errorf("usage read %d times in all, want 4", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// fixedUsage is a tenant's usage that never changes.
type fixedUsage domain.TenantUsage

func (u fixedUsage) TenantUsage(context.Context, string) (domain.TenantUsage, error) {
	return domain.TenantUsage(u), nil
}

// TestQuotaZeroIsNoLimit: a quota of NoLimit (TENANT_MAX_LIVE=0,
// TENANT_CREATES_PER_MINUTE=0) admits any create, and so does a tenant's
// own 0, whatever the server's; a tenant's own positive quota still holds
// it, and NULL (nil) leaves it the server's.
func TestQuotaZeroIsNoLimit(t *testing.T) {
	t.Parallel()
	zero, two := 0, 2
	for _, tc := range []struct {
		name           string
		cfg            Config
		usage          fixedUsage
		creates, admit int
	}{
		{"the server's NoLimit", Config{TenantMaxLive: NoLimit, TenantCreatesPerMinute: NoLimit}, fixedUsage{Live: 100_000}, 1000, 1000},
		{"the tenant's own 0", Config{TenantMaxLive: 3, TenantCreatesPerMinute: 6}, fixedUsage{Live: 10, MaxLive: &zero, CreatesPerMinute: &zero}, 1000, 1000},
		{"the tenant's own 2", Config{TenantMaxLive: NoLimit, TenantCreatesPerMinute: NoLimit}, fixedUsage{Live: 0, MaxLive: &two}, 10, 2},
		{"the server's, for NULL", Config{TenantMaxLive: 3, TenantCreatesPerMinute: NoLimit}, fixedUsage{Live: 1}, 10, 2},
	} {
		q := NewQuotas(tc.usage, tc.cfg)
		admitted := 0
		for range tc.creates {
			if q.CheckCreate(quotaContext(t), "t") == nil {
				admitted++
			}
		}
		if admitted != tc.admit {
			t.Errorf("%s: %d of %d creates admitted, want %d", tc.name, admitted, tc.creates, tc.admit)
		}
	}
}
