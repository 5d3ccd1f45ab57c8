package domain

// E2BSandbox is what Tether keeps of a sandbox made through E2B's API
// (docs/e2b.md) for E2B's per-sandbox hosts, {port}-{sandbox id}.E2B_DOMAIN:
// whether anyone may reach its ports there (public traffic, E2B's
// default) or only a request with its traffic access token. A sandbox
// made otherwise has none, and is not served there.
type E2BSandbox struct {
	SandboxID     string
	Tenant        string
	PublicTraffic bool
}
