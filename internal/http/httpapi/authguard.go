package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/credential"
	"github.com/tetherhq/tether/internal/domain"
)

// The guard's bounds.
const (
	// keyIndexMaxAge is how old the index of live keys may get before a
	// request that needs it reads it again.
	keyIndexMaxAge = time.Minute
	// globalFailureFactor sets the budget of lookups of unknown
	// credentials over all addresses together, in addresses' worth: a
	// flood from many addresses costs Postgres at most that many a second.
	globalFailureFactor = 20
	// maxTracked bounds each of the guard's maps (addresses, misses);
	// one past it is cleared.
	maxTracked = 100_000
)

// ErrUnknownCredential is a credential judged unknown: 401 for an API
// key, 404 for a preview token.
var ErrUnknownCredential = errors.New("unknown credential")

// CredentialStore is what the guard reads of API keys and preview tokens.
type CredentialStore interface {
	authenticator
	// Credentials returns the Tagger of the installation's keys and
	// preview tokens.
	Credentials(ctx context.Context) (*credential.Tagger, error)
	// LiveKeyHashes returns the first 8 bytes of the SHA-256 of every
	// live API key, big-endian.
	LiveKeyHashes(ctx context.Context) ([]uint64, error)
}

// AuthGuard judges each presented credential (an API key, a preview
// token) on its own, so that a client sending bad ones slows itself and
// nobody beside it, and a flood of guesses cannot make Tether query
// Postgres at will:
//
//   - a credential of Tether's tagged shape whose tag fails is refused
//     without a lookup, and one whose tag holds is always looked up;
//   - so is an untagged API key the index of live keys holds (keys made
//     before tags, keys an operator chose);
//   - a value that was just looked up and not found is refused again
//     without a lookup for a while (the miss caches);
//   - anything else is looked up only while its address, and all
//     addresses together, are within their budget of failures
//     (AUTH_FAILURES_PER_SECOND): past it the request is 429.
//
// Addresses are clientAddr's: behind TRUSTED_PROXIES, the client's.
type AuthGuard struct {
	st      CredentialStore
	trusted []netip.Prefix
	rate    float64 // failures a second per address; <= 0: no limit
	now     func() time.Time

	keys, Previews *credentialKind
	// E2BHosts are the sandbox ids of E2B's sandbox hosts, which a request
	// names without any key: each one looked up and not found (not a
	// running sandbox made through E2B's API) is a failure of the address.
	E2BHosts *credentialKind
	index    keyIndex

	mu          sync.Mutex
	tagger      *credential.Tagger
	taggerRetry time.Time
	addrs       map[string]*bucket
	all         bucket
}

// credentialKind is what the guard knows of one kind of credential.
type credentialKind struct {
	prefix  string
	shaped  func(string) bool // whether a value could be one at all
	indexed bool              // whether the index of live keys vouches for it
	misses  missCache
}

// NewAuthGuard is the guard of the credentials in st, with cfg's limits.
func NewAuthGuard(st CredentialStore, cfg Config) *AuthGuard {
	g := &AuthGuard{st: st, trusted: cfg.TrustedProxies, rate: float64(cfg.AuthFailuresPerSecond), now: time.Now,
		addrs: map[string]*bucket{}}
	g.keys = &credentialKind{prefix: domain.KeyPrefix, shaped: func(string) bool { return true }, indexed: true,
		misses: missCache{ttl: cfg.AuthCacheTTL}}
	g.Previews = &credentialKind{prefix: domain.PreviewTokenPrefix, shaped: domain.ValidPreviewToken,
		misses: missCache{ttl: cfg.AuthCacheTTL}}
	g.E2BHosts = &credentialKind{prefix: "sbx_", shaped: domain.ValidID, misses: missCache{ttl: cfg.AuthCacheTTL}}
	g.index.load = func(ctx context.Context) ([]uint64, error) { return st.LiveKeyHashes(ctx) }
	return g
}

// ticket is one credential's way through the guard, from admit to settle.
type ticket struct {
	kind    *credentialKind
	addr    string
	sum     [sha256.Size]byte
	charged bool // its lookup took a token of the address's budget (and the global one)
}

