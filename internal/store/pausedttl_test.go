package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

// pausedTTL is the PAUSED_TTL of these tests; the sandboxes' TTL is an hour
// (bundle.create).
const pausedTTL = 2 * time.Hour

// pause takes the ready sandbox id through pausing to paused.
func (b bundle) pause(t *testing.T, id string) domain.Sandbox {
	t.Helper()
	if _, changed, err := b.st.RequestPause(b.ctx, "acme", id, pauseTimeout, domain.Caller{}); err != nil || !changed {
		t.Fatalf("RequestPause: changed %v, %v", changed, err)
	}
	c := b.claimTransition(t, "w")
	sb, err := b.st.FinishTransition(b.ctx, id, c.Sandbox.Epoch, domain.StatePausing)
	if err != nil || sb.State != domain.StatePaused {
		t.Fatalf("FinishTransition(pausing) = %s, %v; want paused", sb.State, err)
	}
	return sb
}

// resume takes the paused sandbox id through resuming to ready, or, when
// refuse is set, back to paused (the provider refused).
func (b bundle) resume(t *testing.T, id string, refuse bool) domain.Sandbox {
	t.Helper()
	if _, changed, err := b.st.RequestResume(b.ctx, "acme", id, pauseTimeout, domain.Caller{}); err != nil || !changed {
		t.Fatalf("RequestResume: changed %v, %v", changed, err)
	}
	c := b.claimTransition(t, "w")
	settle, want := b.st.FinishTransition, domain.StateReady
	if refuse {
		settle = func(ctx context.Context, id string, epoch int64, from domain.State) (domain.Sandbox, error) {
			return b.st.RevertTransition(ctx, id, epoch, from, "no room")
		}
		want = domain.StatePaused
	}
	sb, err := settle(b.ctx, id, c.Sandbox.Epoch, domain.StateResuming)
	if err != nil || sb.State != want {
		t.Fatalf("settling the resume = %s, %v; want %s", sb.State, err, want)
	}
	return sb
}

// expectExpires checks the sandbox's deadline, as returned and as stored.
func (b bundle) expectExpires(t *testing.T, sb domain.Sandbox, want time.Time, what string) {
	t.Helper()
	if !sb.ExpiresAt.Equal(want) {
		t.Errorf("%s: expires_at = %v, want %v (off by %v)", what, sb.ExpiresAt, want, sb.ExpiresAt.Sub(want))
	}
	cur, err := b.st.GetSandbox(b.ctx, "acme", sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !cur.ExpiresAt.Equal(want) {
		t.Errorf("%s: stored expires_at = %v, want %v", what, cur.ExpiresAt, want)
	}
}

// expireNone runs the janitor's TTL sweep and fails if it ends anything.
func (b bundle) expireNone(t *testing.T, what string) {
	t.Helper()
	ended, err := b.st.EndExpired(b.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ended) != 0 {
		t.Fatalf("%s: EndExpired ended %d sandboxes, want none", what, len(ended))
	}
}

func TestPausedTTLZeroKeepsTheClockRunning(t *testing.T) {
	t.Parallel()
	b := setup(t) // PAUSED_TTL unset: 0
	sb := b.ready(t)
	deadline := sb.ExpiresAt
	b.clock.Advance(10 * time.Minute)
	b.expectExpires(t, b.pause(t, sb.ID), deadline, "paused")
	b.clock.Advance(20 * time.Minute)
	b.expectExpires(t, b.resume(t, sb.ID, true), deadline, "resume refused")
	b.expectExpires(t, b.resume(t, sb.ID, false), deadline, "resumed")

	// The clock ran while paused: it ends at the TTL it was created with.
	b.pause(t, sb.ID)
	b.clock.Advance(deadline.Sub(b.clock.Now()) + time.Second)
	ended, err := b.st.EndExpired(b.ctx, 100)
	if err != nil || len(ended) != 1 || ended[0].Reason != domain.ReasonExpired {
		t.Fatalf("EndExpired past the TTL while paused = %v, %v; want it expired", ended, err)
	}
}

func TestPausedTTLStopsTheClock(t *testing.T) {
	t.Parallel()
	b := setup(t, store.WithPausedTTL(pausedTTL, 24*time.Hour))
	sb := b.ready(t)
	b.clock.Advance(10 * time.Minute) // 50m of TTL left

	paused := b.pause(t, sb.ID)
	pausedUntil := b.clock.Now().Add(pausedTTL)
	b.expectExpires(t, paused, pausedUntil, "paused")

	// Past the TTL it was created with, but paused: nothing ends.
	b.clock.Advance(90 * time.Minute)
	b.expectExpires(t, b.resume(t, sb.ID, true), pausedUntil, "resume refused")
	b.expireNone(t, "paused past the original TTL")

	b.clock.Advance(5 * time.Minute)
	b.expectExpires(t, b.resume(t, sb.ID, false), b.clock.Now().Add(50*time.Minute), "resumed")
	b.clock.Advance(50 * time.Minute)
	b.expireNone(t, "at the restored deadline")
	b.clock.Advance(time.Microsecond)
	ended, err := b.st.EndExpired(b.ctx, 100)
	if err != nil || len(ended) != 1 || ended[0].ID != sb.ID {
		t.Fatalf("EndExpired past the restored deadline = %v, %v; want it ended", ended, err)
	}
}

func TestPausedSandboxExpiresPastPausedTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, store.WithPausedTTL(pausedTTL, 24*time.Hour))
	sb := b.ready(t)
	b.pause(t, sb.ID)
	b.clock.Advance(pausedTTL)
	b.expireNone(t, "at the paused deadline")
	b.clock.Advance(time.Microsecond)

	ended, err := b.st.EndExpired(b.ctx, 100)
	if err != nil || len(ended) != 1 {
		t.Fatalf("EndExpired past the paused deadline = %v, %v; want one", ended, err)
	}
	if got := ended[0]; got.ID != sb.ID || got.State != domain.StateTerminated || got.Reason != domain.ReasonExpired {
		t.Errorf("ended %s %s (%s), want %s terminated (expired)", got.ID, got.State, got.Reason, sb.ID)
	}
}

