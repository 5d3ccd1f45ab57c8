package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	tetherhttp "github.com/tetherhq/tether/internal/http"
	"github.com/tetherhq/tether/internal/lifecycle"
)

// WebhookSettings are the webhook settings, read apart from the rest of
// the configuration so that they move as one block (docs/configuration.md
// lists them under WEBHOOK_*; docs/webhooks.md explains them).
type WebhookSettings struct {
	// AllowPrivate lets endpoint URLs, and the addresses deliveries
	// connect to, be loopback, private, link-local, metadata or other
	// internal addresses (WEBHOOK_ALLOW_PRIVATE, default false).
	AllowPrivate bool
	// Timeout bounds each delivery attempt (WEBHOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// RetryFor is how long a delivery is retried before its endpoint is
	// marked failing (WEBHOOK_RETRY_FOR, default 24h).
	RetryFor time.Duration
	// MaxBackoff caps the wait between attempts (WEBHOOK_MAX_BACKOFF,
	// default 10m).
	MaxBackoff time.Duration
	// MaxEndpoints caps each tenant's endpoints (WEBHOOK_MAX_ENDPOINTS,
	// default 10).
	MaxEndpoints int
	// BatchSize caps the events of one delivery (WEBHOOK_BATCH_SIZE,
	// default 100).
	BatchSize int
	// Concurrency bounds the deliveries a replica sends at once
	// (WEBHOOK_CONCURRENCY, default 8).
	Concurrency int
}

// loadWebhookSettings reads the WEBHOOK_* settings; every problem is
// reported.
func loadWebhookSettings(getenv func(string) string) (WebhookSettings, error) {
	var errs []error
	dur := func(name string, def time.Duration) time.Duration {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive Go duration such as 10s", name, v))
			return def
		}
		return d
	}
	num := func(name string, def, most int) int {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > most {
			errs = append(errs, fmt.Errorf("%s=%q: want an integer from 1 to %d", name, v, most))
			return def
		}
		return n
	}
	s := WebhookSettings{
		Timeout:      dur("WEBHOOK_TIMEOUT", lifecycle.DefaultWebhookTimeout),
		RetryFor:     dur("WEBHOOK_RETRY_FOR", lifecycle.DefaultWebhookRetryFor),
		MaxBackoff:   dur("WEBHOOK_MAX_BACKOFF", lifecycle.DefaultWebhookMaxBackoff),
		MaxEndpoints: num("WEBHOOK_MAX_ENDPOINTS", tetherhttp.DefaultWebhookMaxEndpoints, 10000),
		BatchSize:    num("WEBHOOK_BATCH_SIZE", lifecycle.DefaultWebhookBatchSize, 1000),
		Concurrency:  num("WEBHOOK_CONCURRENCY", lifecycle.DefaultWebhookConcurrency, 1000),
	}
	if v := strings.TrimSpace(getenv("WEBHOOK_ALLOW_PRIVATE")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("WEBHOOK_ALLOW_PRIVATE=%q: want true or false", v))
		}
		s.AllowPrivate = b
	}
	return s, errors.Join(errs...)
}

// worker is the delivery worker's configuration for this replica.
func (s WebhookSettings) worker(workerID string) lifecycle.WebhookConfig {
	return lifecycle.WebhookConfig{
		WorkerID: workerID, AllowPrivate: s.AllowPrivate, Timeout: s.Timeout, RetryFor: s.RetryFor,
		MaxBackoff: s.MaxBackoff, BatchSize: s.BatchSize, Concurrency: s.Concurrency,
	}
}
