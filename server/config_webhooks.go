package server

import (
	"time"

	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
)

// webhookSettings are the WEBHOOK_* settings: the delivery worker's
// (config.Webhooks) and the API's checks of endpoints (config.HTTP).
// docs/webhooks.md explains them.
var webhookSettings = []setting{
	{name: "WEBHOOK_ALLOW_PRIVATE", def: "false", doc: "let endpoints and deliveries reach loopback, private and other internal addresses",
		set: func(c *config, v string) error {
			err := boolean("WEBHOOK_ALLOW_PRIVATE", "", func(c *config) *bool { return &c.Webhooks.AllowPrivate }).set(c, v)
			c.HTTP.WebhookAllowPrivate = c.Webhooks.AllowPrivate
			return err
		}},
	duration("WEBHOOK_TIMEOUT", lifecycle.DefaultWebhookTimeout, "how long one delivery attempt may take",
		func(c *config) *time.Duration { return &c.Webhooks.Timeout }),
	duration("WEBHOOK_RETRY_FOR", lifecycle.DefaultWebhookRetryFor, "how long a delivery is retried before its endpoint is marked failing",
		func(c *config) *time.Duration { return &c.Webhooks.RetryFor }),
	duration("WEBHOOK_MAX_BACKOFF", lifecycle.DefaultWebhookMaxBackoff, "the longest wait between attempts",
		func(c *config) *time.Duration { return &c.Webhooks.MaxBackoff }),
	countUpTo("WEBHOOK_MAX_ENDPOINTS", tetherhttp.DefaultWebhookMaxEndpoints, 10000, "webhook endpoints a tenant may have",
		func(c *config) *int { return &c.HTTP.WebhookMaxEndpoints }),
	countUpTo("WEBHOOK_BATCH_SIZE", lifecycle.DefaultWebhookBatchSize, 1000, "events in one delivery, at most",
		func(c *config) *int { return &c.Webhooks.BatchSize }),
	countUpTo("WEBHOOK_CONCURRENCY", lifecycle.DefaultWebhookConcurrency, 1000, "deliveries a replica sends at once",
		func(c *config) *int { return &c.Webhooks.Concurrency }),
	countOrZero("WEBHOOK_TENANT_CONCURRENCY", 0, "deliveries of one tenant a replica sends at once; 0: a quarter of WEBHOOK_CONCURRENCY, at least 1",
		func(c *config) *int { return &c.Webhooks.TenantConcurrency }),
}