// Admit decides whether value, presented as a credential of kind k, is
// worth a lookup. If it is, the caller looks it up and tells settle the
// outcome. If not, the error is errUnknownCredential (answer it as
// unknown) or a 429 QUOTA_EXCEEDED.
func (g *AuthGuard) Admit(c *gin.Context, k *credentialKind, value string) (ticket, error) {
	ctx := c.Request.Context()
	t := ticket{kind: k, addr: clientAddr(c.Request, g.trusted), sum: sha256.Sum256([]byte(value))}
	now := g.now()
	verdict := credential.Untagged
	if credential.Tagged(k.prefix, value) { // only then is the Tagger needed (and read, the first time)
		verdict = g.taggerFor(ctx).Check(k.prefix, value)
	}
	switch {
	case !k.shaped(value), k.misses.has(t.sum, now),
		verdict == credential.Forged && !g.indexed(ctx, k, t.sum, true):
		return t, g.refuse(c, t.addr)
	case verdict == credential.Genuine, g.indexed(ctx, k, t.sum, false):
		return t, nil
	}
	if t.charged = g.charge(t.addr, now); t.charged || g.indexed(ctx, k, t.sum, true) {
		return t, nil
	}
	return t, g.over(c, t.addr, now)
}

// Settle records the outcome of the lookup admit let through: err nil
// (found), domain.ErrNotFound (unknown), or another error (no verdict).
func (g *AuthGuard) Settle(t ticket, err error) {
	prefix := binary.BigEndian.Uint64(t.sum[:8])
	switch {
	case err == nil:
		if t.charged {
			g.refund(t.addr)
		}
		if t.kind.indexed {
			g.index.add(prefix)
		}
	case errors.Is(err, domain.ErrNotFound):
		t.kind.misses.add(t.sum, g.now())
		if t.kind.indexed {
			g.index.remove(prefix)
		}
		if !t.charged {
			g.failed(t.addr)
		}
	case t.charged:
		g.refund(t.addr) // Postgres failed, not the client
	}
}

// indexed reports whether the live keys' index vouches for sum, reading
// the index first (at most every keyIndexMaxAge) if load.
func (g *AuthGuard) indexed(ctx context.Context, k *credentialKind, sum [sha256.Size]byte, load bool) bool {
	if !k.indexed {
		return false
	}
	if load {
		g.index.fresh(ctx, g.now())
	}
	return g.index.has(binary.BigEndian.Uint64(sum[:8]))
}

// taggerFor is the installation's Tagger, read from the store once (after
// a failure, again at most every second); nil until then, which checks
// nothing.
func (g *AuthGuard) taggerFor(ctx context.Context) *credential.Tagger {
	now := g.now()
	g.mu.Lock()
	t, try := g.tagger, g.tagger == nil && !now.Before(g.taggerRetry)
	if try {
		g.taggerRetry = now.Add(time.Second)
	}
	g.mu.Unlock()
	if !try || g.st == nil {
		return t
	}
	t, err := g.st.Credentials(ctx)
	if err != nil {
		return nil
	}
	g.mu.Lock()
	g.tagger = t
	g.mu.Unlock()
	return t
}

// Refuse counts a credential the request presented and that was refused
// without a lookup of its own (an E2B traffic access token that is not
// its sandbox's) as a failure of its address: nil while the address is
// within its budget, else the 429 QUOTA_EXCEEDED to answer instead.
func (g *AuthGuard) Refuse(c *gin.Context) error {
	addr := clientAddr(c.Request, g.trusted)
	if g.failed(addr) {
		return nil
	}
	return g.over(c, addr, g.now())
}

// refuse counts a failure of addr that cost no lookup and answers it:
// errUnknownCredential, or 429 once the address is over its budget.
func (g *AuthGuard) refuse(c *gin.Context, addr string) error {
	if g.failed(addr) {
		return ErrUnknownCredential
	}
	return g.over(c, addr, g.now())
}

// failed takes a token of addr's budget, and reports whether there was
// one.
func (g *AuthGuard) failed(addr string) bool {
	if g.rate <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ok, _ := g.addr(addr).take(g.now(), g.rate, 4*g.rate)
	return ok
}

