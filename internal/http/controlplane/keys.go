package controlplane

import (
	"context"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// APIKey is an API key of the tenant, without the key itself (shown once,
// when created).
type APIKey struct {
	// ID identifies the key in the API and in the audit trail (events' actor_key_id, activity's key_id); it is not a secret.
	ID string `json:"id" example:"key_k5m2q7x3w9r4t8vz"`
	// Name says what the key is for.
	Name      string    `json:"name" example:"ci-runner"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// LastUsedAt is when a request last authenticated with the key, to about a minute (or AUTH_CACHE_TTL, if longer); null if never.
	LastUsedAt *time.Time `json:"last_used_at" extensions:"x-nullable" format:"date-time" example:"2026-01-02T15:14:05Z"`
	// RevokedAt is when the key was revoked; null while it works.
	RevokedAt *time.Time `json:"revoked_at" extensions:"x-nullable" format:"date-time" example:"2026-01-03T09:00:00Z"`
	// ManageKeys is whether the key may create keys and revoke other keys. Operators' keys (tether keys create, BOOTSTRAP_API_KEY) may.
	ManageKeys bool `json:"manage_keys" example:"false"`
	// CreatedBy is the id of the key that created this one over the API; null for an operator's key.
	CreatedBy *string `json:"created_by" extensions:"x-nullable" example:"key_a1b2c3d4e5f6g7h8"`
} // @name APIKey

// APIKeyList is every API key of the tenant, revoked ones included, oldest first.
type APIKeyList struct {
	Items []APIKey `json:"items"`
} // @name APIKeyList

// CreateAPIKeyRequest is the body of POST /v1/keys.
type CreateAPIKeyRequest struct {
	// Name says what the key is for: 1-100 characters, no control characters.
	Name string `json:"name" example:"ci-runner"`
	// ManageKeys gives the new key the scope to create keys and revoke others (default false).
	ManageKeys bool `json:"manage_keys,omitempty" example:"false"`
} // @name CreateAPIKeyRequest

// CreatedAPIKey is a new API key: the only time its secret is shown.
type CreatedAPIKey struct {
	Key APIKey `json:"key"`
	// Secret is the API key itself, to send as "Authorization: Bearer SECRET". Tether keeps only its hash: store it now.
	Secret string `json:"secret" example:"tk_3q8x2Kp0Vw7mZr5Tn1Yb9Lc4Hd6Gf0Js2Ea8Uo3Wi5"`
} // @name CreatedAPIKey

// KeyStore is what the key handlers need of the store.
type KeyStore interface {
	// MintAPIKey and RevokeAPIKey check the asking key in the database
	// (UNAUTHENTICATED if revoked, FORBIDDEN without manage_keys);
	// MintAPIKey also the tenant's cap (QUOTA_EXCEEDED).
	MintAPIKey(ctx context.Context, k domain.NewAPIKey) (domain.APIKey, string, error)
	APIKeys(ctx context.Context, tenant string) ([]domain.APIKey, error)
	RevokeAPIKey(ctx context.Context, tenant, id, by string) (domain.APIKey, error)
}

// maxKeyName is the longest API key name, in bytes.
const maxKeyName = 100

func toAPIKey(k domain.APIKey) APIKey {
	return APIKey{ID: k.ID, Name: k.Name, CreatedAt: k.CreatedAt.UTC(), LastUsedAt: httpapi.UTC(k.LastUsedAt), RevokedAt: httpapi.UTC(k.RevokedAt),
		ManageKeys: k.ManageKeys, CreatedBy: httpapi.Optional(k.CreatedBy)}
}

// validKeyID tells ids Tether could have made from anything else, which is
// not found without a query.
func validKeyID(id string) bool {
	rest, ok := strings.CutPrefix(id, "key_")
	if !ok || rest == "" || len(rest) > 40 {
		return false
	}
	for _, r := range rest {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// HandleKeyCreate makes an API key for the caller's tenant.
//
//	@Summary		Create an API key
//	@Description	Makes a new API key for the tenant of the key that asks, and returns it with its secret: the only time the secret is shown (Tether keeps its hash). Only a key with manage_keys may (operators' keys have it; a key made here has it only if asked for); the asking key is checked in the database, so a key revoked a moment ago cannot mint one within the auth cache's window. The new key records which key made it (created_by). A tenant holds at most TENANT_MAX_KEYS keys that are not revoked. To rotate a key: create one, hand it out, then revoke the old one.
//	@ID				createApiKey
//	@Tags			keys
//	@Accept			json
//	@Produce		json
//	@Param			request	body		CreateAPIKeyRequest	true	"the new key's name"
//	@Success		201		{object}	CreatedAPIKey
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		401		{object}	httpapi.Problem				"UNAUTHENTICATED: no API key, or one Tether does not know (or revoked)"
//	@Failure		403		{object}	httpapi.Problem				"FORBIDDEN: the key lacks manage_keys"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: over the API key's request rate, or the tenant holds TENANT_MAX_KEYS keys; retry after Retry-After seconds"
//	@Header			201		{string}	Location			"the key's URL (for DELETE)"
//	@Security		BearerAuth
//	@Router			/v1/keys [post]
func HandleKeyCreate(cfg httpapi.Config, st KeyStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		var req CreateAPIKeyRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.Name == "" || len(req.Name) > maxKeyName || strings.IndexFunc(req.Name, unicode.IsControl) >= 0 {
			return domain.Errorf(domain.CodeInvalidRequest, "name is required: 1-%d bytes, no control characters", maxKeyName)
		}
		k, secret, err := st.MintAPIKey(c.Request.Context(), domain.NewAPIKey{
			Tenant: httpapi.TenantOf(c), Name: req.Name, By: httpapi.CallerOf(c).KeyID, ManageKeys: req.ManageKeys, MaxKeys: cfg.TenantMaxKeys,
		})
		if domain.ErrorCode(err) == domain.CodeQuotaExceeded {
			c.Header("Retry-After", "60")
		}
		if err != nil {
			return err
		}
		c.Header("Location", "/v1/keys/"+k.ID)
		c.Header("Cache-Control", "no-store")
		return httpapi.WriteJSON(c, http.StatusCreated, CreatedAPIKey{Key: toAPIKey(k), Secret: secret})
	}
}

// HandleKeyList lists the tenant's API keys.
//
//	@Summary		List API keys
//	@Description	Every API key of the tenant of the key that asks, revoked ones included, oldest first, without their secrets. Not paged: a tenant has few keys.
//	@ID				listApiKeys
//	@Tags			keys
//	@Produce		json
//	@Success		200	{object}	APIKeyList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Security		BearerAuth
//	@Router			/v1/keys [get]
func HandleKeyList(st KeyStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		keys, err := st.APIKeys(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := APIKeyList{Items: make([]APIKey, len(keys))}
		for i, k := range keys {
			out.Items[i] = toAPIKey(k)
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleKeyRevoke revokes an API key.
//
//	@Summary		Revoke an API key
//	@Description	The key stops working within AUTH_CACHE_TTL (10 s by default: replicas that used it recently remember it that long) for most routes, and at once for key management; it stays listed with its revoked_at. A key may revoke itself; revoking another key takes manage_keys. Idempotent: revoking a revoked key returns it unchanged. A key of another tenant is 404.
//	@ID				revokeApiKey
//	@Tags			keys
//	@Produce		json
//	@Param			id	path		string	true	"key id"	example(key_k5m2q7x3w9r4t8vz)
//	@Success		200	{object}	APIKey	"revoked"
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		403	{object}	httpapi.Problem				"FORBIDDEN: revoking another key without manage_keys"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/keys/{id} [delete]
func HandleKeyRevoke(st KeyStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id := c.Param("id")
		if !validKeyID(id) {
			return domain.Errorf(domain.CodeNotFound, "API key %q not found", id)
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		k, err := st.RevokeAPIKey(c.Request.Context(), httpapi.TenantOf(c), id, httpapi.CallerOf(c).KeyID)
		if domain.ErrorCode(err) == domain.CodeNotFound {
			return domain.Errorf(domain.CodeNotFound, "API key %s not found", id)
		}
		if err != nil {
			return err
		}
		return httpapi.WriteJSON(c, http.StatusOK, toAPIKey(k))
	}
}
