package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
)

const route = "/v1/sandboxes/:id/exec"

// nodes is a registry and the cluster ends of node a and of two replicas
// of node b, which share their nonces through Postgres.
type nodes struct {
	st     *store.Store
	secret []byte
	a      *Cluster
	b, b2  *Cluster
}

func newNodes(t *testing.T) nodes {
	t.Helper()
	st := storetest.New(t)
	secret, err := st.ClusterSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := nodes{st: st, secret: secret}
	n.a = n.node("a", time.Now)
	n.b, n.b2 = n.node("b", time.Now), n.node("b", time.Now)
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		n.b.Accept(method, route)
		n.b2.Accept(method, route)
	}
	return n
}

// node is node id's end, with its clock.
func (n nodes) node(id string, now func() time.Time) *Cluster {
	return New(Nodes{Self: id, Secret: n.secret, Finder: n.st, Nonces: n.st, Now: now})
}

var caller = Caller{Tenant: "tenant-a", Key: domain.Caller{KeyID: "key_1", KeyName: "ci"}}

// signed is an exec call from signer to node b, with body (nil: none).
func signed(t *testing.T, signer *Cluster, to string, body []byte) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://b/v1/sandboxes/sbx_1/exec?x=1", rd)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer secret-key")
	signer.Sign(r, to, caller)
	return r
}

// arrived is the call r as a node receives it: its body read through (which
// sets the trailer) and given again.
func arrived(t *testing.T, r *http.Request) *http.Request {
	t.Helper()
	if r.Body == nil {
		return r
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return r
}

// TestSignAndVerify: a call signed by node a for node b is taken by b, as
// the caller it carries, without the API key; any change to what the
// signature covers, another node, an old or future time, another route and
// a second delivery are each refused for their own reason.
func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	r := arrived(t, signed(t, n.a, "b", []byte(`{"command":"id"}`)))
	if r.Header.Get("Authorization") != "" {
		t.Error("a signed call carries the API key")
	}
	got, err := n.b.Verify(r, route, nil)
	if err != nil || got != caller {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, caller)
	}
	if body, err := io.ReadAll(r.Body); err != nil || string(body) != `{"command":"id"}` {
		t.Fatalf("the verified body reads %q, %v", body, err)
	}

	tamper := func(f func(r *http.Request)) *http.Request {
		r := arrived(t, signed(t, n.a, "b", nil))
		f(r)
		return r
	}
	other := New(Nodes{Self: "a", Secret: []byte("another secret, of another cluster"), Finder: n.st})
	for name, tc := range map[string]struct {
		r    *http.Request
		want error
	}{
		"another secret": {arrived(t, signed(t, other, "b", nil)), errSig},
		"another tenant": {tamper(func(r *http.Request) { r.Header.Set(hdrTenant, "tenant-b") }), errSig},
		"another key":    {tamper(func(r *http.Request) { r.Header.Set(hdrKeyID, "key_2") }), errSig},
		"another path":   {tamper(func(r *http.Request) { r.URL.RawQuery = "x=2" }), errSig},
		"another method": {tamper(func(r *http.Request) { r.Method = http.MethodPut }), errSig},
		"another body":   {tamper(func(r *http.Request) { r.Header.Set(hdrBody, bodyTrailer) }), errSig},
		"no signature":   {tamper(func(r *http.Request) { r.Header.Set(hdrSig, "zz") }), errSig},
		"another node":   {arrived(t, signed(t, n.a, "c", nil)), errTo},
		"stale":          {arrived(t, signed(t, n.node("a", func() time.Time { return time.Now().Add(-skew - time.Second) }), "b", nil)), errStale},
		"future":         {arrived(t, signed(t, n.node("a", func() time.Time { return time.Now().Add(skew + time.Second) }), "b", nil)), errStale},
	} {
		if _, err := n.b.Verify(tc.r, route, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v; want %v", name, err, tc.want)
		}
	}
	if _, err := n.b.Verify(arrived(t, signed(t, n.a, "b", nil)), "/v1/keys", nil); !errors.Is(err, errRoute) {
		t.Errorf("a route not accepted: Verify = %v; want %v", err, errRoute)
	}
	var none *Cluster
	if _, err := none.Verify(arrived(t, signed(t, n.a, "b", nil)), route, nil); !errors.Is(err, errRoute) {
		t.Errorf("no cluster: Verify = %v; want %v", err, errRoute)
	}
	// A nonce is the signer's to choose, but a short one is refused.
	short := tamper(func(r *http.Request) {
		r.Header.Set(hdrNonce, "short")
		r.Header.Set(hdrSig, n.a.sign(signedFields(r)...))
	})
	if _, err := n.b.Verify(short, route, nil); !errors.Is(err, errSig) {
		t.Errorf("a short nonce: Verify = %v; want %v", err, errSig)
	}
}

