package store_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/sandbox"
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
	other := b.create(t, func(p *sandbox.CreateParams) { p.Tenant = "other" })

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
