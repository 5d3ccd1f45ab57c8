package http_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

type wantEvent struct {
	from, to, reason, actor string // "" for null
}

func eventKey(e eventJSON) wantEvent {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return wantEvent{from: s(e.From), to: e.To, reason: s(e.Reason), actor: e.Actor}
}

func eventIDs(items []eventJSON) []int64 {
	out := make([]int64, len(items))
	for i, e := range items {
		out[i] = e.ID
	}
	return out
}

// TestSandboxEvents checks a sandbox's history after create, ready and
// delete, and its pagination.
func TestSandboxEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())
	sb := b.create(t, keyA, `{}`)
	if r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=10s", nil); r.Status != http.StatusOK {
		t.Fatalf("wait: %s", r)
	} else {
		var got sandboxJSON
		r.decode(t, &got)
		if got.State != "ready" {
			t.Fatalf("sandbox is %s after ?wait=10s, want ready", got.State)
		}
	}
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil), http.StatusAccepted)
	eventually(t, 15*time.Second, "the sandbox to be released", func() bool { return b.get(t, keyA, sb.ID).Released })
	end := time.Now()

	path := "/v1/sandboxes/" + sb.ID + "/events"
	all := b.events(t, keyA, path)
	want := []wantEvent{
		{from: "", to: "requested", reason: "requested", actor: "client"},
		{from: "requested", to: "creating", reason: "", actor: "executor"},
		{from: "creating", to: "ready", reason: "", actor: "executor"},
		{from: "ready", to: "terminated", reason: "requested", actor: "client"},
	}
	got := make([]wantEvent, len(all.Items))
	for i, e := range all.Items {
		got[i] = eventKey(e)
		if e.SandboxID != sb.ID {
			t.Errorf("event %d is of sandbox %s, want %s", e.ID, e.SandboxID, sb.ID)
		}
		if e.At.Before(sb.CreatedAt) || e.At.After(end) {
			t.Errorf("event %d at %s, outside the sandbox's life [%s, %s]", e.ID, e.At, sb.CreatedAt, end)
		}
		if i > 0 && (e.ID <= all.Items[i-1].ID || e.At.Before(all.Items[i-1].At)) {
			t.Errorf("event %d (%s) follows %d (%s): want oldest first", e.ID, e.At, all.Items[i-1].ID, all.Items[i-1].At)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
	if all.NextCursor != nil {
		t.Errorf("next_cursor = %q with all events on one page, want null", *all.NextCursor)
	}
	allIDs := eventIDs(all.Items)

	// Page by page, with next_cursor, in pages of 1 and of 3.
	for _, limit := range []int{1, 3} {
		var walked []int64
		q := fmt.Sprintf("?limit=%d", limit)
		for pages := 1; ; pages++ {
			if pages > 10 {
				t.Fatalf("limit=%d: pagination did not end", limit)
			}
			page := b.events(t, keyA, path+q)
			if len(page.Items) > limit {
				t.Fatalf("limit=%d: page of %d events", limit, len(page.Items))
			}
			walked = append(walked, eventIDs(page.Items)...)
			if page.NextCursor == nil {
				break
			}
			if want := fmt.Sprint(page.Items[len(page.Items)-1].ID); *page.NextCursor != want {
				t.Errorf("limit=%d: next_cursor = %q, want the last event id %s", limit, *page.NextCursor, want)
			}
			q = fmt.Sprintf("?limit=%d&cursor=%s", limit, url.QueryEscape(*page.NextCursor))
		}
		if !slices.Equal(walked, allIDs) {
			t.Errorf("limit=%d: pages gave %v, want %v", limit, walked, allIDs)
		}
	}
	first := b.events(t, keyA, path+"?limit=3")
	if len(first.Items) != 3 || first.NextCursor == nil {
		t.Errorf("limit=3: %d events, next_cursor %v; want 3 and a cursor", len(first.Items), first.NextCursor)
	}

	// after is the same position as cursor.
	after := b.events(t, keyA, fmt.Sprintf("%s?after=%d", path, allIDs[1]))
	if !slices.Equal(eventIDs(after.Items), allIDs[2:]) {
		t.Errorf("?after=%d = %v, want %v", allIDs[1], eventIDs(after.Items), allIDs[2:])
	}
	if end := b.events(t, keyA, fmt.Sprintf("%s?after=%d", path, allIDs[3])); len(end.Items) != 0 || end.NextCursor != nil {
		t.Errorf("after the last event: %+v, want no events and a null cursor", end)
	}
}

// TestEventFeed checks the tenant's event feed: only its own events, oldest
// first, and after returns only later events.
func TestEventFeed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.create(t, keyA, `{}`)
	s2 := b.create(t, keyA, `{}`)
	s3 := b.create(t, keyB, `{}`)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+s1.ID, nil), http.StatusAccepted)

	feed := b.events(t, keyA, "/v1/events")
	type entry struct {
		sandbox string
		ev      wantEvent
	}
	var got []entry
	for _, e := range feed.Items {
		got = append(got, entry{e.SandboxID, eventKey(e)})
	}
	want := []entry{
		{s1.ID, wantEvent{to: "requested", reason: "requested", actor: "client"}},
		{s2.ID, wantEvent{to: "requested", reason: "requested", actor: "client"}},
		{s1.ID, wantEvent{from: "requested", to: "cancelled", reason: "requested", actor: "client"}},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("A's feed = %+v, want %+v", got, want)
	}
	if feed.NextCursor != nil {
		t.Errorf("A's feed next_cursor = %q, want null", *feed.NextCursor)
	}
	ids := eventIDs(feed.Items)
	if !slices.IsSorted(ids) {
		t.Errorf("feed ids %v are not ascending", ids)
	}

	if later := b.events(t, keyA, fmt.Sprintf("/v1/events?after=%d", ids[0])); !slices.Equal(eventIDs(later.Items), ids[1:]) {
		t.Errorf("?after=%d = %v, want %v", ids[0], eventIDs(later.Items), ids[1:])
	}
	if none := b.events(t, keyA, fmt.Sprintf("/v1/events?after=%d", ids[2])); len(none.Items) != 0 || none.NextCursor != nil {
		t.Errorf("after the last event: %+v, want nothing and a null cursor", none)
	}
	if none := b.events(t, keyA, "/v1/events?after=9223372036854775807"); len(none.Items) != 0 {
		t.Errorf("after the largest id: %+v, want nothing", none)
	}

	page := b.events(t, keyA, "/v1/events?limit=2")
	if !slices.Equal(eventIDs(page.Items), ids[:2]) || page.NextCursor == nil || *page.NextCursor != fmt.Sprint(ids[1]) {
		t.Fatalf("?limit=2 = %v cursor %v, want %v and cursor %d", eventIDs(page.Items), page.NextCursor, ids[:2], ids[1])
	}
	rest := b.events(t, keyA, "/v1/events?limit=2&cursor="+*page.NextCursor)
	if !slices.Equal(eventIDs(rest.Items), ids[2:]) || rest.NextCursor != nil {
		t.Errorf("second page = %v cursor %v, want %v and null", eventIDs(rest.Items), rest.NextCursor, ids[2:])
	}

	bFeed := b.events(t, keyB, "/v1/events")
	if len(bFeed.Items) != 1 || bFeed.Items[0].SandboxID != s3.ID {
		t.Errorf("B's feed = %+v, want only the request of %s", bFeed.Items, s3.ID)
	}
	// B's after= cannot reach A's events either.
	if bLater := b.events(t, keyB, "/v1/events?after=0"); len(bLater.Items) != 1 {
		t.Errorf("B's feed after 0 = %+v, want its one event", bLater.Items)
	}
}

