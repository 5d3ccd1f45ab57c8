package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/webhook"
)

// adminKey is the id of the operator key setup registered for acme.
func (b bundle) adminKey(t *testing.T) string {
	t.Helper()
	k, err := b.st.RegisterAPIKey(b.ctx, "acme", "test", "key-acme")
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

func (b bundle) endpoint(t *testing.T, f webhook.Filter) webhook.Endpoint {
	t.Helper()
	w, secret, err := b.st.CreateWebhook(b.ctx, webhook.NewEndpoint{Tenant: "acme", URL: "http://127.0.0.1:1/hook", Filter: f, By: b.adminKey(t), Max: 10})
	if err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	if secret == "" || w.State != webhook.StateActive {
		t.Fatalf("created %+v with secret %q", w, secret)
	}
	return w
}

// claimDelivery plans and claims the one due delivery, failing unless
// there is exactly one. It polls: transactions ids are the cluster's, so
// a transaction of another test's database that is still running holds
// the stream back for a moment.
func (b bundle) claimDelivery(t *testing.T, worker string) store.DeliveryClaim {
	t.Helper()
	var claims []store.DeliveryClaim
	for deadline := time.Now().Add(10 * time.Second); len(claims) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); err != nil {
			t.Fatal(err)
		}
		var err error
		if claims, err = b.st.ClaimWebhookDeliveries(b.ctx, worker, store.ClaimLimits{Max: 10}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(claims) != 1 {
		t.Fatalf("claimed %d deliveries; want 1", len(claims))
	}
	return claims[0]
}

// planAll plans until want deliveries were planned in all (see
// claimDelivery for why it polls).
func (b bundle) planAll(t *testing.T, batch, want int) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < want && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n, err := b.st.PlanWebhookDeliveries(b.ctx, 100, batch, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if got != want {
		t.Fatalf("planned %d deliveries; want %d", got, want)
	}
}

func eventIDs(evs []domain.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// TestWebhookRetryResendsTheSameBatch: a failed attempt leaves the cursor
// where it was and the retry carries the same id and the same events, even
// with new events recorded meanwhile; only a 2xx moves the cursor, and the
// next delivery starts after it.
func TestWebhookRetryResendsTheSameBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.endpoint(t, webhook.Filter{})
	sb := b.create(t)
	b.create(t, func(p *domain.CreateParams) { p.Tenant = "other" }) // another tenant's: never delivered

	first := b.claimDelivery(t, "w1")
	if got := eventIDs(first.Events); len(got) != 1 || first.Events[0].SandboxID != sb.ID || first.Attempts != 1 {
		t.Fatalf("first delivery = %+v; want the one event of %s, attempt 1", first.Delivery, sb.ID)
	}
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: first.Seq, Attempt: 1, Worker: "w1", Status: 503, Error: "503", Retry: b.clock.Now()})
	if err != nil || !ok {
		t.Fatalf("record failure: %v %v", ok, err)
	}
	if got, _ := b.st.Webhook(b.ctx, "acme", w.ID); got.Cursor != w.Cursor {
		t.Fatalf("cursor moved on a failure: %+v -> %+v", w.Cursor, got.Cursor)
	}
	retry := b.claimDelivery(t, "w2")
	if retry.ID != first.ID || !slices.Equal(eventIDs(retry.Events), eventIDs(first.Events)) || retry.Attempts != 2 {
		t.Fatalf("retry = %s %v attempt %d; want %s %v attempt 2", retry.ID, eventIDs(retry.Events), retry.Attempts, first.ID, eventIDs(first.Events))
	}
	// The first worker's claim is gone: its late result changes nothing.
	if ok, _ := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: first.Seq, Attempt: 1, Worker: "w1", Delivered: true}); ok {
		t.Fatal("a stale claim's result was recorded")
	}
	if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: retry.Seq, Attempt: 2, Worker: "w2", Delivered: true, Status: 200}); err != nil || !ok {
		t.Fatalf("record delivered: %v %v", ok, err)
	}
	if got, _ := b.st.Webhook(b.ctx, "acme", w.ID); got.Cursor != retry.Last {
		t.Fatalf("cursor = %+v; want the batch's end %+v", got.Cursor, retry.Last)
	}
	next := b.claimDelivery(t, "w1")
	if len(next.Events) != 2 || next.Events[0].To != domain.StateCancelled || next.Events[1].Kind() != domain.EventReleased || next.ID == first.ID {
		t.Fatalf("next delivery = %v; want the cancel and its release (a requested sandbox's end releases it), under a new id", next.Events)
	}
	ds, err := b.st.WebhookDeliveries(b.ctx, w.ID, 0, 10)
	if err != nil || len(ds) != 2 || ds[1].Status != webhook.StatusDelivered || ds[1].Attempts != 2 || ds[1].ResponseStatus != 200 {
		t.Fatalf("history = %+v, %v", ds, err)
	}
}

