package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// TestCreateGetDeleteRequested follows a sandbox that no executor picks up:
// the create answers at once with state requested, GET returns the same
// sandbox, and DELETE cancels it, released at once, idempotently.
func TestCreateGetDeleteRequested(t *testing.T) {
	t.Parallel()
	b := setup(t)

	r := b.do(t, http.MethodPost, "/v1/sandboxes", `{"labels":{"team":"a"},"ttl_seconds":120,"owner":"agent-1"}`)
	wantStatus(t, r, http.StatusAccepted)
	var sb sandboxJSON
	r.decode(t, &sb)
	if !domain.ValidID(sb.ID) {
		t.Fatalf("id %q is not a sandbox id", sb.ID)
	}
	if got, want := r.Header.Get("Location"), "/v1/sandboxes/"+sb.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if sb.State != "requested" || sb.Provider != "sim" || sb.Released || sb.Reason != nil || sb.Error != nil {
		t.Errorf("created sandbox = %+v, want requested on sim, not released, no reason or error", sb)
	}
	if deref(sb.Owner) != "agent-1" || sb.Labels["team"] != "a" || len(sb.Labels) != 1 {
		t.Errorf("owner, labels = %v, %v; want agent-1, {team: a}", deref(sb.Owner), sb.Labels)
	}
	if sb.ReadyAt != nil || sb.EndedAt != nil || sb.ReleasedAt != nil {
		t.Errorf("ready_at, ended_at, released_at = %v, %v, %v; want all null", sb.ReadyAt, sb.EndedAt, sb.ReleasedAt)
	}
	if got := sb.ExpiresAt.Sub(sb.CreatedAt); got != 120*time.Second {
		t.Errorf("expires_at - created_at = %s, want 2m0s (ttl_seconds)", got)
	}
	if now := time.Now(); sb.CreatedAt.Before(now.Add(-time.Minute)) || sb.CreatedAt.After(now.Add(time.Minute)) {
		t.Errorf("created_at = %s, not near now (%s)", sb.CreatedAt, now)
	}
	// Every field of the contract is present, and times are RFC 3339 UTC.
	var raw map[string]any
	r.decode(t, &raw)
	for _, k := range []string{"id", "state", "provider", "owner", "labels", "reason", "error", "released",
		"created_at", "updated_at", "ready_at", "ended_at", "expires_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("sandbox JSON lacks field %q: %s", k, r.Body)
		}
	}
	for _, k := range []string{"created_at", "updated_at", "expires_at"} {
		s, _ := raw[k].(string)
		if ts, err := time.Parse(time.RFC3339Nano, s); err != nil || !strings.HasSuffix(s, "Z") || ts.IsZero() {
			t.Errorf("%s = %q, want an RFC 3339 UTC time", k, s)
		}
	}

	// GET, both by id and by the Location, returns the same sandbox.
	got := b.get(t, keyA, sb.ID)
	if got.ID != sb.ID || got.State != "requested" || !got.CreatedAt.Equal(sb.CreatedAt) || !got.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Errorf("GET = %+v, want the created sandbox %+v", got, sb)
	}

	// Without an executor, a wait runs to its end and finds it requested.
	start := time.Now()
	waited := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=300ms", nil)
	wantStatus(t, waited, http.StatusOK)
	var w sandboxJSON
	waited.decode(t, &w)
	if elapsed := time.Since(start); w.State != "requested" || elapsed < 300*time.Millisecond {
		t.Errorf("GET ?wait=300ms = %s after %s, want requested after at least 300ms", w.State, elapsed)
	}

	// DELETE cancels it: nothing was created, so it is released at once.
	r = b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	wantStatus(t, r, http.StatusAccepted)
	var del sandboxJSON
	r.decode(t, &del)
	if del.ID != sb.ID || del.State != "cancelled" || deref(del.Reason) != "requested" || !del.Released ||
		del.EndedAt == nil || del.ReleasedAt == nil || del.ReadyAt != nil {
		t.Errorf("DELETE = %s, want cancelled, reason requested, released, ended", r.Body)
	}

	// Repeating it is not an error, and changes nothing.
	before := b.counts(t)
	r = b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	wantStatus(t, r, http.StatusOK)
	var again sandboxJSON
	r.decode(t, &again)
	if again.State != "cancelled" || !again.Released || again.EndedAt == nil || !again.EndedAt.Equal(*del.EndedAt) {
		t.Errorf("second DELETE = %s, want the same cancelled sandbox", r.Body)
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("second DELETE wrote rows: before %v, after %v", before, after)
	}
	if got := b.get(t, keyA, sb.ID); got.State != "cancelled" || !got.Released {
		t.Errorf("GET after DELETE = %s released=%v, want cancelled and released", got.State, got.Released)
	}
	if b.simHas(t, sb.ID) || b.simCreates(t, sb.ID) != 0 {
		t.Errorf("the sim holds or created a resource for a sandbox cancelled before any executor saw it")
	}
}

