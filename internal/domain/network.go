package domain

import (
	"time"

	"github.com/tetherhq/tether/provider"
)

// NetworkChanged is the State of a Change that announces an edit of a
// sandbox's network rules rather than a new state: every replica's egress
// proxy reloads the sandbox's rules when it hears one. It is no sandbox
// state (Valid is false).
const NetworkChanged State = "network"

// NetworkAllowlist is params.network of a sandbox whose way out is an
// allow list.
const NetworkAllowlist = "allowlist"

// NetworkCredential is one entry of params.credentials: for requests to
// Host over HTTPS, the egress proxy adds Header with Format's "{secret}"
// replaced by the tenant's secret named Secret (or, with Username, basic
// authentication of Username and the secret). The secret's value never
// enters the sandbox.
type NetworkCredential struct {
	Host     string `json:"host"`
	Header   string `json:"header,omitempty"`
	Format   string `json:"format,omitempty"`
	Username string `json:"username,omitempty"`
	Secret   string `json:"secret"`
}

// SandboxNetwork is a sandbox's network rules as the registry holds them:
// its create's params.allow and params.credentials until an edit replaces
// them (Edited).
type SandboxNetwork struct {
	SandboxID string
	Tenant    string
	Provider  string
	State     State
	// Mode is the create's params.network ("" for the provider's default).
	Mode        string
	Allow       []string
	Credentials []NetworkCredential
	// Policies are the names of the tenant's network policies attached;
	// Attached, those of them that exist, with their rules.
	Policies []string
	Attached []NetworkPolicy
	// Edited tells rules set by an edit from the create's; UpdatedAt and
	// UpdatedBy are the last edit's.
	Edited    bool
	UpdatedAt time.Time
	UpdatedBy Caller
	// LiveUntil is when the sandbox's credentials stop working unless
	// renewed: the earlier of its expiry and its owner's lease, if it has
	// an owner.
	LiveUntil time.Time
}

// NetworkEdit is an edit of a sandbox's network rules: the allow list
// replaced, and the credentials and the policies too unless nil.
type NetworkEdit struct {
	Tenant, SandboxID string
	Allow             []string
	Credentials       []NetworkCredential
	Policies          []string
	By                Caller
}

// NetworkPolicy is a tenant's named network policy: an allow list and
// credentials that allow-list sandboxes attach by name.
type NetworkPolicy struct {
	Tenant      string              `json:"-"`
	Name        string              `json:"name"`
	Allow       []string            `json:"allow"`
	Credentials []NetworkCredential `json:"credentials"`
	CreatedAt   time.Time           `json:"-"`
	UpdatedAt   time.Time           `json:"-"`
	UpdatedBy   string              `json:"-"`
}

// ValidPolicyName reports whether name may name a network policy: as a
// secret's name.
func ValidPolicyName(name string) bool { return ValidSecretName(name) }

// MaxPolicies bounds the policies attached to one sandbox.
const MaxPolicies = 16

// Secret is a tenant's secret, without its value (which Tether keeps
// sealed and never shows).
type Secret struct {
	Tenant    string
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// UpdatedBy is the API key that set the value last.
	UpdatedBy string
}

// MaxSecretName is the longest secret name; MaxSecretValue the largest
// value, in bytes.
const (
	MaxSecretName  = 100 // as provider.ValidName
	MaxSecretValue = 8192
)

// ValidSecretName reports whether name may name a secret: 1-100
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func ValidSecretName(name string) bool { return provider.ValidName(name) }
