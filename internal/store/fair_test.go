package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// TestClaimsShareSlotsBetweenTenants: a claim takes no more of a tenant's
// sandboxes than its share's cap minus what it holds, and fills the rest
// with other tenants' work, oldest first.
func TestClaimsShareSlotsBetweenTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 10 {
		b.create(t)
	}
	other := b.create(t, func(p *domain.CreateParams) { p.Tenant = "other" })

	claims, err := b.st.ClaimCreates(b.ctx, "sim", "", "w", 8, time.Minute, store.Share{Cap: 6, Held: map[string]int{"acme": 3}})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, c := range claims {
		per[c.Sandbox.Tenant]++
	}
	if per["acme"] != 3 || per["other"] != 1 || claims[len(claims)-1].Sandbox.ID != other.ID {
		t.Fatalf("claimed %v; want 3 of acme's (cap 6, 3 held) and other's one, oldest first", per)
	}
	// Without a cap a claim takes the oldest, whoever's.
	if claims, _ := b.st.ClaimCreates(b.ctx, "sim", "", "w", 8, time.Minute, store.Share{}); len(claims) != 7 {
		t.Fatalf("an unshared claim took %d; want acme's remaining 7", len(claims))
	}
}

// TestConcurrentFairClaimsAreDisjoint: claimers running at once over one
// tenant's backlog each take their own share of it, none the same row.
func TestConcurrentFairClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// More than four claimers' candidate windows (2×8+32 each): each
	// locks its own.
	for range 200 {
		b.create(t)
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			claims, err := b.st.ClaimCreates(b.ctx, "sim", "", fmt.Sprint("w", w), 8, time.Minute, store.Share{Cap: 6})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range claims {
				seen[c.Sandbox.ID]++
			}
		})
	}
	wg.Wait()
	for id, n := range seen {
		if n > 1 {
			t.Fatalf("%s claimed %d times", id, n)
		}
	}
	if len(seen) != 24 {
		t.Fatalf("4 concurrent claimers of 6 each took %d sandboxes in all; want 24, none waiting for another", len(seen))
	}
}