// TestCreateUsesDefaults checks the defaults of an empty create.
func TestCreateUsesDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, `{}`)
	if sb.Provider != "sim" {
		t.Errorf("provider = %q, want the default provider sim", sb.Provider)
	}
	if got := sb.ExpiresAt.Sub(sb.CreatedAt); got != time.Hour {
		t.Errorf("expires_at - created_at = %s, want the default TTL 1h", got)
	}
	if sb.Owner != nil || sb.Labels == nil || len(sb.Labels) != 0 {
		t.Errorf("owner, labels = %v, %v; want null and {}", deref(sb.Owner), sb.Labels)
	}
	other := b.create(t, keyA, `{"provider":"sim-b","ttl_seconds":86400}`)
	if other.Provider != "sim-b" || other.ExpiresAt.Sub(other.CreatedAt) != testMaxLifetime {
		t.Errorf("sim-b create = %s, ttl %s; want provider sim-b, ttl = max lifetime", other.Provider, other.ExpiresAt.Sub(other.CreatedAt))
	}
	if sb.ID == other.ID {
		t.Errorf("two creates returned the same id %s", sb.ID)
	}
}

// TestSandboxBecomesReadyAndIsReleased follows a sandbox through a real
// executor: requested, ready (via ?wait=), terminated by DELETE, then
// released, with the sim resource made exactly once and then destroyed.
func TestSandboxBecomesReadyAndIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, withExecutor())

	sb := b.create(t, keyA, `{"labels":{"run":"ready"}}`)
	if sb.State != "requested" {
		t.Errorf("create returned state %s, want requested", sb.State)
	}

	r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=10s", nil)
	wantStatus(t, r, http.StatusOK)
	var ready sandboxJSON
	r.decode(t, &ready)
	if ready.State != "ready" || ready.ReadyAt == nil || ready.EndedAt != nil || ready.Released {
		t.Fatalf("GET ?wait=10s = %s, want ready, ready_at set, not ended", r.Body)
	}
	if deref(ready.ProviderID) != "sim-"+sb.ID {
		t.Errorf("provider_id = %v, want sim-%s", deref(ready.ProviderID), sb.ID)
	}
	if !b.simHas(t, sb.ID) {
		t.Errorf("ready sandbox has no sim resource named %s", sb.ID)
	}
	if n := b.simCreates(t, sb.ID); n != 1 {
		t.Errorf("creates.log has %d lines for the sandbox, want 1", n)
	}
	// A wait on a settled sandbox returns at once.
	start := time.Now()
	if got := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=30s", nil); got.Status != http.StatusOK {
		t.Fatalf("GET ?wait=30s on a ready sandbox: %s", got)
	} else if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("GET ?wait=30s on a ready sandbox took %s, want it to return at once", elapsed)
	}

	r = b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	wantStatus(t, r, http.StatusAccepted)
	var term sandboxJSON
	r.decode(t, &term)
	if term.State != "terminated" || deref(term.Reason) != "requested" || term.EndedAt == nil || term.ReadyAt == nil {
		t.Errorf("DELETE of a ready sandbox = %s, want terminated, reason requested", r.Body)
	}
	r = b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	wantStatus(t, r, http.StatusOK)
	var again sandboxJSON
	r.decode(t, &again)
	if again.State != "terminated" {
		t.Errorf("second DELETE = %s, want terminated", again.State)
	}

	var last sandboxJSON
	eventually(t, 15*time.Second, "the terminated sandbox to be released", func() bool {
		last = b.get(t, keyA, sb.ID)
		return last.Released
	})
	if last.State != "terminated" || last.ReleasedAt == nil {
		t.Errorf("released sandbox = %+v, want terminated with released_at", last)
	}
	if b.simHas(t, sb.ID) {
		t.Errorf("the sim still holds %s after it was released", sb.ID)
	}
	if n := b.simCreates(t, sb.ID); n != 1 {
		t.Errorf("creates.log has %d lines for the sandbox, want exactly 1", n)
	}
}

