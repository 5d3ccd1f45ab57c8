package http_test

import (
	"context"
	"net/http"
	"testing"
)

// TestCallsThatJudgeLeasesCreditAnOutageFirst: this replica has just come
// back from an outage that no replica could reach Postgres through (the
// last record of a replica reaching it is 30 s old) and during which
// agent-1's lease lapsed. Each call that judges that lease, a heartbeat, a
// create naming the owner and a transfer to it, credits the outage first
// (SettleOutage): agent-1 keeps its sandbox, whose history says why.
// Without the credit, each of them would end the sandbox owner_expired.
func TestCallsThatJudgeLeasesCreditAnOutageFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		call func(t *testing.T, b *bundle, spare string)
	}{
		{"heartbeat", func(t *testing.T, b *bundle, _ string) {
			wantStatus(t, b.do(t, http.MethodPut, "/v1/owners/agent-1/lease", map[string]any{"ttl_seconds": 60}), http.StatusOK)
		}},
		{"create naming the owner", func(t *testing.T, b *bundle, _ string) {
			b.create(t, keyA, map[string]any{"owner": "agent-1"})
		}},
		{"transfer to the owner", func(t *testing.T, b *bundle, spare string) {
			wantStatus(t, b.do(t, http.MethodPut, "/v1/sandboxes/"+spare+"/owner", map[string]any{"owner": "agent-1"}), http.StatusOK)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			sb := b.create(t, keyA, map[string]any{"owner": "agent-1"})
			spare := b.create(t, keyA, map[string]any{})
			ctx := context.Background()
			if _, err := b.Store.Pool().Exec(ctx, `
				INSERT INTO outage_credit (id, credited_until, reached_at) VALUES (true, now() - interval '30 seconds', now() - interval '30 seconds')
				ON CONFLICT (id) DO UPDATE SET reached_at = EXCLUDED.reached_at`); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Store.Pool().Exec(ctx, `UPDATE owners SET expires_at = now() - interval '1 second' WHERE name = 'agent-1'`); err != nil {
				t.Fatal(err)
			}
			tc.call(t, b, spare.ID)
			if got := b.get(t, keyA, sb.ID); got.State != "requested" {
				reason := ""
				if got.Reason != nil {
					reason = *got.Reason
				}
				t.Fatalf("agent-1's sandbox is %s (%s) after the %s, want still requested", got.State, reason, tc.name)
			}
			var credited int
			for _, e := range b.events(t, keyA, "/v1/sandboxes/"+sb.ID+"/events").Items {
				if e.Reason != nil && *e.Reason == "outage_credited" && e.Actor == "janitor" {
					credited++
				}
			}
			if credited != 1 {
				t.Errorf("agent-1's sandbox has %d outage_credited events, want 1", credited)
			}
		})
	}
}