// TestWebhookClaimsAreExclusive: several stores claiming at once never
// hold one delivery together.
func TestWebhookClaimsAreExclusive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const endpoints = 8
	for range endpoints {
		b.endpoint(t, webhook.Filter{})
	}
	b.create(t)
	b.planAll(t, 10, endpoints)
	stores := []*store.Store{b.st}
	for range 3 {
		stores = append(stores, store.New(b.st.Pool(), store.WithClock(b.clock.Now)))
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	for i, st := range stores {
		for g := range 3 {
			wg.Go(func() {
				for range 5 {
					cs, err := st.ClaimWebhookDeliveries(context.Background(), "worker", store.ClaimLimits{Max: 1}, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, c := range cs {
						claimed[c.ID]++
					}
					mu.Unlock()
				}
				_ = i + g
			})
		}
	}
	wg.Wait()
	if len(claimed) != endpoints {
		t.Errorf("claimed %d distinct deliveries; want %d", len(claimed), endpoints)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("delivery %s claimed %d times under a live lease", id, n)
		}
	}
	// Once the leases lapse, they are claimed again (a worker died).
	b.clock.Advance(2 * time.Minute)
	cs, err := b.st.ClaimWebhookDeliveries(b.ctx, "rescuer", store.ClaimLimits{Max: 100}, time.Minute)
	if err != nil || len(cs) != endpoints {
		t.Errorf("after the leases lapsed: %d claims, %v; want %d", len(cs), err, endpoints)
	}
}

// TestWebhookPlanWaitsForLateCommits: an event whose transaction commits
// after a later event's is not skipped: the plan stops before both until
// the older transaction ends, then delivers them in stream order.
func TestWebhookPlanWaitsForLateCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	early := b.create(t)
	b.endpoint(t, webhook.Filter{})
	tx, err := b.st.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	var lateID int64
	if err := tx.QueryRow(b.ctx, `INSERT INTO sandbox_events (sandbox_id, tenant, to_state, actor, message)
		VALUES ($1, 'acme', 'requested', 'client', 'late') RETURNING id`, early.ID).Scan(&lateID); err != nil {
		t.Fatal(err)
	}
	later := b.create(t) // a higher id, committed first
	// While the older transaction runs, nothing past it is planned. The
	// endpoint's cursor may lie before the early create (see below): a
	// delivery of that alone is fine, and is acknowledged.
	if n, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); err != nil || n > 1 {
		t.Fatalf("planned %d, %v while an older transaction runs; want at most the early create's", n, err)
	} else if n == 1 {
		cs, err := b.st.ClaimWebhookDeliveries(b.ctx, "w", store.ClaimLimits{Max: 10}, time.Minute)
		if err != nil || len(cs) != 1 {
			t.Fatalf("claims %+v, %v; want one", cs, err)
		}
		for _, e := range cs[0].Events {
			if e.SandboxID != early.ID || e.ID == lateID {
				t.Fatalf("planned %+v while an older transaction runs; want only the early create's events", cs[0].Events)
			}
		}
		if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: cs[0].Seq, Attempt: 1, Worker: "w", Delivered: true, Status: 200}); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The endpoint's cursor is the stream's end when it was made, which a
	// transaction still running anywhere on the cluster holds back: the
	// early create may come first. Then the late event, then the later one;
	// another test's transaction on the same cluster may split them over
	// deliveries, so gather them (acknowledging each) until the later
	// create's arrives.
	var got []int64
	var last domain.Event
	for len(got) == 0 || last.SandboxID != later.ID {
		if len(got) > 20 {
			t.Fatalf("20 events and no later create: %v", got)
		}
		c := b.claimDelivery(t, "w")
		for _, e := range c.Events {
			if len(got) == 0 && e.SandboxID == early.ID && e.ID != lateID {
				continue // the early create, before the late event
			}
			got = append(got, e.ID)
			last = e
		}
		if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: c.Seq, Attempt: 1, Worker: "w", Delivered: true, Status: 200}); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if len(got) != 2 || got[0] != lateID {
		t.Fatalf("delivered events %v; want the late one (%d) then %s's create", got, lateID, later.ID)
	}
}