// TestWaitReturnsWhenTheSandboxSettles checks that a waiting GET returns as
// soon as the sandbox settles, not when its wait ends.
func TestWaitReturnsWhenTheSandboxSettles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.create(t, keyA, `{}`)

	type result struct {
		sb      sandboxJSON
		status  int
		elapsed time.Duration
		err     error
	}
	sent := make(chan struct{})
	var sentOnce sync.Once
	done := make(chan result, 1)
	go func() {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { sentOnce.Do(func() { close(sent) }) },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/v1/sandboxes/"+sb.ID+"?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+keyA)
		start := time.Now()
		res, err := b.client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer func() { _ = res.Body.Close() }()
		var out result
		out.status, out.elapsed = res.StatusCode, time.Since(start)
		out.err = json.NewDecoder(res.Body).Decode(&out.sb)
		done <- out
	}()
	<-sent
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil), http.StatusAccepted)
	res := <-done
	if res.err != nil {
		t.Fatalf("waiting GET: %v", res.err)
	}
	if res.status != http.StatusOK || res.sb.State != "cancelled" {
		t.Errorf("waiting GET = %d %s, want 200 cancelled", res.status, res.sb.State)
	}
	if res.elapsed > 10*time.Second {
		t.Errorf("waiting GET returned after %s, want soon after the DELETE (its wait was 30s)", res.elapsed)
	}
}

// TestClientChosenID checks creates that name their sandbox's id: the id is
// the sandbox's, a retry returns it, and a clash is refused without writing.
func TestClientChosenID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := domain.NewID()
	body := `{"id":"` + id + `","provider":"sim","labels":{"a":"1"}}`
	r := b.do(t, http.MethodPost, "/v1/sandboxes", body)
	wantStatus(t, r, http.StatusAccepted)
	var first sandboxJSON
	r.decode(t, &first)
	if first.ID != id || r.Header.Get("Location") != "/v1/sandboxes/"+id {
		t.Fatalf("create with id %s made %s (Location %q)", id, first.ID, r.Header.Get("Location"))
	}
	base := b.counts(t)
	r = b.do(t, http.MethodPost, "/v1/sandboxes", body)
	wantStatus(t, r, http.StatusOK)
	var again sandboxJSON
	r.decode(t, &again)
	if again.ID != id {
		t.Errorf("retry returned %s, want %s", again.ID, id)
	}
	p := wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", `{"id":"`+id+`","provider":"sim"}`), http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
	if !strings.Contains(p.Detail, id) {
		t.Errorf("the 409 detail does not name the id: %q", p.Detail)
	}
	p = wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", body, as(keyB)), http.StatusConflict, "SANDBOX_ID_TAKEN")
	if strings.Contains(p.Detail, "acme") || strings.Contains(p.Detail, "tenant") {
		t.Errorf("the 409 detail says whose the id is: %q", p.Detail)
	}
	wantProblem(t, b.do(t, http.MethodPost, "/v1/sandboxes", body, header("Idempotency-Key", "k-other")), http.StatusConflict, "SANDBOX_ID_TAKEN")
	if after := b.counts(t); !after.equal(base) {
		t.Errorf("refused creates wrote rows: before %v, after %v", base, after)
	}
}

