package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/tetherhq/tether/clients/go/tether"
	"github.com/tetherhq/tether/docs"
	"github.com/tetherhq/tether/internal/domain"
)

// TestGoClientSession drives a whole session against a live Tether through
// the Go client that oapi-codegen generates from docs/openapi.yaml
// (clients/go/tether): whatever the server sends must decode into the
// generated types, problems included.
func TestGoClientSession(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := goClient(t, e.replica.URL(), key)
	run := fmt.Sprintf("go-client-%d", time.Now().UnixNano())
	owner := "agent-" + run
	labels := map[string]string{"suite": run}

	// Idempotent create: the same request with the same key is the same
	// sandbox; another request with that key is a typed 409 problem.
	create := tether.CreateSandboxRequest{Provider: ptr("sim"), Owner: &owner, Labels: &labels}
	idem := &tether.CreateSandboxParams{IdempotencyKey: ptr("create-" + run)}
	created, err := c.CreateSandboxWithResponse(ctx, idem, create)
	must(t, "create", err, created.StatusCode(), http.StatusAccepted, created.Body)
	sb := *created.JSON202
	if created.Headers202.Location != "/v1/sandboxes/"+sb.Id || created.Headers202.XRequestID == "" {
		t.Errorf("create headers = %+v", created.Headers202)
	}
	if sb.State != tether.SandboxStateRequested || sb.Owner == nil || *sb.Owner != owner || sb.EndedAt != nil || sb.Reason != nil {
		t.Errorf("created sandbox = %+v", sb)
	}
	// The owner's lease: long enough for the session (the server's default
	// here is 3 s).
	lease, err := c.PutOwnerLeaseWithResponse(ctx, owner, tether.TTLRequest{TtlSeconds: 600})
	must(t, "lease", err, lease.StatusCode(), http.StatusOK, lease.Body)
	if lease.JSON200.Owner != owner || time.Until(lease.JSON200.ExpiresAt) < 5*time.Minute {
		t.Errorf("lease = %+v", lease.JSON200)
	}
	again, err := c.CreateSandboxWithResponse(ctx, idem, create)
	must(t, "repeated create", err, again.StatusCode(), http.StatusOK, again.Body)
	if again.JSON200.Id != sb.Id || again.Headers200.Location != created.Headers202.Location {
		t.Errorf("the repeated create made %s, want %s", again.JSON200.Id, sb.Id)
	}
	reused, err := c.CreateSandboxWithResponse(ctx, idem, tether.CreateSandboxRequest{Provider: ptr("sim")})
	must(t, "create with a reused key", err, reused.StatusCode(), http.StatusConflict, reused.Body)
	if p := reused.ApplicationproblemJSON409; p.Code != tether.ProblemCodeIdempotencyKeyReused || p.Status != http.StatusConflict || p.RequestId == nil {
		t.Errorf("reused key problem = %+v", p)
	}

	// Wait for it to settle.
	got, err := c.GetSandboxWithResponse(ctx, sb.Id, &tether.GetSandboxParams{Wait: ptr("30s")})
	must(t, "wait", err, got.StatusCode(), http.StatusOK, got.Body)
	if s := got.JSON200; s.State != tether.SandboxStateReady || s.ReadyAt == nil || s.ProviderId == nil {
		t.Fatalf("after the wait: %+v", s)
	}

	// List with filters, in pages.
	ids := []string{sb.Id}
	for range 2 {
		r, err := c.CreateSandboxWithResponse(ctx, nil, tether.CreateSandboxRequest{Provider: ptr("sim"), Owner: &owner, Labels: &labels})
		must(t, "create", err, r.StatusCode(), http.StatusAccepted, r.Body)
		ids = append(ids, r.JSON202.Id)
	}
	var listed []string
	params := &tether.ListSandboxesParams{Label: &[]string{"suite=" + run}, Owner: &owner, Provider: ptr("sim"), Limit: ptr(2)}
	for page := 0; ; page++ {
		r, err := c.ListSandboxesWithResponse(ctx, params)
		must(t, "list", err, r.StatusCode(), http.StatusOK, r.Body)
		for _, s := range r.JSON200.Items {
			listed = append(listed, s.Id)
		}
		if r.JSON200.NextCursor == nil {
			break
		}
		if page > 3 {
			t.Fatal("the listing does not end")
		}
		params.Cursor = r.JSON200.NextCursor
	}
	slices.Reverse(listed) // newest first
	if !slices.Equal(listed, ids) {
		t.Errorf("listed %v, want %v", listed, ids)
	}
	states := []string{string(tether.SandboxStateCancelled)}
	if r, err := c.ListSandboxesWithResponse(ctx, &tether.ListSandboxesParams{Label: &[]string{"suite=" + run}, State: &states}); err != nil || r.JSON200 == nil || len(r.JSON200.Items) != 0 {
		t.Errorf("list of cancelled = %v %s", err, r.Body)
	}

	// Renew.
	renewed, err := c.RenewSandboxWithResponse(ctx, sb.Id, tether.TTLRequest{TtlSeconds: 900})
	must(t, "renew", err, renewed.StatusCode(), http.StatusOK, renewed.Body)
	if r := renewed.JSON200; r.Id != sb.Id || r.Capped || time.Until(r.ExpiresAt) < 10*time.Minute {
		t.Errorf("renewed = %+v", r)
	}

	// The sandbox's history, a page at a time, by cursor and by after.
	var history []tether.Event
	evParams := &tether.ListSandboxEventsParams{Limit: ptr(1)}
	for range 10 {
		r, err := c.ListSandboxEventsWithResponse(ctx, sb.Id, evParams)
		must(t, "events", err, r.StatusCode(), http.StatusOK, r.Body)
		history = append(history, r.JSON200.Items...)
		if r.JSON200.NextCursor == nil {
			break
		}
		evParams.Cursor = r.JSON200.NextCursor
	}
	var path []tether.SandboxState
	for _, ev := range history {
		path = append(path, ev.To)
	}
	if want := []tether.SandboxState{tether.SandboxStateRequested, tether.SandboxStateCreating, tether.SandboxStateReady}; !slices.Equal(path, want) {
		t.Errorf("history %v, want %v", path, want)
	}
	if len(history) > 0 && (history[0].From != nil || history[0].Actor != tether.EventActorClient) {
		t.Errorf("first event = %+v, want from null, by the client", history[0])
	}
	if len(history) > 1 {
		r, err := c.ListSandboxEventsWithResponse(ctx, sb.Id, &tether.ListSandboxEventsParams{After: &history[0].Id})
		must(t, "events after", err, r.StatusCode(), http.StatusOK, r.Body)
		if len(r.JSON200.Items) != len(history)-1 || r.JSON200.Items[0].Id != history[1].Id {
			t.Errorf("events after %d = %+v", history[0].Id, r.JSON200.Items)
		}
	}

	// The tenant's feed, in pages of 2, holds the whole history.
	var feed []int64
	feedParams := &tether.ListEventsParams{Limit: ptr(2)}
	for range 100 {
		r, err := c.ListEventsWithResponse(ctx, feedParams)
		must(t, "feed", err, r.StatusCode(), http.StatusOK, r.Body)
		for _, ev := range r.JSON200.Items {
			feed = append(feed, ev.Id)
		}
		if r.JSON200.NextCursor == nil {
			break
		}
		feedParams.Cursor = r.JSON200.NextCursor
	}
	for _, ev := range history {
		if !slices.Contains(feed, ev.Id) {
			t.Errorf("the feed lacks event %d", ev.Id)
		}
	}
	if !slices.IsSorted(feed) {
		t.Errorf("the feed is not oldest first: %v", feed)
	}

	// A local sandbox: exec, files, archives.
	local, err := c.CreateSandboxWithResponse(ctx, nil, tether.CreateSandboxRequest{Provider: ptr("local"), Owner: &owner})
	must(t, "create local", err, local.StatusCode(), http.StatusAccepted, local.Body)
	lid := local.JSON202.Id
	ready, err := c.GetSandboxWithResponse(ctx, lid, &tether.GetSandboxParams{Wait: ptr("60s")})
	must(t, "wait local", err, ready.StatusCode(), http.StatusOK, ready.Body)
	if ready.JSON200.State != tether.SandboxStateReady || ready.JSON200.WorkDir == nil {
		t.Fatalf("local sandbox = %+v", ready.JSON200)
	}
	ex, err := c.ExecInSandboxWithResponse(ctx, lid, tether.ExecRequest{Command: `printf 'OPEN_SANDBOX_ALIVE\n'`, TimeoutSeconds: ptr(int64(30))})
	must(t, "exec", err, ex.StatusCode(), http.StatusOK, ex.Body)
	if r := ex.JSON200; r.Output != "OPEN_SANDBOX_ALIVE\n" || r.ExitCode != 0 || r.Truncated || r.TimedOut || r.TimeoutSeconds != 30 {
		t.Errorf("exec = %+v", r)
	}
	content := "print('hello from the Go client')\n"
	put, err := c.PutFileWithBodyWithResponse(ctx, lid, &tether.PutFileParams{Path: "/workspace/hello.py"}, "application/octet-stream", strings.NewReader(content))
	must(t, "put file", err, put.StatusCode(), http.StatusNoContent, put.Body)
	file, err := c.GetFileWithResponse(ctx, lid, &tether.GetFileParams{Path: "/workspace/hello.py"})
	must(t, "get file", err, file.StatusCode(), http.StatusOK, file.Body)
	if string(file.Body) != content {
		t.Errorf("file = %q, want %q", file.Body, content)
	}
	missing, err := c.GetFileWithResponse(ctx, lid, &tether.GetFileParams{Path: "/workspace/nope"})
	must(t, "get a missing file", err, missing.StatusCode(), http.StatusNotFound, missing.Body)
	if missing.ApplicationproblemJSON404.Code != tether.ProblemCodeFileNotFound {
		t.Errorf("missing file problem = %+v", missing.ApplicationproblemJSON404)
	}
	arch, err := c.PutArchiveWithBodyWithResponse(ctx, lid, &tether.PutArchiveParams{Path: "/workspace/pkg"}, "application/x-tar",
		bytes.NewReader(tarOf(t, map[string]string{"a.txt": "A", "sub/b.txt": "B"})))
	must(t, "put archive", err, arch.StatusCode(), http.StatusNoContent, arch.Body)
	back, err := c.GetArchiveWithResponse(ctx, lid, &tether.GetArchiveParams{Path: "/workspace/pkg"})
	must(t, "get archive", err, back.StatusCode(), http.StatusOK, back.Body)
	if files := untar(t, back.Body); files["a.txt"] != "A" || files["sub/b.txt"] != "B" {
		t.Errorf("archive holds %v", files)
	}
	notReady, err := c.ExecInSandboxWithResponse(ctx, sb.Id, tether.ExecRequest{Command: "true"})
	must(t, "exec on sim", err, notReady.StatusCode(), http.StatusNotImplemented, notReady.Body)
	if notReady.ApplicationproblemJSON501.Code != tether.ProblemCodeNotSupported {
		t.Errorf("exec on sim = %+v", notReady.ApplicationproblemJSON501)
	}

	// Delete twice: ended by the first, already ended for the second; then
	// released.
	del, err := c.DeleteSandboxWithResponse(ctx, lid)
	must(t, "delete", err, del.StatusCode(), http.StatusAccepted, del.Body)
	if del.JSON202.State != tether.SandboxStateTerminated || del.JSON202.Reason == nil || *del.JSON202.Reason != tether.SandboxReasonRequested {
		t.Errorf("deleted = %+v", del.JSON202)
	}
	del, err = c.DeleteSandboxWithResponse(ctx, lid)
	must(t, "delete again", err, del.StatusCode(), http.StatusOK, del.Body)
	until := tether.GetSandboxUntilReleased
	rel, err := c.GetSandboxWithResponse(ctx, lid, &tether.GetSandboxParams{Wait: ptr("30s"), Until: &until})
	must(t, "wait for release", err, rel.StatusCode(), http.StatusOK, rel.Body)
	if !rel.JSON200.Released || rel.JSON200.ReleasedAt == nil || rel.JSON200.EndedAt == nil {
		t.Errorf("released = %+v", rel.JSON200)
	}
	conflict, err := c.RenewSandboxWithResponse(ctx, lid, tether.TTLRequest{TtlSeconds: 60})
	must(t, "renew an ended sandbox", err, conflict.StatusCode(), http.StatusConflict, conflict.Body)
	if p := conflict.ApplicationproblemJSON409; p.Code != tether.ProblemCodeSandboxStateConflict || p.State == nil || *p.State != tether.SandboxStateTerminated {
		t.Errorf("renew conflict = %+v", p)
	}

	// The owner is done: its live sandboxes end.
	done, err := c.ReleaseOwnerWithResponse(ctx, owner)
	must(t, "release owner", err, done.StatusCode(), http.StatusAccepted, done.Body)
	if done.JSON202.SandboxesEnded != 3 || len(done.JSON202.SandboxIds) != 3 {
		t.Errorf("owner release = %+v, want the 3 sim sandboxes ended", done.JSON202)
	}

	// Problems: 401 with its challenge, 404, 400.
	anon := goClient(t, e.replica.URL(), "")
	unauth, err := anon.ListSandboxesWithResponse(ctx, nil)
	must(t, "no key", err, unauth.StatusCode(), http.StatusUnauthorized, unauth.Body)
	if unauth.ApplicationproblemJSON401.Code != tether.ProblemCodeUnauthenticated || !strings.HasPrefix(unauth.Headers401.WWWAuthenticate, "Bearer") {
		t.Errorf("401 = %+v %+v", unauth.ApplicationproblemJSON401, unauth.Headers401)
	}
	bad := goClient(t, e.replica.URL(), "not-a-key")
	unauth, err = bad.ListSandboxesWithResponse(ctx, nil)
	must(t, "a bad key", err, unauth.StatusCode(), http.StatusUnauthorized, unauth.Body)
	nf, err := c.GetSandboxWithResponse(ctx, domain.NewID(), nil)
	must(t, "get a missing sandbox", err, nf.StatusCode(), http.StatusNotFound, nf.Body)
	if nf.ApplicationproblemJSON404.Code != tether.ProblemCodeNotFound {
		t.Errorf("404 = %+v", nf.ApplicationproblemJSON404)
	}
	invalid, err := c.ListSandboxesWithResponse(ctx, &tether.ListSandboxesParams{State: &[]string{"sleeping"}})
	must(t, "list a bad state", err, invalid.StatusCode(), http.StatusBadRequest, invalid.Body)
	if invalid.ApplicationproblemJSON400.Code != tether.ProblemCodeInvalidRequest || invalid.ApplicationproblemJSON400.Detail == "" {
		t.Errorf("400 = %+v", invalid.ApplicationproblemJSON400)
	}
	unknown, err := c.CreateSandboxWithResponse(ctx, nil, tether.CreateSandboxRequest{Provider: ptr("nope")})
	must(t, "create with an unknown provider", err, unknown.StatusCode(), http.StatusBadRequest, unknown.Body)
	if unknown.ApplicationproblemJSON400.Code != tether.ProblemCodeUnknownProvider {
		t.Errorf("unknown provider = %+v", unknown.ApplicationproblemJSON400)
	}

	// The public routes.
	providers, err := c.ListProvidersWithResponse(ctx)
	must(t, "providers", err, providers.StatusCode(), http.StatusOK, providers.Body)
	var names []string
	for _, p := range providers.JSON200.Items {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"local", "sim"}) || !providers.JSON200.Items[0].Default {
		t.Errorf("providers = %v", names)
	}
	health, err := anon.ReadyzWithResponse(ctx)
	must(t, "readyz", err, health.StatusCode(), http.StatusOK, health.Body)
	if health.JSON200.Status != tether.HealthStatusOk {
		t.Errorf("readyz = %+v", health.JSON200)
	}
	spec, err := anon.GetOpenAPIJSONWithResponse(ctx)
	must(t, "openapi.json", err, spec.StatusCode(), http.StatusOK, spec.Body)
	if (*spec.JSON200)["openapi"] != "3.0.3" {
		t.Errorf("openapi.json says openapi %v", (*spec.JSON200)["openapi"])
	}
}