func TestPausedTTLCyclesKeepTheTotal(t *testing.T) {
	t.Parallel()
	b := setup(t, store.WithPausedTTL(pausedTTL, 24*time.Hour))
	sb := b.ready(t)
	left := time.Hour
	for i := range 3 {
		// Runs 10m and a few microseconds, then stays paused 90m (the run
		// counts, the pause does not).
		ran := 10*time.Minute + time.Duration(i+1)*time.Microsecond
		b.clock.Advance(ran)
		left -= ran
		b.expectExpires(t, b.pause(t, sb.ID), b.clock.Now().Add(pausedTTL), "paused")
		b.clock.Advance(90 * time.Minute)
		b.expectExpires(t, b.resume(t, sb.ID, false), b.clock.Now().Add(left), "resumed")
	}
	if want := 30*time.Minute - 6*time.Microsecond; left != want {
		t.Fatalf("test arithmetic: left %v, want %v", left, want)
	}
}

func TestPausedTTLCappedByMaxLifetime(t *testing.T) {
	t.Parallel()
	const maxLifetime = 2 * time.Hour
	b := setup(t, store.WithPausedTTL(pausedTTL, maxLifetime))
	sb := b.ready(t)
	lifetimeEnd := sb.CreatedAt.Add(maxLifetime)
	b.clock.Advance(10 * time.Minute)
	// now+PAUSED_TTL is past the lifetime's end.
	b.expectExpires(t, b.pause(t, sb.ID), lifetimeEnd, "paused")
	b.clock.Advance(90 * time.Minute) // now+50m left is past it too
	b.expectExpires(t, b.resume(t, sb.ID, false), lifetimeEnd, "resumed")
}

func TestPausedTTLOwnerLapseStillEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, store.WithPausedTTL(pausedTTL, 24*time.Hour))
	sb := b.ready(t, func(p *domain.CreateParams) { p.Owner, p.OwnerTTL = "agent", 10*time.Second })
	b.pause(t, sb.ID)
	b.clock.Advance(11 * time.Second)
	ended, err := b.st.EndLapsedOwners(b.ctx, 100)
	if err != nil || len(ended) != 1 || ended[0].Reason != domain.ReasonOwnerExpired {
		t.Fatalf("EndLapsedOwners of a paused sandbox = %v, %v; want it ended owner_expired", ended, err)
	}
}

// TestPausedTTLAcrossDaylightSaving: the TTL kept is exact in a session
// whose time zone changes its offset while the restored deadline runs (a
// timestamp difference in days would come back an hour short).
func TestPausedTTLAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	b := setup(t, store.WithPausedTTL(pausedTTL, 0))
	if _, err := b.st.Pool().Exec(b.ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'America/New_York'); END $$`); err != nil {
		t.Fatal(err)
	}
	b.st.Pool().Reset() // new connections take the zone
	// New York moves its clocks an hour forward at 2027-03-14 07:00 UTC.
	b.clock.Advance(time.Date(2027, 3, 12, 12, 0, 0, 0, time.UTC).Sub(b.clock.Now()))
	sb := b.ready(t, func(p *domain.CreateParams) { p.TTL = 72 * time.Hour })
	b.pause(t, sb.ID)
	b.clock.Advance(time.Hour)
	b.expectExpires(t, b.resume(t, sb.ID, false), b.clock.Now().Add(72*time.Hour), "resumed across the change")
}