// TestIdempotencyKey checks retries with an Idempotency-Key.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := header("Idempotency-Key", "req-1")
	body := `{"provider":"sim","labels":{"a":"1","b":"2"},"ttl_seconds":600,"env":{"X":"1"},"params":{"create_delay_ms":5,"destroy_delay_ms":6}}`

	r := b.do(t, http.MethodPost, "/v1/sandboxes", body, key)
	wantStatus(t, r, http.StatusAccepted)
	var first sandboxJSON
	r.decode(t, &first)
	base := b.counts(t)

	t.Run("same body", func(t *testing.T) {
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body, key)
		wantStatus(t, r, http.StatusOK)
		var sb sandboxJSON
		r.decode(t, &sb)
		if sb.ID != first.ID || sb.State != "requested" {
			t.Errorf("retry returned %s (%s), want %s", sb.ID, sb.State, first.ID)
		}
		if got := r.Header.Get("Location"); got != "/v1/sandboxes/"+first.ID {
			t.Errorf("retry Location = %q, want /v1/sandboxes/%s", got, first.ID)
		}
	})
	t.Run("same body reformatted and reordered", func(t *testing.T) {
		reordered := "{\n  \"ttl_seconds\": 600,\n  \"env\": {\"X\": \"1\"},\n  \"labels\": {\"b\": \"2\", \"a\": \"1\"},\n" +
			"  \"params\": {\"create_delay_ms\": 5, \"destroy_delay_ms\": 6},\n  \"provider\": \"sim\"\n}\n"
		r := b.do(t, http.MethodPost, "/v1/sandboxes", reordered, key)
		wantStatus(t, r, http.StatusOK)
		var sb sandboxJSON
		r.decode(t, &sb)
		if sb.ID != first.ID {
			t.Errorf("reformatted retry returned %s, want %s", sb.ID, first.ID)
		}
	})
	t.Run("same body with params keys reordered", func(t *testing.T) {
		reordered := `{"provider":"sim","labels":{"a":"1","b":"2"},"ttl_seconds":600,"env":{"X":"1"},"params":{"destroy_delay_ms":6,"create_delay_ms":5}}`
		r := b.do(t, http.MethodPost, "/v1/sandboxes", reordered, key)
		if r.Status != http.StatusOK {
			t.Fatalf("retry with params keys in another order = %s, want 200 and the same sandbox", r)
		}
		var sb sandboxJSON
		r.decode(t, &sb)
		if sb.ID != first.ID {
			t.Errorf("retry with params keys in another order returned %s, want %s", sb.ID, first.ID)
		}
	})
	t.Run("different body", func(t *testing.T) {
		for _, other := range []string{
			`{"provider":"sim","labels":{"a":"1","b":"2"},"ttl_seconds":601,"env":{"X":"1"},"params":{"create_delay_ms":5,"destroy_delay_ms":6}}`,
			`{"provider":"sim","labels":{"a":"1"},"ttl_seconds":600,"env":{"X":"1"},"params":{"create_delay_ms":5,"destroy_delay_ms":6}}`,
			`{"provider":"sim-b","labels":{"a":"1","b":"2"},"ttl_seconds":600,"env":{"X":"1"},"params":{"create_delay_ms":5,"destroy_delay_ms":6}}`,
			`{}`,
		} {
			r := b.do(t, http.MethodPost, "/v1/sandboxes", other, key)
			p := wantProblem(t, r, http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
			if strings.Contains(p.Detail, first.ID) {
				t.Errorf("the 409 detail reveals the other request's sandbox: %q", p.Detail)
			}
		}
	})
	if after := b.counts(t); !after.equal(base) {
		t.Errorf("retries wrote rows: before %v, after %v", base, after)
	}

	t.Run("other tenant", func(t *testing.T) {
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body, key, as(keyB))
		wantStatus(t, r, http.StatusAccepted)
		var sb sandboxJSON
		r.decode(t, &sb)
		if sb.ID == first.ID {
			t.Errorf("tenant B's create with A's key returned A's sandbox %s", sb.ID)
		}
		// And tenant B's retry finds B's sandbox, not A's.
		r = b.do(t, http.MethodPost, "/v1/sandboxes", body, key, as(keyB))
		wantStatus(t, r, http.StatusOK)
		var again sandboxJSON
		r.decode(t, &again)
		if again.ID != sb.ID {
			t.Errorf("tenant B's retry returned %s, want %s", again.ID, sb.ID)
		}
	})
	t.Run("other key", func(t *testing.T) {
		sb := b.create(t, keyA, body) // no key: a new sandbox
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body, header("Idempotency-Key", "req-2"))
		wantStatus(t, r, http.StatusAccepted)
		var keyed sandboxJSON
		r.decode(t, &keyed)
		if sb.ID == first.ID || keyed.ID == first.ID || keyed.ID == sb.ID {
			t.Errorf("ids %s, %s, %s are not all different", first.ID, sb.ID, keyed.ID)
		}
	})
	t.Run("after the sandbox ended", func(t *testing.T) {
		wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+first.ID, nil), http.StatusAccepted)
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body, key)
		wantStatus(t, r, http.StatusOK)
		var sb sandboxJSON
		r.decode(t, &sb)
		if sb.ID != first.ID || sb.State != "cancelled" {
			t.Errorf("retry after DELETE = %s (%s), want %s as it is now (cancelled)", sb.ID, sb.State, first.ID)
		}
	})
	t.Run("longest allowed key", func(t *testing.T) {
		// The error message promises 1-255 printable ASCII characters.
		long := strings.Repeat("k", 255)
		r := b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, header("Idempotency-Key", long))
		wantStatus(t, r, http.StatusAccepted)
		mid := strings.Repeat("m", 100)
		r = b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, header("Idempotency-Key", mid))
		wantStatus(t, r, http.StatusAccepted)
	})
	t.Run("key with spaces", func(t *testing.T) {
		r := b.do(t, http.MethodPost, "/v1/sandboxes", `{}`, header("Idempotency-Key", "retry of job 7"))
		wantStatus(t, r, http.StatusAccepted)
	})
}

