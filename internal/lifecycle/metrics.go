package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lifecycle machinery's Prometheus instruments. The zero
// value is not usable; make one with NewMetrics.
type Metrics struct {
	// ProviderCalls observes every provider call by provider, operation and
	// outcome (ok, error, cancelled).
	ProviderCalls *prometheus.HistogramVec
	// ProviderErrors counts failed provider calls by provider and operation.
	ProviderErrors *prometheus.CounterVec
	// ClaimLatency observes how long requested sandboxes waited for an
	// executor, from creation to claim.
	ClaimLatency *prometheus.HistogramVec
	// Claims counts claims by provider and kind (create, release).
	Claims *prometheus.CounterVec
	// InFlight is the number of provider operations running in this process.
	InFlight *prometheus.GaugeVec
	// ProviderPanics counts provider calls that panicked (and were
	// recovered), by provider and operation.
	ProviderPanics *prometheus.CounterVec
}

// NewMetrics makes the lifecycle metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ProviderCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_provider_call_duration_seconds",
			Help:    "Duration of provider calls by provider, operation and outcome.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 15, 60, 300},
		}, []string{"provider", "op", "outcome"}),
		ProviderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_provider_errors_total",
			Help: "Failed provider calls by provider and operation.",
		}, []string{"provider", "op"}),
		ClaimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_executor_claim_latency_seconds",
			Help:    "Time from a sandbox's request to its first claim by an executor.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		}, []string{"provider"}),
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_executor_claims_total",
			Help: "Sandboxes claimed by this process's executor, by provider and kind.",
		}, []string{"provider", "kind"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_executor_in_flight",
			Help: "Provider operations running in this process, by provider and kind.",
		}, []string{"provider", "kind"}),
		ProviderPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_provider_panics_total",
			Help: "Provider calls that panicked and were recovered, by provider and operation.",
		}, []string{"provider", "op"}),
	}
	if reg != nil {
		reg.MustRegister(m.ProviderCalls, m.ProviderErrors, m.ClaimLatency, m.Claims, m.InFlight, m.ProviderPanics)
	}
	return m
}
