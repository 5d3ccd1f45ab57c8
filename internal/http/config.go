package http

import "github.com/tetherhq/tether/internal/http/httpapi"

// Config is what the server is configured with (its limits and
// defaults); it is httpapi.Config, which every handler reads.
type Config = httpapi.Config

// The limits a zero Config field stands for, and NoLimit, as httpapi
// defines them.
const (
	DefaultAuthCacheTTL            = httpapi.DefaultAuthCacheTTL
	DefaultAuthFailuresPerSecond   = httpapi.DefaultAuthFailuresPerSecond
	DefaultBodyGrace               = httpapi.DefaultBodyGrace
	DefaultCreateTimeout           = httpapi.DefaultCreateTimeout
	DefaultKeyRequestsPerSecond    = httpapi.DefaultKeyRequestsPerSecond
	DefaultMaxBodyBytes            = httpapi.DefaultMaxBodyBytes
	DefaultMaxExecOutput           = httpapi.DefaultMaxExecOutput
	DefaultMaxExecTimeout          = httpapi.DefaultMaxExecTimeout
	DefaultMaxFileBytes            = httpapi.DefaultMaxFileBytes
	DefaultMaxLifetime             = httpapi.DefaultMaxLifetime
	DefaultMaxStreamsPerTenant     = httpapi.DefaultMaxStreamsPerTenant
	DefaultMaxWait                 = httpapi.DefaultMaxWait
	DefaultMinBodyRate             = httpapi.DefaultMinBodyRate
	DefaultOwnerTTL                = httpapi.DefaultOwnerTTL
	DefaultPauseTimeout            = httpapi.DefaultPauseTimeout
	DefaultPreviewMaxTTL           = httpapi.DefaultPreviewMaxTTL
	DefaultPreviewTTL              = httpapi.DefaultPreviewTTL
	DefaultSnapshotMaxPerTenant    = httpapi.DefaultSnapshotMaxPerTenant
	DefaultSnapshotTimeout         = httpapi.DefaultSnapshotTimeout
	DefaultTTL                     = httpapi.DefaultTTL
	DefaultTenantCreatesPerMinute  = httpapi.DefaultTenantCreatesPerMinute
	DefaultTenantMaxKeys           = httpapi.DefaultTenantMaxKeys
	DefaultTenantMaxLive           = httpapi.DefaultTenantMaxLive
	DefaultTenantRequestsPerSecond = httpapi.DefaultTenantRequestsPerSecond
	DefaultWebhookMaxEndpoints     = httpapi.DefaultWebhookMaxEndpoints
	NoLimit                        = httpapi.NoLimit
)
