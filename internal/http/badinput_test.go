package http_test

import (
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

// badInputMaxBody is the body limit of the bad-input server: small, so that
// an oversized body is cheap to send.
const badInputMaxBody = 4096

type badCase struct {
	name   string
	method string
	path   string
	body   any // nil: no body; string: sent as is
	opts   []reqOpt
	status int
	code   string
}

// TestBadInput sends every kind of bad request and checks the exact status
// and code, the problem document, and that nothing at all was written.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, withMaxBody(badInputMaxBody))

	// A real sandbox and idempotency key, so that requests naming them have
	// something they could wrongly change.
	r := b.do(t, http.MethodPost, "/v1/sandboxes", `{"labels":{"seed":"yes"}}`, header("Idempotency-Key", "seed-key"))
	wantStatus(t, r, http.StatusAccepted)
	var seed sandboxJSON
	r.decode(t, &seed)
	unknownID := domain.NewID()

	post := func(name, body string, status int, code string, opts ...reqOpt) badCase {
		return badCase{name: name, method: http.MethodPost, path: "/v1/sandboxes", body: body, opts: opts, status: status, code: code}
	}
	invalid := func(name, body string, opts ...reqOpt) badCase {
		return post(name, body, http.StatusBadRequest, "INVALID_REQUEST", opts...)
	}
	get := func(name, path string, status int, code string, opts ...reqOpt) badCase {
		return badCase{name: name, method: http.MethodGet, path: path, opts: opts, status: status, code: code}
	}
	del := func(name, path string, status int, code string, opts ...reqOpt) badCase {
		return badCase{name: name, method: http.MethodDelete, path: path, opts: opts, status: status, code: code}
	}
	cursor := func(s string) string { return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(s))) }
	oversized := `{"setup":"` + strings.Repeat("x", badInputMaxBody) + `"}`
	manyLabels := make([]string, 65)
	for i := range manyLabels {
		manyLabels[i] = `"k` + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `":"v"`
	}

	cases := []badCase{
		// Bodies that are not one JSON object.
		invalid("malformed JSON", `{"provider":`),
		invalid("unquoted key", `{provider:"sim"}`),
		invalid("single quotes", `{'provider':'sim'}`),
		invalid("trailing garbage", `{"provider":"sim"} x`),
		invalid("duplicate key", `{"ttl_seconds":60,"ttl_seconds":1}`),
		invalid("duplicate nested key", `{"labels":{"team":"a","team":"b"}}`),
		invalid("trailing second object", `{"provider":"sim"}{}`),
		invalid("trailing closing brace", `{"provider":"sim"}}`),
		invalid("trailing closing bracket", `{"provider":"sim"}]`),
		invalid("JSON array", `[{"provider":"sim"}]`),
		invalid("JSON string", `"sim"`),
		invalid("JSON number", `42`),
		invalid("JSON null", `null`),
		invalid("empty body", ``),
		invalid("whitespace body", " \n\t "),
		invalid("empty chunked body", "", chunked()),
		{name: "no body at all", method: http.MethodPost, path: "/v1/sandboxes", status: http.StatusBadRequest, code: "INVALID_REQUEST"},
		// Fields.
		invalid("unknown field", `{"flavor":"large"}`),
		invalid("unknown nested field name", `{"labels":{},"extra":{"a":1}}`),
		invalid("wrong type ttl_seconds string", `{"ttl_seconds":"60"}`),
		invalid("wrong type ttl_seconds fraction", `{"ttl_seconds":1.5}`),
		invalid("wrong type provider", `{"provider":7}`),
		invalid("wrong type labels array", `{"labels":["a"]}`),
		invalid("wrong type label value", `{"labels":{"a":1}}`),
		invalid("wrong type env", `{"env":"X=1"}`),
		invalid("wrong type setup", `{"setup":true}`),
		post("unknown provider", `{"provider":"aws"}`, http.StatusBadRequest, "UNKNOWN_PROVIDER"),
		post("provider case differs", `{"provider":"SIM"}`, http.StatusBadRequest, "UNKNOWN_PROVIDER"),
		invalid("ttl zero", `{"ttl_seconds":0}`),
		invalid("ttl negative", `{"ttl_seconds":-5}`),
		invalid("ttl above max lifetime", `{"ttl_seconds":86401}`),
		invalid("ttl max int64", `{"ttl_seconds":9223372036854775807}`),
		invalid("ttl min int64", `{"ttl_seconds":-9223372036854775808}`),
		invalid("ttl beyond int64", `{"ttl_seconds":99999999999999999999999}`),
		invalid("ttl 1e400", `{"ttl_seconds":1e400}`),
		invalid("label empty key", `{"labels":{"":"x"}}`),
		invalid("label key starts with dash", `{"labels":{"-x":"y"}}`),
		invalid("label key with space", `{"labels":{"a b":"y"}}`),
		invalid("label key too long", `{"labels":{"`+strings.Repeat("k", 129)+`":"y"}}`),
		invalid("label value too long", `{"labels":{"k":"`+strings.Repeat("v", 257)+`"}}`),
		invalid("label value NUL", `{"labels":{"k":"a\u0000b"}}`),
		invalid("too many labels", `{"labels":{`+strings.Join(manyLabels, ",")+`}}`),
		invalid("env name starts with digit", `{"env":{"1X":"v"}}`),
		invalid("env name with dash", `{"env":{"A-B":"v"}}`),
		invalid("env name empty", `{"env":{"":"v"}}`),
		invalid("env value NUL", `{"env":{"A":"\u0000"}}`),
		invalid("setup NUL", `{"setup":"echo \u0000"}`),
		invalid("owner starts with dash", `{"owner":"-agent"}`),
		invalid("owner with space", `{"owner":"agent 1"}`),
		invalid("params array", `{"params":[1]}`),
		invalid("params string", `{"params":"fast"}`),
		invalid("params number", `{"params":3}`),
		invalid("params boolean", `{"params":true}`),
		invalid("unknown sim param", `{"params":{"flavor":"x"}}`),
		invalid("sim param wrong type", `{"params":{"create_delay_ms":"5"}}`),
		invalid("bad fail value", `{"params":{"fail":"sometimes"}}`),
		invalid("negative create delay", `{"params":{"create_delay_ms":-1}}`),
		invalid("create delay above 10 minutes", `{"params":{"create_delay_ms":600001}}`),
		// 18446744073710 ms overflows time.Duration to about 0.45ms.
		invalid("create delay that overflows a duration", `{"params":{"create_delay_ms":18446744073710}}`),
		invalid("destroy delay above 10 minutes", `{"params":{"destroy_delay_ms":600001}}`),
		post("oversized body", oversized, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"),
		post("oversized chunked body", oversized, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", chunked()),
		// Idempotency keys.
		post("idempotency key reused with another body", `{"labels":{"seed":"no"}}`, http.StatusConflict, "IDEMPOTENCY_KEY_REUSED",
			header("Idempotency-Key", "seed-key")),
		// Client-chosen ids.
		invalid("id without prefix", `{"id":"0123456789abcdefghjkmnpqrs"}`),
		invalid("id too short", `{"id":"sbx_0123456789"}`),
		invalid("id with a letter outside the alphabet", `{"id":"sbx_0123456789abcdefghjkmnpqru"}`),
		invalid("id upper case", `{"id":"sbx_0123456789ABCDEFGHJKMNPQRS"}`),
		invalid("id not a string", `{"id":7}`),
		post("id of an existing sandbox", `{"id":"`+seed.ID+`"}`, http.StatusConflict, "SANDBOX_ID_TAKEN"),
		invalid("idempotency key too long", `{}`, header("Idempotency-Key", strings.Repeat("k", 256))),
		invalid("idempotency key not ASCII", `{}`, header("Idempotency-Key", "clé")),
		invalid("idempotency key with tab", `{}`, header("Idempotency-Key", "a\tb")),
		// Authentication.
		post("create without Authorization", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", noAuth()),
		post("create with wrong scheme", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Basic a2V5LWE6")),
		post("create with Token scheme", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Token key-a")),
		post("create with bare Bearer", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Bearer")),
		post("create with unknown key", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Bearer nope")),
		post("create with key of other case", `{}`, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Bearer KEY-A")),
		get("list without Authorization", "/v1/sandboxes", http.StatusUnauthorized, "UNAUTHENTICATED", noAuth()),
		get("get with unknown key", "/v1/sandboxes/"+seed.ID, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Bearer nope")),
		del("delete without Authorization", "/v1/sandboxes/"+seed.ID, http.StatusUnauthorized, "UNAUTHENTICATED", noAuth()),
		del("delete with wrong scheme", "/v1/sandboxes/"+seed.ID, http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Basic a2V5LWE6")),
		get("events without Authorization", "/v1/events", http.StatusUnauthorized, "UNAUTHENTICATED", noAuth()),
		get("providers with unknown key", "/v1/providers", http.StatusUnauthorized, "UNAUTHENTICATED", authHeader("Bearer nope")),
		// Ids.
		get("get malformed id", "/v1/sandboxes/not-an-id", http.StatusNotFound, "NOT_FOUND"),
		get("get id of wrong length", "/v1/sandboxes/sbx_abc", http.StatusNotFound, "NOT_FOUND"),
		get("get id in upper case", "/v1/sandboxes/"+strings.ToUpper(seed.ID), http.StatusNotFound, "NOT_FOUND"),
		get("get id with NUL", "/v1/sandboxes/sbx_%00", http.StatusNotFound, "NOT_FOUND"),
		get("get id with quote", "/v1/sandboxes/%27%3B--", http.StatusNotFound, "NOT_FOUND"),
		get("get unknown id", "/v1/sandboxes/"+unknownID, http.StatusNotFound, "NOT_FOUND"),
		del("delete malformed id", "/v1/sandboxes/not-an-id", http.StatusNotFound, "NOT_FOUND"),
		del("delete unknown id", "/v1/sandboxes/"+unknownID, http.StatusNotFound, "NOT_FOUND"),
		get("events of malformed id", "/v1/sandboxes/not-an-id/events", http.StatusNotFound, "NOT_FOUND"),
		get("events of unknown id", "/v1/sandboxes/"+unknownID+"/events", http.StatusNotFound, "NOT_FOUND"),
		get("get other tenant's sandbox", "/v1/sandboxes/"+seed.ID, http.StatusNotFound, "NOT_FOUND", as(keyB)),
		del("delete other tenant's sandbox", "/v1/sandboxes/"+seed.ID, http.StatusNotFound, "NOT_FOUND", as(keyB)),
		get("events of other tenant's sandbox", "/v1/sandboxes/"+seed.ID+"/events", http.StatusNotFound, "NOT_FOUND", as(keyB)),
		// Listing.
		get("cursor not base64", "/v1/sandboxes?cursor=!!!", http.StatusBadRequest, "INVALID_REQUEST"),
		get("cursor without separator", "/v1/sandboxes?cursor="+cursor("hello"), http.StatusBadRequest, "INVALID_REQUEST"),
		get("cursor with bad id", "/v1/sandboxes?cursor="+cursor("123|notanid"), http.StatusBadRequest, "INVALID_REQUEST"),
		get("cursor with bad time", "/v1/sandboxes?cursor="+cursor("abc|"+unknownID), http.StatusBadRequest, "INVALID_REQUEST"),
		get("cursor empty", "/v1/sandboxes?cursor=", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit 0", "/v1/sandboxes?limit=0", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit 501", "/v1/sandboxes?limit=501", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit abc", "/v1/sandboxes?limit=abc", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit negative", "/v1/sandboxes?limit=-1", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit empty", "/v1/sandboxes?limit=", http.StatusBadRequest, "INVALID_REQUEST"),
		get("limit fraction", "/v1/sandboxes?limit=1.5", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown state", "/v1/sandboxes?state=bogus", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown state in comma list", "/v1/sandboxes?state=ready,bogus", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown state repeated", "/v1/sandboxes?state=ready&state=bogus", http.StatusBadRequest, "INVALID_REQUEST"),
		get("empty state", "/v1/sandboxes?state=", http.StatusBadRequest, "INVALID_REQUEST"),
		get("state in upper case", "/v1/sandboxes?state=READY", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown reason", "/v1/sandboxes?reason=bogus", http.StatusBadRequest, "INVALID_REQUEST"),
		get("an event's reason, not a sandbox's", "/v1/sandboxes?reason=owner_transferred", http.StatusBadRequest, "INVALID_REQUEST"),
		get("empty reason", "/v1/sandboxes?reason=", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown query parameter", "/v1/sandboxes?foo=1", http.StatusBadRequest, "INVALID_REQUEST"),
		get("query parameter on the provider list", "/v1/providers?name=sim", http.StatusBadRequest, "INVALID_REQUEST"),
		get("query parameter on the node list", "/v1/nodes?alive=true", http.StatusBadRequest, "INVALID_REQUEST"),
		get("query parameter of other case", "/v1/sandboxes?State=ready", http.StatusBadRequest, "INVALID_REQUEST"),
		get("created_after not a time", "/v1/sandboxes?created_after=yesterday", http.StatusBadRequest, "INVALID_REQUEST"),
		get("created_after a date only", "/v1/sandboxes?created_after=2026-01-02", http.StatusBadRequest, "INVALID_REQUEST"),
		get("created_before without zone", "/v1/sandboxes?created_before=2026-01-02T15:04:05", http.StatusBadRequest, "INVALID_REQUEST"),
		get("created_before month 13", "/v1/sandboxes?created_before=2026-13-02T15:04:05Z", http.StatusBadRequest, "INVALID_REQUEST"),
		get("released not a boolean", "/v1/sandboxes?released=maybe", http.StatusBadRequest, "INVALID_REQUEST"),
		get("label filter without =", "/v1/sandboxes?label=team", http.StatusBadRequest, "INVALID_REQUEST"),
		get("label filter with empty key", "/v1/sandboxes?label=%3Dv", http.StatusBadRequest, "INVALID_REQUEST"),
		get("label filter with bad key", "/v1/sandboxes?label=-t%3Dv", http.StatusBadRequest, "INVALID_REQUEST"),
		get("label filter contradicting itself", "/v1/sandboxes?label=t%3Da&label=t%3Db", http.StatusBadRequest, "INVALID_REQUEST"),
		get("empty owner filter", "/v1/sandboxes?owner=", http.StatusBadRequest, "INVALID_REQUEST"),
		get("empty provider filter", "/v1/sandboxes?provider=", http.StatusBadRequest, "INVALID_REQUEST"),
		// Waiting.
		get("wait not a duration", "/v1/sandboxes/"+seed.ID+"?wait=abc", http.StatusBadRequest, "INVALID_REQUEST"),
		get("wait negative", "/v1/sandboxes/"+seed.ID+"?wait=-1s", http.StatusBadRequest, "INVALID_REQUEST"),
		get("wait negative seconds", "/v1/sandboxes/"+seed.ID+"?wait=-5", http.StatusBadRequest, "INVALID_REQUEST"),
		get("wait above max", "/v1/sandboxes/"+seed.ID+"?wait=61s", http.StatusBadRequest, "INVALID_REQUEST"),
		get("wait an hour", "/v1/sandboxes/"+seed.ID+"?wait=1h", http.StatusBadRequest, "INVALID_REQUEST"),
		// 18446744074 seconds overflows time.Duration to about 0.29s.
		get("wait seconds that overflow a duration", "/v1/sandboxes/"+seed.ID+"?wait=18446744074", http.StatusBadRequest, "INVALID_REQUEST"),
		get("unknown query parameter on get", "/v1/sandboxes/"+seed.ID+"?verbose=1", http.StatusBadRequest, "INVALID_REQUEST"),
		del("unknown query parameter on delete", "/v1/sandboxes/"+seed.ID+"?force=1", http.StatusBadRequest, "INVALID_REQUEST"),
		// Events.
		get("events limit 0", "/v1/sandboxes/"+seed.ID+"/events?limit=0", http.StatusBadRequest, "INVALID_REQUEST"),
		get("events limit 501", "/v1/sandboxes/"+seed.ID+"/events?limit=501", http.StatusBadRequest, "INVALID_REQUEST"),
		get("events cursor not a number", "/v1/sandboxes/"+seed.ID+"/events?cursor=abc", http.StatusBadRequest, "INVALID_REQUEST"),
		get("events after negative", "/v1/sandboxes/"+seed.ID+"/events?after=-1", http.StatusBadRequest, "INVALID_REQUEST"),
		get("events after and cursor disagree", "/v1/sandboxes/"+seed.ID+"/events?after=1&cursor=2", http.StatusBadRequest, "INVALID_REQUEST"),
		get("events unknown query parameter", "/v1/sandboxes/"+seed.ID+"/events?state=ready", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed after not a number", "/v1/events?after=abc", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed after negative", "/v1/events?after=-1", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed after beyond int64", "/v1/events?after=99999999999999999999", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed limit 501", "/v1/events?limit=501", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed limit abc", "/v1/events?limit=abc", http.StatusBadRequest, "INVALID_REQUEST"),
		get("feed unknown query parameter", "/v1/events?sandbox="+seed.ID, http.StatusBadRequest, "INVALID_REQUEST"),
	}

	// The cases run one after another so that a write is pinned on the case
	// that made it.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := b.counts(t)
			r := b.do(t, tc.method, tc.path, tc.body, tc.opts...)
			wantProblem(t, r, tc.status, tc.code)
			if tc.status == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", r.Header.Get("WWW-Authenticate"))
			}
			if tc.status != http.StatusUnauthorized && r.Header.Get("WWW-Authenticate") != "" {
				t.Errorf("WWW-Authenticate = %q on a %d", r.Header.Get("WWW-Authenticate"), tc.status)
			}
			if after := b.counts(t); !after.equal(before) {
				t.Errorf("bad input wrote rows: before %v, after %v", before, after)
			}
		})
	}

	// The seed is untouched by everything above.
	if got := b.get(t, keyA, seed.ID); got.State != "requested" || got.EndedAt != nil {
		t.Errorf("seed sandbox = %s (ended_at %v), want requested and not ended", got.State, got.EndedAt)
	}

	// The row counts can move: a good create after all that writes exactly
	// one sandbox and one event, so the checks above were able to fail.
	before := b.counts(t)
	b.create(t, keyA, `{"provider":"sim"}`)
	want := maps.Clone(before)
	want["sandboxes"]++
	want["sandbox_events"]++
	if after := b.counts(t); !after.equal(want) {
		t.Errorf("a good create changed counts from %v to %v, want one more sandbox and event", before, after)
	}
}

// TestUnauthenticatedChallenge checks the 401 details: the challenge names
// the Bearer scheme, and an unknown key is reported as an invalid token.
func TestUnauthenticatedChallenge(t *testing.T) {
	t.Parallel()
	b := setup(t)

	r := b.do(t, http.MethodGet, "/v1/sandboxes", nil, noAuth())
	wantProblem(t, r, http.StatusUnauthorized, "UNAUTHENTICATED")
	if got := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
		t.Errorf("missing key: WWW-Authenticate = %q, want a Bearer challenge", got)
	}

	r = b.do(t, http.MethodGet, "/v1/sandboxes", nil, authHeader("Bearer not-a-key"))
	wantProblem(t, r, http.StatusUnauthorized, "UNAUTHENTICATED")
	if got := r.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
		t.Errorf("unknown key: WWW-Authenticate = %q, want error=\"invalid_token\"", got)
	}

	// The scheme is case-insensitive (RFC 9110 section 11.1).
	r = b.do(t, http.MethodGet, "/v1/sandboxes", nil, authHeader("bearer "+keyA))
	wantStatus(t, r, http.StatusOK)
}

// TestBodyLimitBoundary checks that a body of exactly MaxBodyBytes is
// accepted and one byte more is refused.
func TestBodyLimitBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t, withMaxBody(badInputMaxBody))
	body := func(n int) string {
		const head, tail = `{"setup":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	b.create(t, keyA, body(badInputMaxBody))
	for _, opts := range [][]reqOpt{nil, {chunked()}} {
		before := b.counts(t)
		r := b.do(t, http.MethodPost, "/v1/sandboxes", body(badInputMaxBody+1), opts...)
		wantProblem(t, r, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
		if after := b.counts(t); !after.equal(before) {
			t.Errorf("oversized body wrote rows: before %v, after %v", before, after)
		}
	}
}
