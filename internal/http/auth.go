package http

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/cluster"
	"github.com/tetherhq/tether/internal/sandbox"
)

// remoteHost is the address a request came from, without its port: what
// failed authentications are counted by. Headers such as X-Forwarded-For
// are not trusted.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

type authenticator interface {
	// Authenticate returns the record of an API key, or
	// sandbox.ErrNotFound for an unknown or revoked key.
	Authenticate(ctx context.Context, key string) (sandbox.APIKey, error)
}

// withAuth requires "Authorization: Bearer <api key>" and records the key's
// tenant and identity (callerOf) for the handlers. A request another node
// forwarded (see forwardedAuth) carries the caller it authenticated instead,
// under the cluster's signature; the key's rate limit was applied there.
func withAuth(log *slog.Logger, auth authenticator, q *quotas, cl *cluster.Cluster, authed func(context.Context)) gin.HandlerFunc {
	return func(c *gin.Context) {
		addr := remoteHost(c.Request)
		if err := q.checkAuthFailures(c, addr); err != nil && !knownKey(auth, c.GetHeader("Authorization")) {
			// Over its failures, an address gets no more lookups; a key
			// this replica knows already costs none, so a client sharing the
			// address (a NAT) with one that guesses keeps working.
			writeError(c, log, err)
			return
		}
		if cluster.IsForwarded(c.Request) {
			if !forwardedAuth(c, log, cl) {
				q.authFailed(addr)
				return
			}
			if authed != nil {
				authed(c.Request.Context())
			}
			c.Next()
			return
		}
		key, ok := bearerKey(c.GetHeader("Authorization"))
		if !ok {
			q.authFailed(addr)
			c.Header("WWW-Authenticate", `Bearer realm="tether"`)
			writeProblem(c, newProblem(c, http.StatusUnauthorized, sandbox.CodeUnauthenticated,
				"send an API key as Authorization: Bearer <key>", ""))
			return
		}
		k, err := auth.Authenticate(c.Request.Context(), key)
		if errors.Is(err, sandbox.ErrNotFound) {
			q.authFailed(addr)
			c.Header("WWW-Authenticate", `Bearer realm="tether", error="invalid_token"`)
			writeProblem(c, newProblem(c, http.StatusUnauthorized, sandbox.CodeUnauthenticated, "the API key is not valid", ""))
			return
		}
		if err != nil {
			writeError(c, log, err)
			return
		}
		s := state(c)
		s.tenant, s.caller, s.manageKeys = k.Tenant, k.Caller(), k.ManageKeys
		if authed != nil {
			authed(c.Request.Context())
		}
		if err := q.checkKey(c, k.Tenant, k.ID); err != nil {
			writeError(c, log, err)
			return
		}
		c.Next()
	}
}

// keyCache remembers which tenant an API key belongs to for a while, so that
// most requests authenticate without a query. A key revoked or removed from
// the database keeps working for at most ttl. Only successful lookups are
// cached, under the key's hash; the cache is cleared when it grows past
// maxEntries.
type keyCache struct {
	auth       authenticator
	ttl        time.Duration
	maxEntries int

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedKey
}

type cachedKey struct {
	key     sandbox.APIKey
	expires time.Time
}

func newKeyCache(auth authenticator, ttl time.Duration) *keyCache {
	return &keyCache{auth: auth, ttl: ttl, maxEntries: 10000, entries: map[[sha256.Size]byte]cachedKey{}}
}

// bearerKey is the API key of an "Authorization: Bearer <key>" header,
// and whether the header is one.
func bearerKey(header string) (string, bool) {
	scheme, key, ok := strings.Cut(header, " ")
	key = strings.TrimSpace(key)
	return key, ok && strings.EqualFold(scheme, "Bearer") && key != ""
}

// knownKey reports whether the Authorization header carries a key the auth
// cache holds (and so would authenticate without a query).
func knownKey(auth authenticator, header string) bool {
	k, ok := auth.(*keyCache)
	key, found := bearerKey(header)
	if !ok || !found {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	k.mu.Lock()
	defer k.mu.Unlock()
	e, cached := k.entries[sum]
	return cached && time.Now().Before(e.expires)
}

// Authenticate implements authenticator.
func (k *keyCache) Authenticate(ctx context.Context, key string) (sandbox.APIKey, error) {
	sum := sha256.Sum256([]byte(key))
	now := time.Now()
	k.mu.Lock()
	e, ok := k.entries[sum]
	k.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.key, nil
	}
	rec, err := k.auth.Authenticate(ctx, key)
	if err != nil {
		return sandbox.APIKey{}, err
	}
	k.mu.Lock()
	if len(k.entries) >= k.maxEntries {
		clear(k.entries)
	}
	k.entries[sum] = cachedKey{key: rec, expires: now.Add(k.ttl)}
	k.mu.Unlock()
	return rec, nil
}
