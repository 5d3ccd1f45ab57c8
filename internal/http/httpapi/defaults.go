package httpapi

import "time"

// Preview defaults.
const (
	DefaultPreviewTTL    = time.Hour
	DefaultPreviewMaxTTL = 24 * time.Hour
)

// DefaultMaxStreamsPerTenant bounds a tenant's open event streams.
const DefaultMaxStreamsPerTenant = 20

// DefaultWebhookMaxEndpoints caps each tenant's webhook endpoints.
const DefaultWebhookMaxEndpoints = 10

// DefaultTenantMaxKeys caps each tenant's API keys that are not revoked.
const DefaultTenantMaxKeys = 100
