package lifecycle

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// statsReader is what the registry collector needs.
type statsReader interface {
	Stats(ctx context.Context) (store.Stats, error)
	Now() time.Time
}

// RegistryCollector exports the registry's gauges (sandboxes by state, the
// executor's queue depth, the release backlog) by querying Postgres when
// scraped, so every replica reports the same truth.
type RegistryCollector struct {
	store statsReader

	sandboxes     *prometheus.Desc
	queueDepth    *prometheus.Desc
	unreleased    *prometheus.Desc
	oldestPending *prometheus.Desc
	nodeUp        *prometheus.Desc
	nodeSandboxes *prometheus.Desc
	nodeAge       *prometheus.Desc
	up            *prometheus.Desc
}

// NewRegistryCollector returns a collector over st.
func NewRegistryCollector(st statsReader) *RegistryCollector {
	return &RegistryCollector{
		store:         st,
		sandboxes:     prometheus.NewDesc("tether_sandboxes", "Live sandboxes by provider and state.", []string{"provider", "state"}, nil),
		queueDepth:    prometheus.NewDesc("tether_executor_queue_depth", "Sandboxes requested and not yet claimed, by provider.", []string{"provider"}, nil),
		unreleased:    prometheus.NewDesc("tether_release_pending", "Terminal sandboxes whose provider resources are not yet confirmed released.", nil, nil),
		oldestPending: prometheus.NewDesc("tether_release_oldest_pending_seconds", "Age of the oldest terminal sandbox not yet released (0 if none).", nil, nil),
		nodeUp:        prometheus.NewDesc("tether_node_up", "1 while the node's heartbeat is within NODE_GRACE, 0 once it is dead, by node.", []string{"node"}, nil),
		nodeSandboxes: prometheus.NewDesc("tether_node_sandboxes", "Live sandboxes placed on the node (host-bound providers only), by node.", []string{"node"}, nil),
		nodeAge:       prometheus.NewDesc("tether_node_heartbeat_age_seconds", "Time since the node's last heartbeat, by node.", []string{"node"}, nil),
		up:            prometheus.NewDesc("tether_registry_up", "1 if the last registry query for metrics succeeded.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RegistryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sandboxes
	ch <- c.queueDepth
	ch <- c.unreleased
	ch <- c.oldestPending
	ch <- c.nodeUp
	ch <- c.nodeSandboxes
	ch <- c.nodeAge
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *RegistryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := c.store.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for k, n := range st.Live {
		ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(n), k[0], k[1])
		if domain.State(k[1]) == domain.StateRequested {
			ch <- prometheus.MustNewConstMetric(c.queueDepth, prometheus.GaugeValue, float64(n), k[0])
		}
	}
	ch <- prometheus.MustNewConstMetric(c.unreleased, prometheus.GaugeValue, float64(st.Unreleased))
	var age float64
	if st.OldestUnreleased != nil {
		age = c.store.Now().Sub(*st.OldestUnreleased).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, age)
	for _, n := range st.Nodes {
		up := 0.0
		if n.Alive {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.nodeUp, prometheus.GaugeValue, up, n.ID)
		ch <- prometheus.MustNewConstMetric(c.nodeSandboxes, prometheus.GaugeValue, float64(n.LiveSandboxes), n.ID)
		ch <- prometheus.MustNewConstMetric(c.nodeAge, prometheus.GaugeValue, max(0, c.store.Now().Sub(n.HeartbeatAt).Seconds()), n.ID)
	}
}

// ProviderCollector reports whether each provider can serve, as
// tether_provider_available.
type ProviderCollector struct {
	providers []domain.Provider
	available *prometheus.Desc
}

// NewProviderCollector returns a collector over the providers.
func NewProviderCollector(providers []domain.Provider) *ProviderCollector {
	return &ProviderCollector{providers: providers,
		available: prometheus.NewDesc("tether_provider_available", "1 if the provider can create sandboxes on this replica, by provider.", []string{"provider"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *ProviderCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.available }

// Collect implements prometheus.Collector.
func (c *ProviderCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, p := range c.providers {
		v := 0.0
		if p.Info(ctx).Available {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, v, p.Name())
	}
}
