package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/domain"
)

type authenticator interface {
	// Authenticate returns the record of an API key, or
	// domain.ErrNotFound for an unknown or revoked key.
	Authenticate(ctx context.Context, key string) (domain.APIKey, error)
}

// WithAuth requires "Authorization: Bearer <api key>" and records the key's
// tenant and identity (callerOf) for the handlers. The guard judges each
// key on its own (see authGuard): bad keys from an address slow that
// address, never a good key beside it. A request another node forwarded
// (see forwardedAuth) carries the caller it authenticated instead, under
// the cluster's signature, checked without a query; the key's rate limit
// was applied there.
func WithAuth(log *slog.Logger, g *AuthGuard, cache *keyCache, q *Quotas, cl *cluster.Cluster, authed func(context.Context)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if cluster.IsForwarded(c.Request) {
			if !forwardedAuth(c, log, cl) {
				g.failed(clientAddr(c.Request, g.trusted))
				return
			}
			if authed != nil {
				authed(c.Request.Context())
			}
			c.Next()
			return
		}
		k, err := authenticate(c, g, cache)
		if errors.Is(err, ErrUnknownCredential) {
			c.Header("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
			WriteProblem(c, NewProblem(c, http.StatusUnauthorized, domain.CodeUnauthenticated, "the API key is not valid", ""))
			return
		}
		if errors.Is(err, errNoKey) {
			c.Header("WWW-Authenticate", `Bearer realm="tether"`)
			WriteProblem(c, NewProblem(c, http.StatusUnauthorized, domain.CodeUnauthenticated,
				"send an API key as Authorization: Bearer <key>", ""))
			return
		}
		if err != nil {
			WriteError(c, log, err)
			return
		}
		s := State(c)
		s.Tenant, s.Caller, s.manageKeys = k.Tenant, k.Caller(), k.ManageKeys
		if authed != nil {
			authed(c.Request.Context())
		}
		if err := q.checkKey(c, k.Tenant, k.ID); err != nil {
			WriteError(c, log, err)
			return
		}
		c.Next()
	}
}

// errNoKey is a request without "Authorization: Bearer <key>".
var errNoKey = errors.New("no API key")

// authenticate returns the record of the request's API key: from the
// cache, or looked up if the guard admits the key. Its errors are errNoKey
// and errUnknownCredential (401), a 429 QUOTA_EXCEEDED, or the store's.
func authenticate(c *gin.Context, g *AuthGuard, cache *keyCache) (domain.APIKey, error) {
	key, ok := bearerKey(c.GetHeader("Authorization"))
	if !ok {
		key, ok = subprotocolKey(c) // a browser's WebSocket to a terminal (wsauth.go)
	}
	if !ok {
		if err := g.refuse(c, clientAddr(c.Request, g.trusted)); !errors.Is(err, ErrUnknownCredential) {
			return domain.APIKey{}, err
		}
		return domain.APIKey{}, errNoKey
	}
	sum := sha256.Sum256([]byte(key))
	if k, ok := cache.get(sum); ok {
		return k, nil
	}
	t, err := g.Admit(c, g.keys, key)
	if err != nil {
		return domain.APIKey{}, err
	}
	k, err := g.st.Authenticate(c.Request.Context(), key)
	g.Settle(t, err)
	if errors.Is(err, domain.ErrNotFound) {
		return k, ErrUnknownCredential
	}
	if err != nil {
		return k, err
	}
	cache.put(sum, k)
	return k, nil
}

// keyCache remembers which tenant an API key belongs to for a while, so that
// most requests authenticate without a query. A key revoked or removed from
// the database keeps working for at most ttl. Only successful lookups are
// cached, under the key's hash; the cache is cleared when it grows past
// maxEntries. A nil cache remembers nothing.
type keyCache struct {
	ttl        time.Duration
	maxEntries int
	now        func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedKey
}

type cachedKey struct {
	key     domain.APIKey
	expires time.Time
}

// NewKeyCache returns a cache of ttl, or nil for a ttl of 0.
func NewKeyCache(ttl time.Duration) *keyCache {
	if ttl <= 0 {
		return nil
	}
	return &keyCache{ttl: ttl, maxEntries: 10000, now: time.Now, entries: map[[sha256.Size]byte]cachedKey{}}
}

// bearerKey is the API key of an "Authorization: Bearer <key>" header,
// and whether the header is one.
func bearerKey(header string) (string, bool) {
	scheme, key, ok := strings.Cut(header, " ")
	key = strings.TrimSpace(key)
	return key, ok && strings.EqualFold(scheme, "Bearer") && key != ""
}

// get returns the cached record of the key whose hash is sum, if fresh.
func (k *keyCache) get(sum [sha256.Size]byte) (domain.APIKey, bool) {
	if k == nil {
		return domain.APIKey{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.entries[sum]
	if !ok || !k.now().Before(e.expires) {
		return domain.APIKey{}, false
	}
	return e.key, true
}

// put caches the record of the key whose hash is sum.
func (k *keyCache) put(sum [sha256.Size]byte, rec domain.APIKey) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.entries) >= k.maxEntries {
		clear(k.entries)
	}
	k.entries[sum] = cachedKey{key: rec, expires: k.now().Add(k.ttl)}
}
