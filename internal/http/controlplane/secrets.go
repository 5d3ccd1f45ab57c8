package controlplane

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// Secret is a tenant's secret, by name: its value is never shown.
type Secret struct {
	// Name is what credentials call it by.
	Name      string    `json:"name" example:"gh-token"`
	CreatedAt time.Time `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// UpdatedAt is when its value was last set.
	UpdatedAt time.Time `json:"updated_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// UpdatedBy is the id of the API key that set the value last; null for none.
	UpdatedBy *string `json:"updated_by" extensions:"x-nullable" example:"key_k5m2q7x3w9r4t8vz"`
} // @name Secret

// SecretList is every secret of the tenant, by name.
type SecretList struct {
	Items []Secret `json:"items"`
} // @name SecretList

// PutSecretRequest is the body of POST /v1/secrets.
type PutSecretRequest struct {
	// Name is 1-100 letters, digits, '.', '_' and '-', starting with a letter or digit.
	Name string `json:"name" example:"gh-token"`
	// Value is the secret: 1-8192 bytes of UTF-8, no control characters but tab (it goes into a header).
	Value string `json:"value" example:"ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"`
} // @name PutSecretRequest

// SecretStore is what the secret handlers need of the store.
type SecretStore interface {
	PutSecret(ctx context.Context, tenant, name string, sealed []byte, by domain.Caller) (domain.Secret, bool, error)
	Secrets(ctx context.Context, tenant string) ([]domain.Secret, error)
	DeleteSecret(ctx context.Context, tenant, name string) error
}

// Sealer seals secrets for storage (a *secretbox.Box); nil when the
// operator has not set SECRETS_KEY.
type Sealer interface {
	Seal(tenant, name string, value []byte) []byte
}

func toSecret(s domain.Secret) Secret {
	return Secret{Name: s.Name, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC(), UpdatedBy: httpapi.Optional(s.UpdatedBy)}
}

// notInHeader tells the characters a header's value may not hold.
func notInHeader(r rune) bool { return r != '\t' && (r < ' ' || r == 0x7f) }

// errNoSecrets answers the secret routes of a server without SECRETS_KEY.
func errNoSecrets() error {
	return domain.Errorf(domain.CodeNotSupported, "this server keeps no secrets: its operator has not set SECRETS_KEY")
}

// HandleSecretPut stores a secret of the caller's tenant.
//
//	@Summary		Store a secret
//	@Description	Stores a secret of the tenant, sealed under the operator's key (SECRETS_KEY): credentials of allow-list sandboxes name it, and Tether's egress proxy adds it to their requests, so that it never enters a sandbox. The value is never returned or logged. A name the tenant has already is given the new value (200; 201 for a new name); sandboxes whose credentials name it use the new value within a second. A tenant holds at most 500 secrets.
//	@ID				putSecret
//	@Tags			secrets
//	@Accept			json
//	@Produce		json
//	@Param			request	body		PutSecretRequest	true	"the secret"
//	@Success		200		{object}	Secret				"the value of an existing secret replaced"
//	@Success		201		{object}	Secret
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: the tenant holds 500 secrets"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: the server has no SECRETS_KEY"
//	@Header			201		{string}	Location			"the secret's URL (for DELETE)"
//	@Security		BearerAuth
//	@Router			/v1/secrets [post]
func HandleSecretPut(log *slog.Logger, st SecretStore, box Sealer) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if box == nil {
			return errNoSecrets()
		}
		var req PutSecretRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if !domain.ValidSecretName(req.Name) {
			return domain.Errorf(domain.CodeInvalidRequest, "name must be 1-%d letters, digits, '.', '_' and '-', starting with a letter or digit", domain.MaxSecretName)
		}
		if req.Value == "" || len(req.Value) > domain.MaxSecretValue || strings.IndexFunc(req.Value, notInHeader) >= 0 {
			return domain.Errorf(domain.CodeInvalidRequest, "value must be 1-%d bytes with no control characters but tab (it goes into a header)", domain.MaxSecretValue)
		}
		tenant, by := httpapi.TenantOf(c), httpapi.CallerOf(c)
		sec, created, err := st.PutSecret(c.Request.Context(), tenant, req.Name, box.Seal(tenant, req.Name, []byte(req.Value)), by)
		if err != nil {
			return err
		}
		log.InfoContext(c.Request.Context(), "secret set", "tenant", tenant, "secret", req.Name, "created", created, "key_id", by.KeyID)
		status := http.StatusOK
		if created {
			status = http.StatusCreated
			c.Header("Location", "/v1/secrets/"+req.Name)
		}
		return httpapi.WriteJSON(c, status, toSecret(sec))
	}
}

// HandleSecretList lists the tenant's secrets by name.
//
//	@Summary		List secrets
//	@Description	Every secret of the tenant, by name, without values. Not paged: a tenant holds at most 500.
//	@ID				listSecrets
//	@Tags			secrets
//	@Produce		json
//	@Success		200	{object}	SecretList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		501	{object}	httpapi.Problem				"NOT_SUPPORTED: the server has no SECRETS_KEY"
//	@Security		BearerAuth
//	@Router			/v1/secrets [get]
func HandleSecretList(st SecretStore, box Sealer) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if box == nil {
			return errNoSecrets()
		}
		secs, err := st.Secrets(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := SecretList{Items: make([]Secret, 0, len(secs))}
		for _, s := range secs {
			out.Items = append(out.Items, toSecret(s))
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleSecretDelete deletes a secret.
//
//	@Summary		Delete a secret
//	@Description	Deletes the tenant's secret. Credentials that name it stop working within a second: the egress proxy refuses their hosts' requests (403) rather than send them without it.
//	@ID				deleteSecret
//	@Tags			secrets
//	@Param			name	path	string	true	"secret name"	example(gh-token)
//	@Success		204
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		501	{object}	httpapi.Problem				"NOT_SUPPORTED: the server has no SECRETS_KEY"
//	@Security		BearerAuth
//	@Router			/v1/secrets/{name} [delete]
func HandleSecretDelete(log *slog.Logger, st SecretStore, box Sealer) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if box == nil {
			return errNoSecrets()
		}
		name := c.Param("name")
		if !domain.ValidSecretName(name) {
			return domain.Errorf(domain.CodeNotFound, "secret %q not found", name)
		}
		tenant := httpapi.TenantOf(c)
		if err := st.DeleteSecret(c.Request.Context(), tenant, name); err != nil {
			if domain.ErrorCode(err) == domain.CodeNotFound {
				return domain.Errorf(domain.CodeNotFound, "secret %q not found", name)
			}
			return err
		}
		log.InfoContext(c.Request.Context(), "secret deleted", "tenant", tenant, "secret", name, "key_id", httpapi.CallerOf(c).KeyID)
		c.Status(http.StatusNoContent)
		return nil
	}
}
