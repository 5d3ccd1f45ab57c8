package server

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/tetherhq/tether/internal/egressproxy"
	"github.com/tetherhq/tether/internal/secretbox"
)

// egressConfig is the egress proxy's configuration (the "allowlist"
// network of local sandboxes): how it resolves names and whether rules
// may reach private addresses. docs/providers.md explains them.
type egressConfig struct {
	// Hosts resolves names instead of the host's resolver (EGRESS_HOSTS);
	// nil: the host's.
	Hosts map[string][]netip.Addr
	// AllowPrivate lets rules reach private, loopback and link-local
	// addresses and the host's own (EGRESS_ALLOW_PRIVATE).
	AllowPrivate bool
}

// egressSettings are the EGRESS_* settings (config.Egress).
var egressSettings = []setting{
	{name: "EGRESS_HOSTS", doc: "how the egress proxy resolves names: name=address pairs, comma-separated (unset: the host's resolver)",
		set: func(c *config, v string) error {
			c.Egress.Hosts = nil
			if strings.TrimSpace(v) == "" {
				return nil
			}
			hosts, err := egressproxy.ParseHosts(v)
			if err != nil {
				return fmt.Errorf("EGRESS_HOSTS: %w", err)
			}
			c.Egress.Hosts = hosts
			return nil
		}},
	boolean("EGRESS_ALLOW_PRIVATE", "let allow-list rules reach private, loopback and link-local addresses and the host's own",
		func(c *config) *bool { return &c.Egress.AllowPrivate }),
	{name: "SECRETS_KEY", doc: "the key tenants' secrets are sealed under: 32 bytes, base64 or hex (openssl rand -base64 32); unset: no secrets",
		set: func(c *config, v string) error {
			c.SecretsKey = nil
			if strings.TrimSpace(v) == "" {
				return nil
			}
			key, err := secretbox.ParseKey(v)
			if err != nil {
				return fmt.Errorf("SECRETS_KEY: %w", err)
			}
			c.SecretsKey = key
			return nil
		}},
}
