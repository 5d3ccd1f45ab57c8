package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
)

// TestFastScanMatchesScan reads sandboxes in many shapes (labels and env
// with escapes, quotes, non-ASCII and empty values; owners, ready,
// paused, ended and released ones; a far-future expiry) by scanSandbox's
// fast path and by pgx's Scan: the two must give the same sandbox, and the
// fast path must have run (not deferred to pgx).
func TestFastScanMatchesScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// First (claims take the oldest): one ready, one ready, ended and
	// released, one cancelled before its create.
	r := b.ready(t)
	ended := b.ready(t)
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", ended.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
		t.Fatal(err)
	}
	cancelled := b.create(t)
	if _, _, err := b.st.EndSandbox(b.ctx, "acme", cancelled.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "x"); err != nil {
		t.Fatal(err)
	}
	b.release(t, ended)
	ids := []string{r.ID, ended.ID, cancelled.ID}
	labelSets := []map[string]string{
		{},
		{"team": "a"},
		{"a": "", "b c": "d e", "ünï": "cødé ✓", "emoji": "🙂"},
		{"quote": `say "hi"`, "back": `C:\dir`, "nl": "a\nb", "tab": "\t", "ctl": "\u0001", "html": "<&>"},
		{"k1": "v1", "k2": "v2", "k3": "v3", "k4": "v4"},
	}
	for i, labels := range labelSets {
		sb := b.create(t, func(p *domain.CreateParams) {
			p.Labels = labels
			p.Env = labelSets[(i+1)%len(labelSets)]
			p.Setup = "echo setup " + string(rune('a'+i))
			p.Params = []byte(`{"size": "small", "n": 1}`)
			if i%2 == 1 {
				p.Owner = "owner-" + string(rune('a'+i))
				p.OwnerTTL = time.Minute
			}
			if i == 4 {
				p.TTL = 200 * 365 * 24 * time.Hour
			}
		})
		ids = append(ids, sb.ID)
	}

	for _, id := range ids {
		for _, client := range []bool{false, true} {
			for _, extra := range []bool{false, true} {
				fast, slow, ran, err := b.st.ScanBothWays(b.ctx, id, client, extra)
				if err != nil {
					t.Fatalf("%s (client %v, extra %v): %v", id, client, extra, err)
				}
				if !ran {
					t.Errorf("%s (client %v, extra %v): the fast path deferred to pgx", id, client, extra)
				}
				if !reflect.DeepEqual(fast, slow) {
					t.Errorf("%s (client %v, extra %v):\nfast %+v\nslow %+v", id, client, extra, fast, slow)
				}
			}
		}
	}
}
