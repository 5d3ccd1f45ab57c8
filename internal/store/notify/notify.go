// Package notify tells in-process subscribers that sandboxes changed,
// whether in this process or in another replica, through Postgres
// LISTEN/NOTIFY. Its Notifier is the store's Announcer (see
// store.WithAnnouncer).
package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
)

// notifyChannel is the Postgres channel sandbox changes are announced on.
const notifyChannel = "tether_sandbox"

// Notifier tells in-process subscribers — executors waiting for work,
// clients waiting for a sandbox to settle — that sandboxes changed, whether
// the change happened in this process or in another replica.
//
// The store announces each change after its transaction commits. Local
// subscribers hear of it at once; other replicas through Postgres
// LISTEN/NOTIFY, sent in batches from a connection of the notifier's own.
// Changes are not announced from inside the transactions that make them: a
// transaction that NOTIFYs holds a database-wide lock through its commit,
// which would put every durable commit in single file behind the WAL flush.
//
// Announcements only wake subscribers up; they re-read the registry for the
// truth and also poll, so a lost announcement (a crash between commit and
// NOTIFY, a full queue) costs latency, never correctness.
type Notifier struct {
	cfg    *pgx.ConnConfig
	log    *slog.Logger
	origin string // tells this process's own NOTIFYs from others'

	outbox chan domain.Change

	mu   sync.Mutex
	all  map[chan domain.Change]struct{}
	byID map[string]map[chan domain.Change]struct{}
}

// outboxSize bounds the announcements waiting to be sent to other replicas;
// past it they are dropped (the replicas' polling covers them).
const outboxSize = 8192

// New returns a notifier that talks to Postgres on connections of its own,
// made with the pool's settings.
func New(pool *pgxpool.Pool, log *slog.Logger) *Notifier {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &Notifier{
		cfg:    pool.Config().ConnConfig.Copy(),
		log:    log,
		origin: hex.EncodeToString(b[:]),
		outbox: make(chan domain.Change, outboxSize),
		all:    make(map[chan domain.Change]struct{}),
		byID:   make(map[string]map[chan domain.Change]struct{}),
	}
}

// Announce tells local subscribers about changes now and queues them for
// the other replicas. It never blocks.
func (n *Notifier) Announce(changes ...domain.Change) {
	for _, c := range changes {
		n.publish(c)
		select {
		case n.outbox <- c:
		default: // full: the other replicas will poll
		}
	}
}

// Run listens for other replicas' announcements and sends this process's,
// until ctx is done, reconnecting with backoff when a connection fails.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { n.reconnecting(ctx, "listen", n.listen) })
	wg.Go(func() { n.reconnecting(ctx, "send", n.send) })
	wg.Wait()
}

func (n *Notifier) reconnecting(ctx context.Context, what string, fn func(context.Context, *pgx.Conn) error) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, n.cfg)
		if err == nil {
			err = fn(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			backoff = 100 * time.Millisecond
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("notifier: connection lost; reconnecting", "conn", what, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (n *Notifier) listen(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	// Changes made while the connection was down were not heard.
	n.publish(domain.Change{})
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		origin, change, ok := parseChange(msg.Payload)
		if ok && origin != n.origin {
			n.publish(change)
		}
	}
}

// send forwards queued announcements, all that are waiting in one
// statement, so a busy replica sends few large batches.
func (n *Notifier) send(ctx context.Context, conn *pgx.Conn) error {
	batch := make([]string, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-n.outbox:
			batch = append(batch[:0], formatChange(n.origin, c))
		}
	drain:
		for len(batch) < cap(batch) {
			select {
			case c := <-n.outbox:
				batch = append(batch, formatChange(n.origin, c))
			default:
				break drain
			}
		}
		if _, err := conn.Exec(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, notifyChannel, batch); err != nil {
			return err
		}
	}
}

func formatChange(origin string, c domain.Change) string {
	released := "false"
	if c.Released {
		released = "true"
	}
	id := c.ID
	if id == "" {
		id = "-"
	}
	return origin + " " + id + " " + string(c.State) + " " + released
}

func parseChange(payload string) (origin string, c domain.Change, ok bool) {
	f := strings.Fields(payload)
	if len(f) != 4 {
		return "", domain.Change{}, false
	}
	id := f[1]
	if id == "-" {
		id = ""
	}
	return f[0], domain.Change{ID: id, State: domain.State(f[2]), Released: f[3] == "true"}, true
}

// Subscribe returns a channel that receives every change, and a function
// that ends the subscription. A reader too slow for the channel's buffer
// loses no signal: what it has not read is replaced by a change with no id,
// "look at everything again".
func (n *Notifier) Subscribe() (<-chan domain.Change, func()) {
	ch := make(chan domain.Change, allBuffer)
	n.mu.Lock()
	n.all[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.all, ch)
		n.mu.Unlock()
	}
}

// SubscribeSandbox is Subscribe for the changes of one sandbox (and the
// look-again signal, a change with no id).
func (n *Notifier) SubscribeSandbox(id string) (<-chan domain.Change, func()) {
	ch := make(chan domain.Change, 1)
	n.mu.Lock()
	subs := n.byID[id]
	if subs == nil {
		subs = make(map[chan domain.Change]struct{})
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

func (n *Notifier) publish(note domain.Change) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.all {
		offerAll(ch, note)
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

// allBuffer is the buffer of a Subscribe channel.
const allBuffer = 256

// offerAll sends note, or, when ch is full, replaces its contents with the
// look-again signal.
func offerAll(ch chan domain.Change, note domain.Change) {
	select {
	case ch <- note:
		return
	default:
	}
	for drained := false; !drained; {
		select {
		case <-ch:
		default:
			drained = true
		}
	}
	select {
	case ch <- domain.Change{}:
	default:
	}
}

// offer makes note the one change ch holds, unless ch holds a change of
// the same sandbox that is further along (changes are announced after
// commit, by several goroutines and replicas, and may arrive out of order)
// or the look-again signal.
func offer(ch chan domain.Change, note domain.Change) {
	select {
	case held := <-ch:
		if held.ID == "" || (held.ID == note.ID && progress(held) > progress(note)) {
			note = held // look-again dominates any change
		}
	default:
	}
	select {
	case ch <- note:
	default:
	}
}

// progress orders the changes of one sandbox: states along the lifecycle,
// then released.
func progress(c domain.Change) int {
	p := 0
	switch {
	case c.State.Terminal():
		p = 3
	case c.State == domain.StateReady:
		p = 2
	case c.State == domain.StateCreating:
		p = 1
	}
	if c.Released {
		p = 4
	}
	return p
}