// TestIdempotencyKeyConcurrent sends the same keyed create from many
// goroutines at once: exactly one sandbox is made and all get it.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 10
	body := `{"labels":{"job":"concurrent"}}`
	before := b.counts(t)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		got      = map[string]int{}
		start    = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			r := b.do(t, http.MethodPost, "/v1/sandboxes", body, header("Idempotency-Key", "same-key"))
			var sb sandboxJSON
			_ = json.Unmarshal(r.Body, &sb)
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			got[sb.ID]++
		})
	}
	close(start)
	wg.Wait()
	if statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != n-1 {
		t.Errorf("statuses = %v, want one 202 and %d 200s", statuses, n-1)
	}
	if len(got) != 1 {
		t.Errorf("concurrent keyed creates returned %d different sandboxes: %v", len(got), got)
	}
	after := b.counts(t)
	want := maps.Clone(before)
	want["sandboxes"]++
	want["sandbox_events"]++
	want["idempotency_keys"]++
	if !after.equal(want) {
		t.Errorf("counts went from %v to %v, want exactly one more sandbox, event and key", before, after)
	}
}

// TestTenantIsolation checks that a tenant sees nothing of another's.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.create(t, keyA, `{"labels":{"team":"shared"},"owner":"agent"}`)
	bs := b.create(t, keyB, `{"labels":{"team":"shared"},"owner":"agent"}`)

	before := b.counts(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/sandboxes/" + a.ID},
		{http.MethodGet, "/v1/sandboxes/" + a.ID + "?wait=1s"},
		{http.MethodDelete, "/v1/sandboxes/" + a.ID},
		{http.MethodGet, "/v1/sandboxes/" + a.ID + "/events"},
	} {
		r := b.do(t, c.method, c.path, nil, as(keyB))
		p := wantProblem(t, r, http.StatusNotFound, "NOT_FOUND")
		if r.Header.Get("Location") != "" || strings.Contains(p.Detail, "tenant-a") {
			t.Errorf("%s %s as B: the 404 reveals something about A: %s", c.method, c.path, r.Body)
		}
	}
	if after := b.counts(t); !after.equal(before) {
		t.Errorf("B's requests on A's sandbox wrote rows: %v -> %v", before, after)
	}
	if got := b.get(t, keyA, a.ID); got.State != "requested" {
		t.Errorf("A's sandbox is %s after B's DELETE, want requested", got.State)
	}

	for _, q := range []string{"", "label=team%3Dshared", "owner=agent", "state=requested"} {
		if got := ids(b.list(t, keyB, q).Items); !slices.Equal(got, []string{bs.ID}) {
			t.Errorf("B's list ?%s = %v, want only B's %s", q, got, bs.ID)
		}
		if got := ids(b.list(t, keyA, q).Items); !slices.Equal(got, []string{a.ID}) {
			t.Errorf("A's list ?%s = %v, want only A's %s", q, got, a.ID)
		}
	}
	for key, own := range map[string]string{keyA: a.ID, keyB: bs.ID} {
		feed := b.events(t, key, "/v1/events")
		if len(feed.Items) != 1 || feed.Items[0].SandboxID != own {
			t.Errorf("event feed of %s = %+v, want only the event of its own %s", key, feed.Items, own)
		}
	}
	// B's sandbox's events are B's to see.
	if got := b.events(t, keyB, "/v1/sandboxes/"+bs.ID+"/events"); len(got.Items) != 1 {
		t.Errorf("B's sandbox has %d events, want 1", len(got.Items))
	}
}

