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
	// Policies are the tenant's network policies attached, by name: their rules and credentials join the sandbox's own.
	Policies []string `json:"policies" example:"python"`
	// MissingPolicies are the attached policies that do not exist (deleted, or not made yet): they add nothing.
	MissingPolicies []string `json:"missing_policies"`
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
	// Policies, if given, replace the network policies attached, by name (at most 16; [] detaches them all); left out, they are kept.
	Policies *[]string `json:"policies,omitempty"`
} // @name UpdateNetworkRequest

// NetworkPolicy is a tenant's named network policy: an allow list and credentials that allow-list sandboxes attach by name (params.policies, or PATCH on their network).
type NetworkPolicy struct {
	Name string `json:"name" example:"python"`
	// Allow is the policy's allow list, as a sandbox's.
	Allow []string `json:"allow" example:"pypi.org,*.pythonhosted.org"`
	// Credentials are the policy's credentials, secrets by name; a sandbox's own credential for the same host wins.
	Credentials []NetworkCredential `json:"credentials"`
	CreatedAt   time.Time           `json:"created_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
	UpdatedAt   time.Time           `json:"updated_at" format:"date-time" example:"2026-01-02T15:04:05Z"`
} // @name NetworkPolicy

// NetworkPolicyList is every network policy of the tenant, by name.
type NetworkPolicyList struct {
	Items []NetworkPolicy `json:"items"`
} // @name NetworkPolicyList

// PutNetworkPolicyRequest is the body of PUT /v1/network-policies/{name}.
type PutNetworkPolicyRequest struct {
	// Allow is the allow list (at most 256 entries).
	Allow []string `json:"allow"`
	// Credentials are the policy's credentials (at most 32), each naming an existing secret.
	Credentials []NetworkCredential `json:"credentials,omitempty"`
} // @name PutNetworkPolicyRequest

// NetworkStore is what the network handlers need of the store.
type NetworkStore interface {
	SandboxNetwork(ctx context.Context, tenant, id string) (domain.SandboxNetwork, error)
	SetSandboxNetwork(ctx context.Context, e domain.NetworkEdit) (domain.SandboxNetwork, error)
	SealedSecrets(ctx context.Context, tenant string, names []string) (map[string][]byte, error)
	PutNetworkPolicy(ctx context.Context, p domain.NetworkPolicy, by domain.Caller) (domain.NetworkPolicy, bool, error)
	NetworkPolicies(ctx context.Context, tenant string) ([]domain.NetworkPolicy, error)
	NetworkPolicy(ctx context.Context, tenant, name string) (domain.NetworkPolicy, error)
	DeleteNetworkPolicy(ctx context.Context, tenant, name string) error
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
	out.Policies, out.MissingPolicies = nonNil(n.Policies), []string{}
	have := map[string]bool{}
	for _, p := range n.Attached {
		have[p.Name] = true
	}
	for _, name := range n.Policies {
		if !have[name] {
			out.MissingPolicies = append(out.MissingPolicies, name)
		}
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
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
		if err := checkAllow(rules, *req.Allow); err != nil {
			return err
		}
		edit := domain.NetworkEdit{Tenant: tenant, SandboxID: id, Allow: *req.Allow, By: httpapi.CallerOf(c)}
		if req.Credentials != nil {
			if edit.Credentials, err = checkCredentials(ctx, st, rules, tenant, *req.Credentials); err != nil {
				return err
			}
		}
		if req.Policies != nil {
			if err := checkPolicyNames(*req.Policies); err != nil {
				return err
			}
			edit.Policies = nonNil(*req.Policies)
		}
		n, err := st.SetSandboxNetwork(ctx, edit)
		if err != nil {
			return httpapi.NotFoundAs(err, id)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toSandboxNetwork(n))
	}
}

// checkAllow checks an allow list as the egress proxy will read it: an
// error names the entry ("allow[2] ...") or the list's fault.
func checkAllow(rules EgressRules, allow []string) error {
	err := rules.CheckAllow(allow)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "[") { // not one entry's: the list's
		msg = ": " + msg
	}
	return domain.Errorf(domain.CodeInvalidRequest, "allow%s", msg)
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

// checkPolicyNames checks the names of the policies a sandbox attaches.
func checkPolicyNames(names []string) error {
	if len(names) > domain.MaxPolicies {
		return domain.Errorf(domain.CodeInvalidRequest, "policies: %d names; at most %d are allowed", len(names), domain.MaxPolicies)
	}
	for i, name := range names {
		if !domain.ValidPolicyName(name) {
			return domain.Errorf(domain.CodeInvalidRequest, "policies[%d]: %q is not a policy name", i, name)
		}
	}
	return nil
}

func toNetworkPolicy(p domain.NetworkPolicy) NetworkPolicy {
	out := NetworkPolicy{Name: p.Name, Allow: nonNil(p.Allow), Credentials: []NetworkCredential{}, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}
	for _, c := range p.Credentials {
		out.Credentials = append(out.Credentials, NetworkCredential(c))
	}
	return out
}

// policyName returns the path's policy name, answering a malformed one as
// not found.
func policyName(c *gin.Context) (string, error) {
	name := c.Param("name")
	if !domain.ValidPolicyName(name) {
		return "", domain.Errorf(domain.CodeNotFound, "network policy %q not found", name)
	}
	return name, nil
}

func policyNotFoundAs(err error, name string) error {
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return domain.Errorf(domain.CodeNotFound, "network policy %q not found", name)
	}
	return err
}

// HandleNetworkPolicyPut stores a network policy of the caller's tenant.
//
//	@Summary		Define a network policy
//	@Description	Stores the tenant's network policy name: an allow list and credentials that allow-list sandboxes attach by name (params.policies at create, or policies in PATCH /v1/sandboxes/{id}/network). A sandbox reaches what its own rules and its policies' allow; of credentials for the same host, the sandbox's own win. Replacing a policy (200; 201 for a new name) reaches every live sandbox it is attached to, on every replica, within a second. A tenant holds at most 200 policies.
//	@ID				putNetworkPolicy
//	@Tags			sandboxes
//	@Accept			json
//	@Produce		json
//	@Param			name	path		string					true	"policy name"	example(python)
//	@Param			request	body		PutNetworkPolicyRequest	true	"the policy's rules"
//	@Success		200		{object}	NetworkPolicy			"an existing policy replaced"
//	@Success		201		{object}	NetworkPolicy
//	@Failure		400		{object}	httpapi.Problem				"INVALID_REQUEST: a rule, a credential, a secret that does not exist, or the name"
//	@Failure		413		{object}	httpapi.Problem				"PAYLOAD_TOO_LARGE"
//	@Failure		429		{object}	httpapi.Problem				"QUOTA_EXCEEDED: the tenant holds 200 policies"
//	@Failure		501		{object}	httpapi.Problem				"NOT_SUPPORTED: no egress proxy runs in this Tether"
//	@Security		BearerAuth
//	@Router			/v1/network-policies/{name} [put]
func HandleNetworkPolicyPut(st NetworkStore, rules EgressRules) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name := c.Param("name")
		if !domain.ValidPolicyName(name) {
			return domain.Errorf(domain.CodeInvalidRequest, "the name must be 1-100 letters, digits, '.', '_' and '-', starting with a letter or digit")
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if rules == nil {
			return domain.Errorf(domain.CodeNotSupported, "no egress proxy runs in this Tether: network policies apply to local's allow-list sandboxes")
		}
		var req PutNetworkPolicyRequest
		if err := httpapi.DecodeJSON(c, &req); err != nil {
			return err
		}
		if req.Allow == nil {
			return domain.Errorf(domain.CodeInvalidRequest, "allow is required ([] allows nothing of its own)")
		}
		if err := checkAllow(rules, req.Allow); err != nil {
			return err
		}
		ctx, tenant := c.Request.Context(), httpapi.TenantOf(c)
		creds, err := checkCredentials(ctx, st, rules, tenant, nonNil(req.Credentials))
		if err != nil {
			return err
		}
		p, created, err := st.PutNetworkPolicy(ctx, domain.NetworkPolicy{Tenant: tenant, Name: name, Allow: req.Allow, Credentials: creds}, httpapi.CallerOf(c))
		if err != nil {
			return err
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		return httpapi.WriteJSON(c, status, toNetworkPolicy(p))
	}
}

// HandleNetworkPolicyList lists the tenant's network policies.
//
//	@Summary		List network policies
//	@Description	Every network policy of the tenant, by name. Not paged: a tenant holds at most 200.
//	@ID				listNetworkPolicies
//	@Tags			sandboxes
//	@Produce		json
//	@Success		200	{object}	NetworkPolicyList
//	@Failure		400	{object}	httpapi.Problem				"INVALID_REQUEST: a query parameter"
//	@Security		BearerAuth
//	@Router			/v1/network-policies [get]
func HandleNetworkPolicyList(st NetworkStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		ps, err := st.NetworkPolicies(c.Request.Context(), httpapi.TenantOf(c))
		if err != nil {
			return err
		}
		out := NetworkPolicyList{Items: make([]NetworkPolicy, 0, len(ps))}
		for _, p := range ps {
			out.Items = append(out.Items, toNetworkPolicy(p))
		}
		return httpapi.WriteJSON(c, http.StatusOK, out)
	}
}

// HandleNetworkPolicyGet shows a network policy.
//
//	@Summary		A network policy
//	@Description	The tenant's network policy name.
//	@ID				getNetworkPolicy
//	@Tags			sandboxes
//	@Produce		json
//	@Param			name	path		string	true	"policy name"	example(python)
//	@Success		200		{object}	NetworkPolicy
//	@Failure		404		{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/network-policies/{name} [get]
func HandleNetworkPolicyGet(st NetworkStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name, err := policyName(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		p, err := st.NetworkPolicy(c.Request.Context(), httpapi.TenantOf(c), name)
		if err != nil {
			return policyNotFoundAs(err, name)
		}
		return httpapi.WriteJSON(c, http.StatusOK, toNetworkPolicy(p))
	}
}

// HandleNetworkPolicyDelete deletes a network policy.
//
//	@Summary		Delete a network policy
//	@Description	Deletes the tenant's network policy. The sandboxes it was attached to lose its rules and credentials within a second (their own stay); their networks list it among missing_policies until detached, and a policy made again under that name applies to them again.
//	@ID				deleteNetworkPolicy
//	@Tags			sandboxes
//	@Param			name	path	string	true	"policy name"	example(python)
//	@Success		204
//	@Failure		404	{object}	httpapi.Problem				"NOT_FOUND"
//	@Security		BearerAuth
//	@Router			/v1/network-policies/{name} [delete]
func HandleNetworkPolicyDelete(st NetworkStore) httpapi.HandlerFunc {
	return func(c *gin.Context) error {
		name, err := policyName(c)
		if err != nil {
			return err
		}
		if err := httpapi.OnlyQuery(c); err != nil {
			return err
		}
		if err := st.DeleteNetworkPolicy(c.Request.Context(), httpapi.TenantOf(c), name); err != nil {
			return policyNotFoundAs(err, name)
		}
		c.Status(http.StatusNoContent)
		return nil
	}
}