// TestReplayRefusedByEveryReplica: a call is taken once by all the
// replicas of its node (the nonces are in Postgres), and once by a node
// that keeps them in its memory.
func TestReplayRefusedByEveryReplica(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	r := arrived(t, signed(t, n.a, "b", nil))
	if _, err := n.b.Verify(r, route, nil); err != nil {
		t.Fatal(err)
	}
	for _, replica := range []*Cluster{n.b, n.b2} {
		again := r.Clone(t.Context())
		if _, err := replica.Verify(again, route, nil); !errors.Is(err, errSeen) {
			t.Errorf("the replay: Verify = %v; want %v", err, errSeen)
		}
	}
	alone := New(Nodes{Self: "b", Secret: n.secret, Finder: n.st})
	alone.Accept(http.MethodPost, route)
	r = arrived(t, signed(t, n.a, "b", nil))
	if _, err := alone.Verify(r, route, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alone.Verify(r.Clone(t.Context()), route, nil); !errors.Is(err, errSeen) {
		t.Errorf("the replay to a node without Nonces: Verify = %v; want %v", err, errSeen)
	}
}

// TestBodyIsTheOneSigned: a verified body's end is an error, told to the
// caller's hook, unless it is the body the digest trailer covers; a call
// signed without a body fails at its first byte.
func TestBodyIsTheOneSigned(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	for name, tc := range map[string]struct {
		signed, sent []byte
		trailer      bool // keep the digest trailer
	}{
		"another body":   {[]byte(`{"command":"id"}`), []byte(`{"command":"rm -rf /"}`), true},
		"a longer body":  {[]byte(`{"command":"id"}`), []byte(`{"command":"id"}   `), true},
		"no trailer":     {[]byte(`{"command":"id"}`), []byte(`{"command":"id"}`), false},
		"signed without": {nil, []byte(`{"command":"rm -rf /"}`), false},
	} {
		r := arrived(t, signed(t, n.a, "b", tc.signed))
		r.Body = io.NopCloser(bytes.NewReader(tc.sent))
		if !tc.trailer {
			r.Trailer = nil
		}
		var told error
		if _, err := n.b.Verify(r, route, func(err error) { told = err }); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(r.Body)
		if domain.ErrorCode(err) != domain.CodeUnauthenticated || told == nil {
			t.Errorf("%s: the body read %q, %v (told %v); want UNAUTHENTICATED, told", name, got, err, told)
		}
		if tc.signed == nil && len(got) > 0 {
			t.Errorf("%s: a call signed without a body passed %q on", name, got)
		}
	}
}

// TestSignIsTheOnlySigner: every forwarding header is covered by the
// signature but the signature itself and the digest trailer, so that a
// header added to the protocol without signing it fails here.
func TestSignIsTheOnlySigner(t *testing.T) {
	t.Parallel()
	n := newNodes(t)
	r := arrived(t, signed(t, n.a, "b", []byte("x")))
	for k, v := range r.Header {
		if !strings.HasPrefix(k, "Tether-Forwarded-") || k == hdrSig {
			continue
		}
		c := r.Clone(t.Context())
		c.Header.Set(k, v[0]+"0")
		if err := n.b.checkSignature(c); !errors.Is(err, errSig) {
			t.Errorf("a change to %s: checkSignature = %v; want %v", k, err, errSig)
		}
	}
	if _, ok := r.Trailer[hdrDigest]; !ok || r.ContentLength != -1 {
		t.Errorf("a call with a body has trailer %v and length %d; want the digest trailer, chunked", r.Trailer, r.ContentLength)
	}
}

// The nodes' finder is the registry.
var _ NodeFinder = (*store.Store)(nil)
var _ NonceKeeper = (*store.Store)(nil)

// heartbeat registers node id at url, alive.
func heartbeat(t *testing.T, st *store.Store, id, url string) {
	t.Helper()
	if err := st.Heartbeat(context.WithoutCancel(t.Context()), store.Node{ID: id, URL: url, Providers: []string{"sim"}}, true); err != nil {
		t.Fatal(err)
	}
}