// charge takes a token of addr's budget and one of the global budget for
// a lookup, or none if either has none.
func (g *AuthGuard) charge(addr string, now time.Time) bool {
	if g.rate <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.addr(addr)
	if ok, _ := b.take(now, g.rate, 4*g.rate); !ok {
		return false
	}
	global := g.rate * globalFailureFactor
	if ok, _ := g.all.take(now, global, 4*global); !ok {
		b.refund(4 * g.rate)
		return false
	}
	return true
}

// refund gives back the tokens of a lookup charge took.
func (g *AuthGuard) refund(addr string) {
	if g.rate <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addr(addr).refund(4 * g.rate)
	g.all.refund(4 * g.rate * globalFailureFactor)
}

// over is the 429 of an address (or of all of them) over its budget.
func (g *AuthGuard) over(c *gin.Context, addr string, now time.Time) error {
	g.mu.Lock()
	tokens := g.addr(addr).available(now, g.rate, 4*g.rate)
	g.mu.Unlock()
	if tokens >= 1 { // the global budget is spent
		return Exceeded(c, time.Second, "too many requests without a valid API key; wait")
	}
	return Exceeded(c, time.Duration((1-tokens)/g.rate*float64(time.Second)),
		"too many requests without a valid API key from this address; wait")
}

// addr is addr's bucket, made if missing. The caller holds g.mu.
func (g *AuthGuard) addr(addr string) *bucket {
	b := g.addrs[addr]
	if b == nil {
		if len(g.addrs) >= maxTracked {
			clear(g.addrs)
		}
		b = &bucket{}
		g.addrs[addr] = b
	}
	return b
}

// missCache remembers, for ttl, the credentials just looked up and not
// found, by their hash, so that sending the same bad one again costs no
// lookup. A zero ttl remembers nothing.
type missCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[sha256.Size]byte]time.Time
}

func (m *missCache) has(sum [sha256.Size]byte, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.m[sum]
	return ok && now.Before(until)
}

func (m *missCache) add(sum [sha256.Size]byte, now time.Time) {
	if m.ttl <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= maxTracked {
		m.m = map[[sha256.Size]byte]time.Time{}
	}
	m.m[sum] = now.Add(m.ttl)
}

// keyIndex holds the hash prefixes of the live API keys (see
// Store.LiveKeyHashes), read when a request needs it and it is older than
// keyIndexMaxAge; keys found or not found by a lookup meanwhile are added
// or removed.
type keyIndex struct {
	load func(ctx context.Context) ([]uint64, error)

	mu      sync.Mutex
	set     map[uint64]struct{}
	read    time.Time
	loading chan struct{} // closed when the read in flight lands; nil when none is
}

func (x *keyIndex) has(prefix uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.set[prefix]
	return ok
}

func (x *keyIndex) add(prefix uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.set == nil {
		x.set = map[uint64]struct{}{}
	}
	x.set[prefix] = struct{}{}
}

func (x *keyIndex) remove(prefix uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.set, prefix)
}

// fresh reads the index again if it is older than keyIndexMaxAge. One
// caller reads it; the others use the last reading meanwhile, or wait for
// the first one when there is none. A failed read keeps the old index
// for a second.
func (x *keyIndex) fresh(ctx context.Context, now time.Time) {
	x.mu.Lock()
	if now.Sub(x.read) < keyIndexMaxAge {
		x.mu.Unlock()
		return
	}
	if wait := x.loading; wait != nil {
		first := x.read.IsZero()
		x.mu.Unlock()
		if first {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
		return
	}
	done := make(chan struct{})
	x.loading = done
	x.mu.Unlock()
	prefixes, err := x.load(ctx)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.loading = nil
	close(done)
	if err != nil {
		x.read = now.Add(time.Second - keyIndexMaxAge) // try again in a second
		return
	}
	set := make(map[uint64]struct{}, len(prefixes))
	for _, p := range prefixes {
		set[p] = struct{}{}
	}
	x.set, x.read = set, now
}