// TestWebhookFilterAndBatches: the filter's refused events are skipped (a
// cursor moves past them without a delivery), and a batch holds at most
// batch events.
func TestWebhookFilterAndBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.endpoint(t, webhook.Filter{States: []domain.State{domain.StateCancelled}, Types: []domain.EventType{domain.EventStateChanged}})
	var sbs []domain.Sandbox
	for range 5 {
		sbs = append(sbs, b.create(t))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, err := b.st.PlanWebhookDeliveries(b.ctx, 10, 2, 1000); err != nil || n != 0 {
			t.Fatalf("planned %d, %v for refused events only; want 0", n, err)
		}
		moved, _ := b.st.Webhook(b.ctx, "acme", w.ID)
		if moved.Cursor.After(w.Cursor) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cursor did not move past refused events: %+v", moved.Cursor)
		}
	}
	for _, sb := range sbs {
		if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 5 {
		b.planAll(t, 2, 1)
		cs, err := b.st.ClaimWebhookDeliveries(b.ctx, "w", store.ClaimLimits{Max: 10}, time.Minute)
		if err != nil || len(cs) != 1 || len(cs[0].Events) > 2 {
			t.Fatalf("claims %+v, %v; want one batch of at most 2", cs, err)
		}
		for _, e := range cs[0].Events {
			if e.To != domain.StateCancelled {
				t.Errorf("delivered a %s event through a cancelled-only filter", e.To)
			}
			got = append(got, e.SandboxID)
		}
		if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: cs[0].Seq, Attempt: 1, Worker: "w", Delivered: true, Status: 204}); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if len(got) != 5 {
		t.Errorf("delivered %d cancels; want 5", len(got))
	}
	for i, sb := range sbs {
		if got[i] != sb.ID {
			t.Errorf("cancel %d delivered for %s; want %s (stream order)", i, got[i], sb.ID)
		}
	}
}

// TestWebhookGiveUpAndReplay: giving up fails the delivery and the
// endpoint; a failing endpoint gets nothing until a replay, which resumes
// at its cursor (or at an event, or a delivery) under new ids.
func TestWebhookGiveUpAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.endpoint(t, webhook.Filter{})
	sb := b.create(t)
	c := b.claimDelivery(t, "w")
	if ok, err := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: c.Seq, Attempt: 1, Worker: "w", Error: "connection refused", GiveUp: true}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	failing, _ := b.st.Webhook(b.ctx, "acme", w.ID)
	if failing.State != webhook.StateFailing || failing.FailingSince == nil {
		t.Fatalf("endpoint after giving up = %+v; want failing", failing)
	}
	b.create(t)
	// Once the stream shows both creates (see claimDelivery), a failing
	// endpoint still gets no delivery.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		evs, err := b.st.StreamEvents(b.ctx, "acme", w.Cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream shows %d events; want 2", len(evs))
		}
	}
	if n, _ := b.st.PlanWebhookDeliveries(b.ctx, 10, 100, 1000); n != 0 {
		t.Fatalf("planned %d for a failing endpoint", n)
	}
	key := b.adminKey(t)
	if _, err := b.st.ReplayWebhook(b.ctx, "other", w.ID, key, webhook.ReplayFrom{}); err == nil {
		t.Fatal("another tenant replayed the endpoint")
	}
	if _, err := b.st.ReplayWebhook(b.ctx, "acme", w.ID, key, webhook.ReplayFrom{EventID: 1 << 40}); domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("replay from an unknown event: %v", err)
	}
	re, err := b.st.ReplayWebhook(b.ctx, "acme", w.ID, key, webhook.ReplayFrom{})
	if err != nil || re.State != webhook.StateActive || re.Cursor != w.Cursor {
		t.Fatalf("replay = %+v, %v; want active at the old cursor", re, err)
	}
	again := b.claimDelivery(t, "w")
	if again.ID == c.ID || len(again.Events) != 2 || again.Events[0].SandboxID != sb.ID {
		t.Fatalf("after replay: %s %v; want a new id with both creates", again.ID, again.Events)
	}
	// A replay from a delivery cancels the pending one and starts at that
	// delivery's first event.
	if _, err := b.st.ReplayWebhook(b.ctx, "acme", w.ID, key, webhook.ReplayFrom{DeliveryID: c.ID}); err != nil {
		t.Fatal(err)
	}
	ds, _ := b.st.WebhookDeliveries(b.ctx, w.ID, 0, 10)
	if len(ds) != 2 || ds[0].Status != webhook.StatusCancelled || ds[1].Status != webhook.StatusFailed {
		t.Fatalf("history = %+v; want cancelled then failed", ds)
	}
	third := b.claimDelivery(t, "w")
	if third.Events[0].ID != c.Events[0].ID {
		t.Fatalf("replay from delivery starts at %d; want %d", third.Events[0].ID, c.Events[0].ID)
	}
	// Deleting the endpoint removes its history; an attempt in flight
	// records nothing.
	if _, err := b.st.DeleteWebhook(b.ctx, "acme", w.ID, key); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.st.RecordWebhookAttempt(b.ctx, store.Attempt{Seq: third.Seq, Attempt: 1, Worker: "w", Delivered: true}); ok {
		t.Error("an attempt of a deleted endpoint was recorded")
	}
	if _, err := b.st.Webhook(b.ctx, "acme", w.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("deleted endpoint: %v", err)
	}
}

