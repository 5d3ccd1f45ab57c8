package lifecycle

import (
	"context"
	"log/slog"
	"time"

	"github.com/tetherhq/tether/internal/store"
)

// heartbeatStore is what the heartbeat needs from the registry.
type heartbeatStore interface {
	Heartbeat(ctx context.Context, n store.Node, starting bool) error
	AdoptUnplaced(ctx context.Context, node string, providers []string) (int64, error)
}

// Heartbeat keeps this node's row in the registry fresh, so that the other
// nodes count it alive. It starts and stops as every worker of the
// package does (lifetime).
type Heartbeat struct {
	// offered says which providers the node offers now; each beat
	// records them, so that a provider that becomes unavailable on a node
	// stops drawing creates there.
	offered   func(context.Context) []string
	store     heartbeatStore
	node      store.Node
	hostBound []string
	every     time.Duration
	log       *slog.Logger

	lifetime
}

// NewHeartbeat returns a heartbeat for node that beats six times per grace
// period, so that a few failed beats in a row do not make it dead.
// hostBound names the node's host-bound providers.
func NewHeartbeat(st heartbeatStore, node store.Node, offered func(context.Context) []string, hostBound []string, grace time.Duration, log *slog.Logger) *Heartbeat {
	return &Heartbeat{
		store: st, node: node, offered: offered, hostBound: hostBound,
		every: max(grace/6, 50*time.Millisecond),
		log:   log.With("component", "heartbeat", "node", node.ID),
	}
}

// Start registers the node, adopts the sandboxes a single-host Tether made
// before nodes existed, and then beats in the background until Stop. It
// returns the first beat's error: a node that cannot register must not
// start work, and its heartbeat does not start either.
//
// Stop (lifetime's) ends the heartbeat and waits, until its context is
// done, for a beat in flight (the stop cuts it short). The node's row
// stays: a replica restarting within the grace period keeps its node's
// sandboxes.
func (h *Heartbeat) Start(ctx context.Context) error {
	return h.start(ctx, func(ctx context.Context) (func(), error) {
		if err := h.store.Heartbeat(ctx, h.beat(ctx), true); err != nil {
			return nil, err
		}
		if len(h.hostBound) > 0 {
			if n, err := h.store.AdoptUnplaced(ctx, h.node.ID, h.hostBound); err != nil {
				h.log.Warn("heartbeat: could not adopt sandboxes without a node", "err", err)
			} else if n > 0 {
				h.log.Info("heartbeat: adopted sandboxes made before nodes", "count", n)
			}
		}
		return func() { h.run(ctx) }, nil
	})
}

// run beats every period until ctx is done.
func (h *Heartbeat) run(ctx context.Context) {
	ticker := time.NewTicker(h.every)
	defer ticker.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		// A beat stuck on a dead connection must not hold the others
		// for long; three beat periods leave a slow one time to land.
		bctx, cancel := context.WithTimeout(ctx, 3*h.every)
		err := h.store.Heartbeat(bctx, h.beat(bctx), false)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			h.log.Warn("heartbeat: failed; the node counts as dead if this lasts past NODE_GRACE", "err", err)
			failing = true
		case err == nil && failing:
			h.log.Info("heartbeat: recovered")
			failing = false
		}
	}
}

// beat is the node's row as of now.
func (h *Heartbeat) beat(ctx context.Context) store.Node {
	n := h.node
	if h.offered != nil {
		n.Providers = h.offered(ctx)
	}
	return n
}