// TestListFilters checks every list filter against a known set.
func TestListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.create(t, keyA, `{"owner":"alice","labels":{"team":"a","env":"prod"}}`)
	s2 := b.create(t, keyA, `{"owner":"bob","labels":{"team":"a","env":"dev"}}`)
	s3 := b.create(t, keyA, `{"owner":"alice","provider":"sim-b","labels":{"team":"b","env":"prod"}}`)
	s4 := b.create(t, keyA, `{"labels":{"team":"a","env":"prod"}}`)
	s5 := b.create(t, keyA, `{}`)
	b.create(t, keyB, `{"owner":"alice","labels":{"team":"a","env":"prod"}}`)
	wantStatus(t, b.do(t, http.MethodDelete, "/v1/sandboxes/"+s4.ID, nil), http.StatusAccepted)

	ts := func(sb sandboxJSON) string { return url.QueryEscape(sb.CreatedAt.Format(time.RFC3339Nano)) }
	for _, c := range []struct {
		query string
		want  []sandboxJSON
	}{
		{"", []sandboxJSON{s5, s4, s3, s2, s1}},
		{"state=requested", []sandboxJSON{s5, s3, s2, s1}},
		{"state=cancelled", []sandboxJSON{s4}},
		{"state=requested&state=cancelled", []sandboxJSON{s5, s4, s3, s2, s1}},
		{"state=requested,cancelled", []sandboxJSON{s5, s4, s3, s2, s1}},
		{"state=cancelled,terminated&state=failed", []sandboxJSON{s4}},
		{"state=ready", nil},
		{"owner=alice", []sandboxJSON{s3, s1}},
		{"owner=bob", []sandboxJSON{s2}},
		{"owner=carol", nil},
		{"provider=sim-b", []sandboxJSON{s3}},
		{"provider=sim", []sandboxJSON{s5, s4, s2, s1}},
		{"provider=nope", nil},
		{"label=team%3Da", []sandboxJSON{s4, s2, s1}},
		{"label=team%3Da&label=env%3Dprod", []sandboxJSON{s4, s1}},
		{"label=team%3Da&label=env%3Dstaging", nil},
		{"label=env%3Dprod", []sandboxJSON{s4, s3, s1}},
		{"label=team%3D", nil},
		{"created_after=" + ts(s2), []sandboxJSON{s5, s4, s3}},
		{"created_before=" + ts(s4), []sandboxJSON{s3, s2, s1}},
		{"created_after=" + ts(s1) + "&created_before=" + ts(s5), []sandboxJSON{s4, s3, s2}},
		{"created_after=2999-01-01T00:00:00Z", nil},
		{"created_before=2000-01-01T00:00:00Z", nil},
		{"released=true", []sandboxJSON{s4}},
		{"released=false", []sandboxJSON{s5, s3, s2, s1}},
		{"state=requested&owner=alice&label=team%3Db", []sandboxJSON{s3}},
		{"owner=alice&provider=sim", []sandboxJSON{s1}},
		{"reason=requested", []sandboxJSON{s4}},
		{"reason=lost,expired&reason=create_failed", nil},
		{"reason=requested&state=cancelled", []sandboxJSON{s4}},
	} {
		l := b.list(t, keyA, c.query)
		if got, want := ids(l.Items), ids(c.want); !slices.Equal(got, want) {
			t.Errorf("list ?%s = %v, want %v", c.query, got, want)
		}
		if l.Items == nil {
			t.Errorf("list ?%s: items is null, want an array", c.query)
		}
		if l.NextCursor != nil {
			t.Errorf("list ?%s: next_cursor = %q, want null at the end", c.query, *l.NextCursor)
		}
	}

	// next_cursor is present and null at the end, not missing.
	r := b.do(t, http.MethodGet, "/v1/sandboxes?owner=carol", nil)
	var raw map[string]json.RawMessage
	r.decode(t, &raw)
	if string(raw["items"]) != "[]" || string(raw["next_cursor"]) != "null" {
		t.Errorf("empty list = %s, want {\"items\":[],\"next_cursor\":null}", r.Body)
	}
}