// TestReconcileEvents: the tenant reads what reconciliation found among its
// own sandboxes, paged; another tenant's and unattributed findings are not
// shown.
func TestReconcileEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	a1, a2, other := b.create(t, keyA, `{}`), b.create(t, keyA, `{}`), b.create(t, keyB, `{}`)
	for _, f := range []struct{ id, tenant, action string }{
		{a1.ID, tenantA, "orphan_destroyed"}, {other.ID, tenantB, "lost"},
		{"sbx_00000000000000000000000000", "", "orphan_destroyed"}, {a2.ID, tenantA, "lost"},
	} {
		if err := b.Store.RecordReconcile(ctx, "sim", f.id, f.tenant, f.action, "found"); err != nil {
			t.Fatal(err)
		}
	}
	var page struct {
		Items []struct {
			SandboxID string `json:"sandbox_id"`
			Action    string `json:"action"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	r := b.do(t, http.MethodGet, "/v1/reconcile-events?limit=1", nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &page)
	if len(page.Items) != 1 || page.Items[0].SandboxID != a1.ID || page.NextCursor == nil {
		t.Fatalf("first page = %+v", page)
	}
	r = b.do(t, http.MethodGet, "/v1/reconcile-events?cursor="+*page.NextCursor, nil, as(keyA))
	wantStatus(t, r, http.StatusOK)
	r.decode(t, &page)
	if len(page.Items) != 1 || page.Items[0].SandboxID != a2.ID || page.Items[0].Action != "lost" {
		t.Errorf("second page = %+v, want only tenant A's other finding", page)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/reconcile-events?after=x", nil, as(keyA)), http.StatusBadRequest, "INVALID_REQUEST")
}