// goClient is a generated client that sends key as a bearer token (none if
// key is empty), and checks every response against the OpenAPI document.
func goClient(t *testing.T, url, key string) *tether.ClientWithResponses {
	t.Helper()
	c, err := tether.NewClientWithResponses(url,
		tether.WithHTTPClient(&http.Client{Timeout: 90 * time.Second, Transport: contractChecker(t)}),
		tether.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// must fails the test unless the call worked and answered the status.
func must(t *testing.T, what string, err error, got, want int, body []byte) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s = %d, want %d: %s", what, got, want, body)
	}
}

func ptr[T any](v T) *T { return &v }

// contractChecker is a transport that checks every response against the
// published OpenAPI document (docs/openapi.json): its status, required
// headers and body must be declared for the operation.
func contractChecker(t *testing.T) http.RoundTripper {
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPIJSON)
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = nil // match paths on any host
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    func(context.Context, *openapi3filter.AuthenticationInput) error { return nil },
		IncludeResponseStatus: true,
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return res, err
		}
		body, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil {
			return nil, err
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s is not in the contract: %v", req.Method, req.URL.Path, err)
			return res, nil
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		err = openapi3filter.ValidateResponse(req.Context(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
			Body: io.NopCloser(bytes.NewReader(body)), Options: opts,
		})
		if err != nil {
			t.Errorf("%s %s (%s): the response breaks the contract: %v\n%d %.2000s", req.Method, req.URL.RequestURI(),
				route.Operation.OperationID, err, res.StatusCode, body)
		}
		return res, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func init() {
	// Bodies the validator has no decoder for: an archive is bytes.
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
}

// untar reads a tar archive's regular files.
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(h.Name, "./")] = string(data)
		}
	}
}
