package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// countingWebhookStore counts the worker's rounds and has no work. It is a
// stand-in for the registry because the test is about how often the
// worker asks, which a real store cannot tell apart from its answers.
type countingWebhookStore struct{ plans atomic.Int64 }

func (s *countingWebhookStore) Now() time.Time { return time.Now() }

func (s *countingWebhookStore) PlanWebhookDeliveries(context.Context, int, int, int) (int, error) {
	s.plans.Add(1)
	return 0, nil
}

func (s *countingWebhookStore) ClaimWebhookDeliveries(context.Context, string, store.ClaimLimits, time.Duration) ([]store.DeliveryClaim, error) {
	return nil, nil
}

func (s *countingWebhookStore) RecordWebhookAttempt(context.Context, store.Attempt) (bool, error) {
	return false, nil
}

type chanSource chan domain.Change

func (c chanSource) Subscribe() (<-chan domain.Change, func()) { return c, func() {} }

// TestWebhookWakeUpsCoalesce: a burst of changes is served by a round per
// wakeGap, not a round per change, and a change after a quiet spell still
// wakes the worker at once.
func TestWebhookWakeUpsCoalesce(t *testing.T) {
	st := &countingWebhookStore{}
	changes := make(chanSource, 256)
	w := NewWebhooks(WebhookConfig{PollInterval: time.Hour}, st, changes, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	w.Start(t.Context())
	defer w.Stop(context.Background())

	waitPlans := func(n int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for st.plans.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d rounds after %s, want %d", st.plans.Load(), within, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPlans(1, 5*time.Second) // the first round, at start

	// A change after a quiet spell: a round at once.
	time.Sleep(2 * wakeGap)
	changes <- domain.Change{ID: "sbx_one", State: domain.StateRequested}
	waitPlans(2, 5*time.Second)

	// A burst of 2000 changes over about 200 ms.
	before := st.plans.Load()
	start := time.Now()
	for i := range 2000 {
		changes <- domain.Change{ID: "sbx_burst", State: domain.StateRequested}
		if i%20 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	took := time.Since(start)
	time.Sleep(3 * wakeGap) // the last round
	rounds := st.plans.Load() - before
	if limit := int64(took/wakeGap) + 3; rounds > limit {
		t.Fatalf("a burst of 2000 changes over %s made %d rounds, want at most %d (one per %s)", took, rounds, limit, wakeGap)
	}
	if rounds < 1 {
		t.Fatalf("a burst of 2000 changes made no round")
	}
}