// TestWebhookCapAndScope: a key without manage_keys may not create one;
// the tenant's cap holds.
func TestWebhookCapAndScope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.adminKey(t)
	plain, _, err := b.st.MintAPIKey(b.ctx, domain.NewAPIKey{Tenant: "acme", Name: "plain", By: key})
	if err != nil {
		t.Fatal(err)
	}
	ne := webhook.NewEndpoint{Tenant: "acme", URL: "http://127.0.0.1:1/", By: plain.ID, Max: 2}
	if _, _, err := b.st.CreateWebhook(b.ctx, ne); domain.ErrorCode(err) != domain.CodeForbidden {
		t.Fatalf("create without manage_keys: %v", err)
	}
	ne.By = key
	for range 2 {
		if _, _, err := b.st.CreateWebhook(b.ctx, ne); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.st.CreateWebhook(b.ctx, ne); domain.ErrorCode(err) != domain.CodeQuotaExceeded {
		t.Fatalf("create past the cap: %v", err)
	}
	if ws, _ := b.st.Webhooks(b.ctx, "acme"); len(ws) != 2 {
		t.Errorf("%d endpoints; want 2", len(ws))
	}
	if ws, _ := b.st.Webhooks(b.ctx, "other"); len(ws) != 0 {
		t.Errorf("other tenant sees %d endpoints", len(ws))
	}
}

// TestWebhookClaimsShareTheSlots: a claim takes due deliveries in turns
// across tenants, each counted after what the worker holds of it, and
// none of a tenant at its share: a tenant with many due deliveries, older
// than another's, does not take every slot.
func TestWebhookClaimsShareTheSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key, err := b.st.RegisterAPIKey(b.ctx, "other", "test", "key-other")
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		b.endpoint(t, webhook.Filter{})
	}
	if _, _, err := b.st.CreateWebhook(b.ctx, webhook.NewEndpoint{Tenant: "other", URL: "http://127.0.0.1:1/hook", By: key.ID, Max: 10}); err != nil {
		t.Fatal(err)
	}
	b.create(t)
	b.planAll(t, 100, 6)
	b.clock.Advance(time.Second) // acme's deliveries are due first
	b.create(t, func(p *domain.CreateParams) { p.Tenant = "other" })
	b.planAll(t, 100, 1)

	tenants := func(cs []store.DeliveryClaim) map[string]int {
		out := map[string]int{}
		for _, c := range cs {
			out[c.Tenant]++
		}
		return out
	}
	claim := func(worker string, limits store.ClaimLimits) map[string]int {
		t.Helper()
		cs, err := b.st.ClaimWebhookDeliveries(b.ctx, worker, limits, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tenants(cs)
	}
	if got := claim("w1", store.ClaimLimits{Max: 3, PerTenant: 2}); got["acme"] != 2 || got["other"] != 1 {
		t.Errorf("3 slots, 2 a tenant: claimed %v; want acme 2, other 1", got)
	}
	// A tenant at its share gets nothing more; one under it, the rest.
	if got := claim("w2", store.ClaimLimits{Max: 8, PerTenant: 2, Held: map[string]int{"acme": 2}}); len(got) != 0 {
		t.Errorf("acme at its share: claimed %v; want nothing", got)
	}
	if got := claim("w2", store.ClaimLimits{Max: 8, PerTenant: 2, Held: map[string]int{"acme": 1}}); got["acme"] != 1 || len(got) != 1 {
		t.Errorf("acme holding 1 of 2: claimed %v; want acme 1", got)
	}
	if got := claim("w3", store.ClaimLimits{Max: 8}); got["acme"] != 3 {
		t.Errorf("no share: claimed %v; want the 3 acme deliveries left", got)
	}
	if got := claim("w4", store.ClaimLimits{}); len(got) != 0 {
		t.Errorf("no slot: claimed %v", got)
	}
}
