package controlplane

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/http/httpapi"
)

// NetworkCredential is one credential of an allow-list sandbox: for its requests to host over HTTPS, Tether's egress proxy adds the header, its value format with {secret} replaced by the tenant's secret named secret (or, with username, HTTP basic authentication of username and the secret). The secret's value never enters the sandbox.
type NetworkCredential struct {
	// Host is the exact host name the credential is for; an allow rule must allow it too.
	Host string `json:"host" example:"api.github.com"`
	// Header is the header's name ("Authorization" with username).
	Header string `json:"header,omitempty" example:"Authorization"`
	// Format is the header's value, {secret} standing for the secret once (default "{secret}").
	Format string `json:"format,omitempty" example:"Bearer {secret}"`
	// Username makes the value basic authentication of username and the secret (git over HTTPS).
	Username string `json:"username,omitempty" example:"x-access-token"`
	// Secret names the tenant's secret (POST /v1/secrets).
	Secret string `json:"secret" example:"gh-token"`
} // @name NetworkCredential

// SandboxNetwork is a sandbox's way out: its network mode and, for an allow-list sandbox, what it may reach and the credentials Tether's egress proxy adds on its way.
type SandboxNetwork struct {
	SandboxID string `json:"sandbox_id" example:"sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w"`
	// Network is the create's params.network: allowlist for a sandbox whose rules are here; none (or empty, the provider's default) for one without a way out.
	Network string `json:"network" example:"allowlist"`
	// Allow is the allow list: host names, wildcards (*.pythonhosted.org: every name below the domain), IPv4 and IPv6 addresses and CIDRs, each with an optional :port.
	Allow []string `json:"allow" example:"pypi.org,*.pythonhosted.org,github.com:443"`
	// Credentials are the headers the egress proxy adds, by host; their secrets by name only.
	Credentials []NetworkCredential `json:"credentials"`
	// Edited is true once PATCH has replaced the create's rules.
	Edited bool `json:"edited" example:"true"`
	// UpdatedAt is when the rules were last edited (the sandbox's creation if never).
	UpdatedAt time.Time `json:"updated_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	// CredentialsUntil is when the credentials stop working unless renewed: the earlier of the sandbox's expiry and its owner's lease. They work only while the sandbox is ready.
	CredentialsUntil time.Time `json:"credentials_until" format:"date-time" example:"2026-01-02T15:14:05Z"`
} // @name SandboxNetwork

// UpdateNetworkRequest is the body of PATCH /v1/sandboxes/{id}/network.
type UpdateNetworkRequest struct {
	// Allow replaces the allow list (at most 256 entries; [] allows nothing).
	Allow *[]string `json:"allow"`
	// Credentials, if given, replace the credentials ([] removes them all); left out, they are kept.
	Credentials *[]NetworkCredential `json:"credentials,omitempty"`
} // @name UpdateNetworkRequest

// NetworkStore is what the network handlers need of the store.
type NetworkStore interface {
	SandboxNetwork(ctx context.Context, tenant, id string) (domain.SandboxNetwork, error)
	SetSandboxNetwork(ctx context.Context, e domain.NetworkEdit) (domain.SandboxNetwork, error)
	SealedSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error)
}

// EgressRules checks rules as the egress proxy will read them; nil when
// no egress proxy runs in this Tether.
type EgressRules interface {
	// Serves reports whether the provider's allow-list sandboxes go out
	// through the proxy (their rules may then be edited).
	Serves(provider string) bool
	CheckAllow(allow []string) error
	CheckCredential(c domain.NetworkCredential) error
}

func toSandboxNetwork(n domain.SandboxNetwork) SandboxNetwork {
	out := SandboxNetwork{SandboxID: n.SandboxID, Network: n.Mode, Allow: n.Allow, Credentials: []NetworkCredential{}, Edited: n.Edited,
		UpdatedAt: n.UpdatedAt.UTC(), CredentialsUntil: n.LiveUntil.UTC()}
	if out.Allow == nil {
		out.Allow = []string{}
	}
	for _, c := range n.Credentials {
		out.Credentials = append(out.Credentials, NetworkCredential(c))
	}
	return out
}

// HandleSandboxNetworkGet shows a sandbox's network rules.
//
//	@Summary		A sandbox's network rules
//	@Description	The sandbox's network mode and, for an allow-list sandbox (params.network "allowlist"), its allow list and credentials (secrets by name only), as Tether's egress proxy applies them now: the create's params until PATCH replaces them.
//	@ID				getSandboxNetwork
//	@Tags			sandboxes
//	@Produce		json
//	@Param			id	path		string	true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Success		200	{object}	SandboxNetwork
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/network [get]
func HandleSandboxNetworkGet(st NetworkStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		n, err := st.SandboxNetwork(c.Request.Context(), httpapi.TenantOf(c), id)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSandboxNetwork(n))
	}
}

// HandleSandboxNetworkUpdate replaces an allow-list sandbox's rules.
//
//	@Summary		Change a sandbox's network rules
//	@Description	Replaces the allow list of a live allow-list sandbox (params.network "allowlist") and, if given, its credentials. Every replica's egress proxy applies the new rules within a second, to each new connection, DNS question and HTTP request (connections already open keep going); they are kept in the registry, so they hold across pause and resume, a restart of Tether and a move between nodes. The edit is recorded in the sandbox's activity (kind network_update). A credential's secret must exist. Only sandboxes whose provider goes out through Tether's egress proxy (local) can be edited; the mode itself (none, allowlist) is fixed at create.
//	@ID				updateSandboxNetwork
//	@Tags			sandboxes
//	@Accept			json
//	@Produce		json
//	@Param			id		path		string					true	"sandbox id"	example(sbx_5q3k8w1m2n4p6r7s9t0v1x2y3w)
//	@Param			request	body		UpdateNetworkRequest	true	"the new rules"
//	@Success		200		{object}	SandboxNetwork
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a rule, a credential, a secret that does not exist, or a sandbox without an allow list"
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Failure		409		{object}	httpapi.Problem				"STATE_CONFLICT: the sandbox has ended"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: the sandbox's provider cannot change its rules while it runs"
//	@Security		BearerAuth
//	@Router			/v1/sandboxes/{id}/network [patch]
func HandleSandboxNetworkUpdate(st NetworkStore, rules EgressRules) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		id, err := httpapi.SandboxID(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		var req UpdateNetworkRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.Allow == nil {
			return domain.Errorf(domain.CodeInvalidRequest, "allow is required: the new allow list ([] allows nothing)")
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		cur, err := st.SandboxNetwork(ctx, tenant, id)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		switch {
		case cur.Mode != domain.NetworkAllowlist:
			return domain.Errorf(domain.CodeInvalidRequest, "sandbox %s has no allow list: its network is %q, fixed at create (create it with params.network \"allowlist\")", id, cur.Mode)
		case rules == nil || !rules.Serves(cur.Provider):
			return domain.Errorf(domain.CodeNotSupported, "the %s provider's network rules are fixed at create", cur.Provider)
		}
		if err := rules.CheckAllow(*req.Allow); err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "[") { // not one entry's: the list's
				msg = ": " + msg
			}
			return domain.Errorf(domain.CodeInvalidRequest, "allow%s", msg)
		}
		edit := domain.NetworkEdit{Tenant: tenant, SandboxID: id, Allow: *req.Allow, By: httpapi.CallerOf(c)}
		if req.Credentials != nil {
			if edit.Credentials, err = checkCredentials(ctx, st, rules, tenant, *req.Credentials); err != nil {
				return err
			}
		}
		n, err := st.SetSandboxNetwork(ctx, edit)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSandboxNetwork(n))
	}
}

// maxCredentials bounds a sandbox's credentials.
const maxCredentials = 32

// checkCredentials checks creds and that the secrets they name exist.
func checkCredentials(ctx context.Context, st NetworkStore, rules EgressRules, tenant string, creds []NetworkCredential) ([]domain.NetworkCredential, error) {
	if len(creds) > maxCredentials {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "credentials: %d entries; at most %d are allowed", len(creds), maxCredentials)
	}
	out := make([]domain.NetworkCredential, 0, len(creds))
	names := make([]string, 0, len(creds))
	for i, c := range creds {
		dc := domain.NetworkCredential(c)
		if !domain.ValidSecretName(dc.Secret) {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "credentials[%d]: secret must name a secret", i)
		}
		if err := rules.CheckCredential(dc); err != nil {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "credentials[%d]: %s", i, err.Error())
		}
		out, names = append(out, dc), append(names, dc.Secret)
	}
	if len(names) == 0 {
		return out, nil
	}
	have, err := st.SealedSecrets(ctx, tenant, names)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		if have[name] == nil {
			return nil, domain.Errorf(domain.CodeInvalidRequest, "credentials[%d]: no secret %q (POST /v1/secrets makes one)", i, name)
		}
	}
	return out, nil
}
