package store_test

import (
	"errors"
	"testing"

	"github.com/tetherhq/tether/internal/domain"
)

// TestE2BSandboxes: a sandbox made through E2B's API is recorded once,
// under its own tenant, with whether it allows public traffic; an
// unknown sandbox cannot be recorded, and one not recorded is not found.
func TestE2BSandboxes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub, priv, plain := b.create(t), b.create(t), b.create(t)
	for _, tc := range []struct {
		sb     domain.Sandbox
		public bool
	}{{pub, true}, {priv, false}} {
		rec, err := b.st.RecordE2BSandbox(b.ctx, tc.sb.ID, tc.public)
		want := domain.E2BSandbox{SandboxID: tc.sb.ID, Tenant: "acme", PublicTraffic: tc.public}
		if err != nil || rec != want {
			t.Fatalf("RecordE2BSandbox = %+v, %v; want %+v", rec, err, want)
		}
		if got, err := b.st.E2BSandbox(b.ctx, tc.sb.ID); err != nil || got != want {
			t.Errorf("E2BSandbox = %+v, %v; want %+v", got, err, want)
		}
	}
	if _, err := b.st.RecordE2BSandbox(b.ctx, pub.ID, false); err == nil {
		t.Error("a sandbox was recorded twice")
	}
	if got, _ := b.st.E2BSandbox(b.ctx, pub.ID); !got.PublicTraffic {
		t.Error("a second record changed the first")
	}
	if _, err := b.st.E2BSandbox(b.ctx, plain.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("E2BSandbox of a sandbox not recorded: %v; want ErrNotFound", err)
	}
	if _, err := b.st.RecordE2BSandbox(b.ctx, domain.NewID(), true); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("RecordE2BSandbox of an unknown sandbox: %v; want ErrNotFound", err)
	}
}
