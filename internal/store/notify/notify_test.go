package notify_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestAnnouncementsReachOtherReplicas: a change committed by one replica
// wakes the subscribers of another, through Postgres.
func TestAnnouncementsReachOtherReplicas(t *testing.T) {
	t.Parallel()
	url := storetest.NewURL(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	replica := func() (*store.Store, *notify.Notifier) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		n := notify.New(pool, log)
		wg.Go(func() { n.Run(ctx) })
		return store.New(pool, store.WithAnnouncer(n)), n
	}
	a, _ := replica()
	_, bNotes := replica()
	if _, err := a.RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	all, unsubscribe := bNotes.Subscribe()
	defer unsubscribe()

	// Replica B may still be connecting: create again until it hears one.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sb, _, err := a.CreateSandbox(ctx, domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour, CreateTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		window := time.After(500 * time.Millisecond)
	listen:
		for {
			select {
			case c := <-all:
				if c.ID == sb.ID && c.State == domain.StateRequested {
					return
				}
			case <-window:
				break listen
			}
		}
	}
	t.Fatal("replica B never heard of replica A's creates")
}
