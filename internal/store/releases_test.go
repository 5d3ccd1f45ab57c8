package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/webhook"
)

// release destroys sb's resources by hand, as the release worker does: it
// claims the release and marks it released.
func (b bundle) release(t *testing.T, sb domain.Sandbox) {
	t.Helper()
	claims, err := b.st.ClaimReleases(b.ctx, "sim", "", "rel", 10, time.Minute, store.Share{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Sandbox.ID == sb.ID {
			if err := b.st.MarkReleased(b.ctx, sb.ID, c.Sandbox.Epoch); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no release claim for %s in %d claims", sb.ID, len(claims))
}

// drain plans, claims and acknowledges deliveries until one plan finds
// nothing more, and returns every event delivered, in order, with the id
// of the delivery that carried it.
func (b bundle) drain(t *testing.T, want int) (events []domain.Event, keys []string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(events) < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d events; want %d", len(events), want)
		}
		if _, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); err != nil {
			t.Fatal(err)
		}
		cs, err := b.st.ClaimWebhookDeliveries(b.ctx, "w", store.ClaimLimits{Max: 10}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: c.Seq, Attempt: c.Attempts, Worker: "w", Delivered: true, Status: 204}); !ok || err != nil {
				t.Fatal(ok, err)
			}
			for _, e := range c.Events {
				events, keys = append(events, e), append(keys, c.ID)
			}
		}
	}
	return events, keys
}

// TestWebhookReleases: a release (released turning true) is delivered
// once, as a sandbox.released event after its sandbox's terminal event,
// whether the release worker marked it or the end of a never-claimed
// sandbox released it in the same statement; the state history is
// unchanged, and a replay from the release's id starts there.
func TestWebhookReleases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.endpoint(t, webhook.Filter{})
	queued := b.create(t)
	ready := b.create(t)
	c := b.claimOne(t, "w1")
	if c.Sandbox.ID != ready.ID {
		queued, ready = ready, queued
	}
	if _, err := b.st.MarkReady(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p-1"}); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []domain.Sandbox{queued, ready} {
		if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	b.release(t, ready)
	// requested, cancelled, release; requested, creating, ready, terminated, release
	events, _ := b.drain(t, 8)
	for _, sb := range []domain.Sandbox{queued, ready} {
		var mine []domain.Event
		for _, e := range events {
			if e.SandboxID == sb.ID {
				mine = append(mine, e)
			}
		}
		got, err := b.st.Sandbox(b.ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := len(mine)
		if n < 2 || mine[n-1].Kind() != domain.EventReleased || !mine[n-2].To.Terminal() || mine[n-2].Kind() != domain.EventStateChanged {
			t.Fatalf("%s delivered %v; want its release last, after its terminal event", sb.ID, mine)
		}
		rel := mine[n-1]
		if rel.To != got.State || rel.From != got.State || rel.Reason != domain.ReasonRequested || got.ReleasedAt == nil || !rel.At.Equal(*got.ReleasedAt) {
			t.Errorf("release %+v; sandbox %s/%s released at %v", rel, got.State, got.Reason, got.ReleasedAt)
		}
		releases := 0
		for _, e := range mine {
			if e.Kind() == domain.EventReleased {
				releases++
			}
		}
		if releases != 1 {
			t.Errorf("%s: %d releases delivered; want 1", sb.ID, releases)
		}
		// The state history has no release.
		for _, e := range b.events(t, sb.ID) {
			if e.ID == rel.ID {
				t.Errorf("the history of %s lists the release %d", sb.ID, e.ID)
			}
		}
		if rel.Actor != map[string]domain.Actor{queued.ID: domain.ActorClient, ready.ID: domain.ActorExecutor}[sb.ID] {
			t.Errorf("release of %s by %s", sb.ID, rel.Actor)
		}
	}
	rels, err := b.st.TenantReleases(b.ctx, "acme", 0, 10)
	if err != nil || len(rels) != 2 {
		t.Fatalf("TenantReleases = %v, %v; want 2", rels, err)
	}
	// Nothing more: a release is recorded once.
	if n, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); err != nil || n != 0 {
		t.Fatalf("planned %d more, %v", n, err)
	}
	key := b.adminKey(t)
	if _, err := b.st.ReplayWebhook(b.ctx, "acme", w.ID, key, webhook.ReplayFrom{EventID: rels[1].ID}); err != nil {
		t.Fatalf("replay from a release: %v", err)
	}
	again, _ := b.drain(t, 1)
	if len(again) != 1 || again[0].ID != rels[1].ID {
		t.Errorf("replay from release %d delivered %v", rels[1].ID, again)
	}
}