// TestListPagination walks a listing page by page while other goroutines
// create sandboxes: every sandbox that existed before the walk appears
// exactly once, nothing appears twice, and the order is newest first
// across pages.
func TestListPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const seeded, limit = 53, 7
	existing := map[string]bool{}
	for range seeded {
		existing[b.create(t, keyA, `{"labels":{"batch":"seed"}}`).ID] = true
	}

	// Default and maximum page sizes.
	if l := b.list(t, keyA, ""); len(l.Items) != 50 || l.NextCursor == nil {
		t.Errorf("default page: %d items, next_cursor %v; want 50 and a cursor", len(l.Items), l.NextCursor)
	}
	if l := b.list(t, keyA, "limit=500"); len(l.Items) != seeded || l.NextCursor != nil {
		t.Errorf("limit=500: %d items, next_cursor %v; want %d and null", len(l.Items), l.NextCursor, seeded)
	}

	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		inserted sync.Map
	)
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := b.do(t, http.MethodPost, "/v1/sandboxes", `{"labels":{"batch":"concurrent"}}`)
				if r.Status != http.StatusAccepted {
					t.Errorf("concurrent create: %s", r)
					return
				}
				var sb sandboxJSON
				r.decode(t, &sb)
				inserted.Store(sb.ID, true)
			}
		})
	}

	seen := map[string]int{}
	var (
		prev  *sandboxJSON
		pages int
		query = fmt.Sprintf("limit=%d", limit)
	)
	for {
		pages++
		if pages > 100 {
			t.Fatalf("pagination did not end after 100 pages")
		}
		l := b.list(t, keyA, query)
		if l.NextCursor != nil && len(l.Items) != limit {
			t.Errorf("page %d has %d items and a next_cursor, want %d", pages, len(l.Items), limit)
		}
		for i := range l.Items {
			sb := l.Items[i]
			seen[sb.ID]++
			if prev != nil && !sb.CreatedAt.Before(prev.CreatedAt) && (!sb.CreatedAt.Equal(prev.CreatedAt) || sb.ID >= prev.ID) {
				t.Errorf("page %d: %s (%s) follows %s (%s), want newest first", pages, sb.ID, sb.CreatedAt, prev.ID, prev.CreatedAt)
			}
			prev = &sb
		}
		// A sandbox made between pages is newer than the cursor.
		b.create(t, keyA, `{"labels":{"batch":"between"}}`)
		if l.NextCursor == nil {
			break
		}
		query = fmt.Sprintf("limit=%d&cursor=%s", limit, url.QueryEscape(*l.NextCursor))
	}
	close(stop)
	wg.Wait()

	for id, n := range seen {
		if n != 1 {
			t.Errorf("sandbox %s appeared %d times in the walk", id, n)
		}
	}
	for id := range existing {
		if seen[id] != 1 {
			t.Errorf("sandbox %s that existed before the walk appeared %d times, want 1", id, seen[id])
		}
	}
	if want := (seeded + limit - 1) / limit; pages < want {
		t.Errorf("walk took %d pages, want at least %d", pages, want)
	}
	n := 0
	inserted.Range(func(any, any) bool { n++; return true })
	t.Logf("walked %d pages; %d sandboxes were created concurrently", pages, n)
}

// TestLongPollEndsWhenDraining: a long-poll answers at once, with the
// sandbox as it is, when the server begins to shut down.
func TestLongPollEndsWhenDraining(t *testing.T) {
	t.Parallel()
	draining, drain := context.WithCancel(context.Background())
	defer drain()
	b := setup(t, withDraining(draining)) // no executor: the sandbox stays requested
	sb := b.create(t, keyA, `{}`)
	type result struct {
		r    *response
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r := b.do(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"?wait=60s", nil, as(keyA))
		done <- result{r, time.Since(start)}
	}()
	drain() // before or while the long-poll waits: either way it must answer at once
	select {
	case res := <-done:
		wantStatus(t, res.r, http.StatusOK)
		var got sandboxJSON
		res.r.decode(t, &got)
		if got.State != "requested" || res.took > 5*time.Second {
			t.Errorf("long-poll answered %s after %s; want requested, at once", got.State, res.took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not end when the server began draining")
	}
}
