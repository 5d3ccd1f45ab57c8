package store

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/sandbox"
)

// notifyChannel is the channel the sandboxes triggers announce changes on.
const notifyChannel = "tether_sandbox"

// Notifier fans Postgres LISTEN/NOTIFY announcements of sandbox changes out
// to in-process subscribers: executors waiting for work, and clients waiting
// for a sandbox to settle. Changes only wake subscribers up; they
// re-read the registry for the truth, so a dropped notification costs
// latency (the subscribers also poll), never correctness.
type Notifier struct {
	cfg *pgx.ConnConfig
	log *slog.Logger

	mu   sync.Mutex
	all  map[chan sandbox.Change]struct{}
	byID map[string]map[chan sandbox.Change]struct{}
}

// NewNotifier returns a notifier that listens on its own connection, made
// with the pool's connection settings.
func NewNotifier(pool *pgxpool.Pool, log *slog.Logger) *Notifier {
	return &Notifier{
		cfg:  pool.Config().ConnConfig.Copy(),
		log:  log,
		all:  make(map[chan sandbox.Change]struct{}),
		byID: make(map[string]map[chan sandbox.Change]struct{}),
	}
}

// Run listens until ctx is done, reconnecting with backoff when the
// connection fails.
func (n *Notifier) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := n.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("notifier: connection lost; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (n *Notifier) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, n.cfg)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	// Changes made while the connection was down were not announced.
	n.publish(sandbox.Change{})
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.publish(parseChange(msg.Payload))
	}
}

func parseChange(payload string) sandbox.Change {
	f := strings.Fields(payload)
	if len(f) != 3 {
		return sandbox.Change{}
	}
	return sandbox.Change{ID: f[0], State: sandbox.State(f[1]), Released: f[2] == "true"}
}

// Subscribe returns a channel that receives every notification, and a
// function that ends the subscription. The channel holds the latest
// notification only: a slow reader sees fewer, never stale-only, signals.
func (n *Notifier) Subscribe() (<-chan sandbox.Change, func()) {
	ch := make(chan sandbox.Change, 1)
	n.mu.Lock()
	n.all[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.all, ch)
		n.mu.Unlock()
	}
}

// SubscribeSandbox is Subscribe for the notifications of one sandbox (and
// the reconnection signal).
func (n *Notifier) SubscribeSandbox(id string) (<-chan sandbox.Change, func()) {
	ch := make(chan sandbox.Change, 1)
	n.mu.Lock()
	subs := n.byID[id]
	if subs == nil {
		subs = make(map[chan sandbox.Change]struct{})
		n.byID[id] = subs
	}
	subs[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.byID[id], ch)
		if len(n.byID[id]) == 0 {
			delete(n.byID, id)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) publish(note sandbox.Change) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.all {
		offer(ch, note)
	}
	if note.ID == "" {
		for _, subs := range n.byID {
			for ch := range subs {
				offer(ch, note)
			}
		}
		return
	}
	for ch := range n.byID[note.ID] {
		offer(ch, note)
	}
}

// offer puts note in ch, replacing an unread older notification.
func offer(ch chan sandbox.Change, note sandbox.Change) {
	select {
	case ch <- note:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- note:
	default:
	}
}