// TestWebhookReleaseFilter: the filter's types choose state changes or
// releases, and a release matches states and reasons by its sandbox's
// terminal state and end reason.
func TestWebhookReleaseFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type want struct {
		name   string
		filter webhook.Filter
		kinds  []domain.EventType
	}
	cases := []want{
		{"releases", webhook.Filter{Types: []domain.EventType{domain.EventReleased}}, []domain.EventType{domain.EventReleased, domain.EventReleased}},
		{"state changes", webhook.Filter{Types: []domain.EventType{domain.EventStateChanged}},
			[]domain.EventType{domain.EventStateChanged, domain.EventStateChanged, domain.EventStateChanged, domain.EventStateChanged}},
		{"cancelled", webhook.Filter{States: []domain.State{domain.StateCancelled}},
			[]domain.EventType{domain.EventStateChanged, domain.EventReleased, domain.EventStateChanged, domain.EventReleased}},
		{"expired releases", webhook.Filter{Reasons: []domain.Reason{domain.ReasonExpired}, Types: []domain.EventType{domain.EventReleased}},
			[]domain.EventType{domain.EventReleased}},
	}
	var ws []webhook.Endpoint
	for _, c := range cases {
		ws = append(ws, b.endpoint(t, c.filter))
	}
	a := b.create(t) // cancelled by a client: requested, cancelled, release
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", a.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	x := b.create(t) // expired: requested, cancelled (expired), release
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", x.ID, domain.ReasonExpired, domain.ActorJanitor, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	got := map[string][]domain.Event{}
	collect := func() {
		if _, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); err != nil {
			t.Fatal(err)
		}
		cs, err := b.st.ClaimWebhookDeliveries(b.ctx, "w", store.ClaimLimits{Max: 10}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			got[c.EndpointID] = append(got[c.EndpointID], c.Events...)
			if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: c.Seq, Attempt: c.Attempts, Worker: "w", Delivered: true}); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}
	complete := func() bool {
		for i, c := range cases {
			if len(got[ws[i].ID]) < len(c.kinds) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !complete() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		collect()
	}
	time.Sleep(100 * time.Millisecond)
	collect() // nothing more comes
	for i, c := range cases {
		var kinds []domain.EventType
		for _, e := range got[ws[i].ID] {
			kinds = append(kinds, e.Kind())
			if !c.filter.Match(e) {
				t.Errorf("%s: delivered %+v, which the filter refuses", c.name, e)
			}
		}
		if !slices.Equal(kinds, c.kinds) {
			t.Errorf("%s: delivered %v; want %v", c.name, kinds, c.kinds)
		}
	}
}

// TestReleaseQueueServesFreshEndsFirst: releases whose destroy keeps
// failing (a device the host will not let go) must not hold back the
// release of sandboxes that just ended. A claim takes a sandbox never
// tried before any that failed, however much older those are.
func TestReleaseQueueServesFreshEndsFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var failing []domain.Sandbox
	for range 3 {
		sb := b.create(t)
		c := b.claimOne(t, "w1")
		if _, err := b.st.MarkReady(b.ctx, sb.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
		failing = append(failing, sb)
	}
	// Each fails its destroy once; the retries are due again.
	claims, err := b.st.ClaimReleases(b.ctx, "sim", "", "rel", 10, time.Minute, store.Share{})
	if err != nil || len(claims) != len(failing) {
		t.Fatalf("ClaimReleases = %d, %v; want %d", len(claims), err, len(failing))
	}
	for _, c := range claims {
		if err := b.st.ReleaseFailed(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, b.clock.Now(), "busy"); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Advance(time.Minute)
	fresh := b.create(t)
	c := b.claimOne(t, "w1")
	if _, err := b.st.MarkReady(b.ctx, fresh.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", fresh.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	claims, err = b.st.ClaimReleases(b.ctx, "sim", "", "rel", 1, time.Minute, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("ClaimReleases = %d, %v; want 1", len(claims), err)
	}
	if claims[0].Sandbox.ID != fresh.ID {
		t.Errorf("the release claimed first is %s (%d attempts); want the fresh end %s before the %d retries",
			claims[0].Sandbox.ID, claims[0].Sandbox.ReleaseAttempts, fresh.ID, len(failing))
	}
}
