package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/store"
)

const pauseTimeout = time.Minute

// ready makes a ready sandbox of provider sim.
func (b bundle) ready(t *testing.T, mutate ...func(*domain.CreateParams)) domain.Sandbox {
	t.Helper()
	sb := b.create(t, mutate...)
	c := b.claimOne(t, "maker")
	if c.Sandbox.ID != sb.ID {
		t.Fatalf("claimed %s, want %s", c.Sandbox.ID, sb.ID)
	}
	got, err := b.st.MarkReady(b.ctx, sb.ID, c.Sandbox.Epoch, domain.Resource{ProviderID: "p-" + sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// leased reports whether a worker holds the sandbox's lease.
func (b bundle) leased(t *testing.T, id string) bool {
	t.Helper()
	var held bool
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT lease_owner IS NOT NULL FROM sandboxes WHERE id = $1`, id).Scan(&held); err != nil {
		t.Fatal(err)
	}
	return held
}

// claimTransition claims the one pausing or resuming sandbox of sim.
func (b bundle) claimTransition(t *testing.T, worker string) store.Claim {
	t.Helper()
	claims, err := b.st.ClaimTransitions(b.ctx, "sim", "", worker, 10, 10*time.Second, store.Share{})
	if err != nil {
		t.Fatalf("ClaimTransitions: %v", err)
	}
	if len(claims) != 1 {
		t.Fatalf("ClaimTransitions: %d claims, want 1", len(claims))
	}
	return claims[0]
}

func TestPauseResumeCycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)

	got, changed, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{KeyID: "key_1", KeyName: "ci"})
	if err != nil || !changed || got.State != domain.StatePausing {
		t.Fatalf("RequestPause = %s, %v, %v; want pausing, changed", got.State, changed, err)
	}
	if got.PauseDeadline == nil || !got.PauseDeadline.Equal(b.clock.Now().Add(pauseTimeout)) {
		t.Errorf("PauseDeadline = %v, want now+%s", got.PauseDeadline, pauseTimeout)
	}
	// Idempotent while pausing.
	if again, changed, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil || changed || again.State != domain.StatePausing {
		t.Errorf("second RequestPause = %s, %v, %v; want pausing, unchanged", again.State, changed, err)
	}
	c := b.claimTransition(t, "w1")
	if c.From != domain.StatePausing || c.Sandbox.Epoch <= sb.Epoch {
		t.Fatalf("claim from %s epoch %d, want pausing and epoch > %d", c.From, c.Sandbox.Epoch, sb.Epoch)
	}
	// Claimed: nobody else gets it while the lease lasts.
	if claims, _ := b.st.ClaimTransitions(b.ctx, "sim", "", "w2", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatal("claimed a transition under a live lease")
	}
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch-1, domain.StatePausing); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("FinishTransition at an old epoch: %v, want ErrFenced", err)
	}
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StateResuming); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("FinishTransition from the wrong state: %v, want ErrFenced", err)
	}
	paused, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing)
	if err != nil || paused.State != domain.StatePaused {
		t.Fatalf("FinishTransition = %s, %v", paused.State, err)
	}
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("second FinishTransition: %v, want ErrFenced", err)
	}
	if again, changed, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil || changed || again.State != domain.StatePaused {
		t.Errorf("RequestPause of a paused sandbox = %s, %v, %v; want unchanged", again.State, changed, err)
	}
	// Paused is live: renewable.
	if _, _, err := b.st.RenewSandbox(b.ctx, "acme", sb.ID, time.Hour, 24*time.Hour); err != nil {
		t.Errorf("RenewSandbox of a paused sandbox: %v", err)
	}

	if got, changed, err := b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil || !changed || got.State != domain.StateResuming {
		t.Fatalf("RequestResume = %s, %v, %v", got.State, changed, err)
	}
	c = b.claimTransition(t, "w1")
	if c.From != domain.StateResuming {
		t.Fatalf("claim from %s, want resuming", c.From)
	}
	if got, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StateResuming); err != nil || got.State != domain.StateReady || got.ProviderID != "p-"+sb.ID {
		t.Fatalf("FinishTransition = %+v, %v; want ready, provider id kept", got, err)
	}
	if again, changed, err := b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil || changed || again.State != domain.StateReady {
		t.Errorf("RequestResume of a ready sandbox = %s, %v, %v; want unchanged", again.State, changed, err)
	}
	evs := b.events(t, sb.ID)
	if p := path(evs); p != "requested>creating>ready>pausing>paused>resuming>ready" {
		t.Errorf("history = %s", p)
	}
	if e := evs[3]; e.Actor != domain.ActorClient || e.Caller.KeyID != "key_1" || e.From != domain.StateReady {
		t.Errorf("pause event = %+v, want the client's, with its key", e)
	}
	if e := evs[4]; e.Actor != domain.ActorExecutor || e.From != domain.StatePausing {
		t.Errorf("paused event = %+v, want the executor's", e)
	}
}

func TestPauseResumeConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	requested := b.create(t)
	conflict := func(name string, err error, state domain.State) {
		t.Helper()
		var e *domain.Error
		if !errors.As(err, &e) || e.Code != domain.CodeStateConflict || domain.ConflictState(err) != state {
			t.Errorf("%s: err = %v, want SANDBOX_STATE_CONFLICT with state %s", name, err, state)
		}
	}
	_, _, err := b.st.RequestPause(b.ctx, "acme", requested.ID, pauseTimeout, domain.Caller{})
	conflict("pause requested", err, domain.StateRequested)
	_, _, err = b.st.RequestResume(b.ctx, "acme", requested.ID, pauseTimeout, domain.Caller{})
	conflict("resume requested", err, domain.StateRequested)
	if _, _, err := b.st.RequestPause(b.ctx, "other", requested.ID, pauseTimeout, domain.Caller{}); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("pause of another tenant's sandbox: %v, want ErrNotFound", err)
	}
	if _, _, err := b.st.RequestPause(b.ctx, "acme", domain.NewID(), pauseTimeout, domain.Caller{}); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("pause of an unknown sandbox: %v, want ErrNotFound", err)
	}

	if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{})
	conflict("resume pausing", err, domain.StatePausing)
	c := b.claimTransition(t, "w")
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{})
	conflict("pause resuming", err, domain.StateResuming)

	if _, _, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
		t.Fatal(err)
	}
	before := len(b.events(t, sb.ID))
	_, _, err = b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{})
	conflict("resume terminated", err, domain.StateTerminated)
	if n := len(b.events(t, sb.ID)); n != before {
		t.Errorf("a refused resume wrote %d events", n-before)
	}
}

func TestRevertAndRetryTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	c := b.claimTransition(t, "w")
	// A retry: handed back until later, then claimable again.
	if err := b.st.UnclaimTransition(b.ctx, sb.ID, c.Sandbox.Epoch, b.clock.Now().Add(5*time.Second), "busy"); err != nil {
		t.Fatal(err)
	}
	if err := b.st.UnclaimTransition(b.ctx, sb.ID, c.Sandbox.Epoch, b.clock.Now(), "x"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("second unclaim: %v, want ErrFenced", err)
	}
	if claims, _ := b.st.ClaimTransitions(b.ctx, "sim", "", "w", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatal("claimed before the retry came due")
	}
	b.clock.Advance(6 * time.Second)
	c = b.claimTransition(t, "w")
	if c.Sandbox.Error != "busy" {
		t.Errorf("error while retrying = %q", c.Sandbox.Error)
	}
	got, err := b.st.RevertTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing, "cannot freeze")
	if err != nil || got.State != domain.StateReady || got.Error != "cannot freeze" || b.leased(t, sb.ID) {
		t.Fatalf("RevertTransition = %+v, %v; want ready with the error", got, err)
	}

	// A refused resume goes back to paused.
	if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	c = b.claimTransition(t, "w")
	if got, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing); err != nil || got.Error != "" {
		t.Fatalf("FinishTransition = %+v, %v; want paused and the old error gone", got, err)
	}
	if _, _, err := b.st.RequestResume(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	c = b.claimTransition(t, "w")
	if got, err := b.st.RevertTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StateResuming, "no"); err != nil || got.State != domain.StatePaused {
		t.Fatalf("RevertTransition of a resume = %s, %v", got.State, err)
	}
	if p := path(b.events(t, sb.ID)); p != "requested>creating>ready>pausing>ready>pausing>paused>resuming>paused" {
		t.Errorf("history = %s", p)
	}
}

// TestLapsedTransitionIsReclaimed: a pausing sandbox whose executor died is
// claimed again once its lease lapses, and the dead one is fenced out.
func TestLapsedTransitionIsReclaimed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	dead := b.claimTransition(t, "dead")
	b.clock.Advance(11 * time.Second)
	live := b.claimTransition(t, "live")
	if live.Sandbox.Epoch <= dead.Sandbox.Epoch {
		t.Fatalf("reclaim epoch %d, want > %d", live.Sandbox.Epoch, dead.Sandbox.Epoch)
	}
	if _, err := b.st.RenewLease(b.ctx, sb.ID, dead.Sandbox.Epoch, "dead", time.Minute); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("RenewLease by the dead worker: %v", err)
	}
	if _, err := b.st.RevertTransition(b.ctx, sb.ID, dead.Sandbox.Epoch, domain.StatePausing, "late"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("RevertTransition by the dead worker: %v", err)
	}
	if _, err := b.st.FailTransition(b.ctx, sb.ID, dead.Sandbox.Epoch, domain.StatePausing, domain.ActorExecutor, "late"); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("FailTransition by the dead worker: %v", err)
	}
	if state, err := b.st.RenewLease(b.ctx, sb.ID, live.Sandbox.Epoch, "live", time.Minute); err != nil || state != domain.StatePausing {
		t.Errorf("RenewLease by the live worker = %s, %v", state, err)
	}
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, live.Sandbox.Epoch, domain.StatePausing); err != nil {
		t.Fatal(err)
	}
}

// TestOverdueTransitionsFail: past the pause deadline, the janitor fails a
// pausing or resuming sandbox; an executor whose lease is live keeps it
// (and releases), one whose lease lapsed leaves it to the release queue.
func TestOverdueTransitionsFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	leased, unclaimed := b.ready(t), b.ready(t)
	for _, sb := range []domain.Sandbox{leased, unclaimed} {
		if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, 30*time.Second, domain.Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := b.st.ClaimTransitions(b.ctx, "sim", "", "w", 1, 2*time.Minute, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("ClaimTransitions = %d, %v", len(claims), err)
	}
	if claims[0].Sandbox.ID != leased.ID {
		leased, unclaimed = unclaimed, leased
	}
	if got, _ := b.st.FailOverdue(b.ctx, 10); len(got) != 0 {
		t.Fatalf("FailOverdue before the deadline failed %d", len(got))
	}
	b.clock.Advance(31 * time.Second)
	failed, err := b.st.FailOverdue(b.ctx, 10)
	if err != nil || len(failed) != 2 {
		t.Fatalf("FailOverdue = %d, %v; want 2", len(failed), err)
	}
	for _, sb := range failed {
		if sb.State != domain.StateFailed || sb.Reason != domain.ReasonPauseFailed || sb.EndedAt == nil {
			t.Errorf("overdue sandbox = %s/%s, want failed/pause_failed", sb.State, sb.Reason)
		}
		if held := sb.ID == leased.ID; b.leased(t, sb.ID) != held {
			t.Errorf("sandbox %s lease held = %v, want %v", sb.ID, !held, held)
		}
	}
	releases, err := b.st.ClaimReleases(b.ctx, "sim", "", "r", 10, 10*time.Second, store.Share{})
	if err != nil || len(releases) != 1 || releases[0].Sandbox.ID != unclaimed.ID {
		t.Fatalf("ClaimReleases = %v, %v; want only the unleased one", releases, err)
	}
	if p := path(b.events(t, leased.ID)); p != "requested>creating>ready>pausing>failed" {
		t.Errorf("history = %s", p)
	}
}

// TestEndWhileTransitioning: a delete of a pausing sandbox terminates it;
// the executor whose call is in flight keeps its lease (no release races
// its call) and its late result is fenced.
func TestEndWhileTransitioning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sb := b.ready(t)
	if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	c := b.claimTransition(t, "w")
	ended, changed, err := b.st.EndSandbox(b.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye")
	if err != nil || !changed || ended.State != domain.StateTerminated || ended.Released || !b.leased(t, sb.ID) {
		t.Fatalf("EndSandbox = %+v, %v, %v; want terminated, lease kept", ended, changed, err)
	}
	if claims, _ := b.st.ClaimReleases(b.ctx, "sim", "", "r", 10, 10*time.Second, store.Share{}); len(claims) != 0 {
		t.Fatal("a release was claimed while the pause call holds the lease")
	}
	if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing); !errors.Is(err, domain.ErrFenced) {
		t.Errorf("FinishTransition after the end: %v, want ErrFenced", err)
	}
	if state, err := b.st.RenewLease(b.ctx, sb.ID, c.Sandbox.Epoch, "w", time.Minute); err != nil || state != domain.StateTerminated {
		t.Errorf("RenewLease = %s, %v; want terminated (the executor releases)", state, err)
	}
	if err := b.st.MarkReleased(b.ctx, sb.ID, c.Sandbox.Epoch); err != nil {
		t.Errorf("MarkReleased by the transition's executor: %v", err)
	}

	// A paused sandbox ends terminated, into the release queue.
	p := b.ready(t)
	if _, _, err := b.st.RequestPause(b.ctx, "acme", p.ID, pauseTimeout, domain.Caller{}); err != nil {
		t.Fatal(err)
	}
	c = b.claimTransition(t, "w")
	if _, err := b.st.FinishTransition(b.ctx, p.ID, c.Sandbox.Epoch, domain.StatePausing); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.st.EndSandbox(b.ctx, "acme", p.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil || got.State != domain.StateTerminated || b.leased(t, p.ID) {
		t.Fatalf("EndSandbox of a paused sandbox = %+v, %v", got, err)
	}
	if claims, _ := b.st.ClaimReleases(b.ctx, "sim", "", "r", 10, 10*time.Second, store.Share{}); len(claims) != 1 {
		t.Fatalf("ClaimReleases = %d, want the paused sandbox", len(claims))
	}
}

// legal checks that a history follows the transition table from its first
// event on.
func legal(t *testing.T, id string, evs []domain.Event) {
	t.Helper()
	prev := domain.State("")
	for i, e := range evs {
		if i == 0 {
			if e.From != "" || e.To != domain.StateRequested {
				t.Errorf("%s: first event %s > %s", id, e.From, e.To)
			}
		} else if e.From != prev || !domain.CanTransition(e.From, e.To) {
			t.Errorf("%s: event %d %s > %s after %s: illegal (%s)", id, i, e.From, e.To, prev, path(evs))
		}
		prev = e.To
	}
}

// TestPauseRacingDelete: many goroutines pause, resume, drive the
// transitions as executors and delete, on the same sandboxes at once. Every
// sandbox ends terminated with one legal history.
func TestPauseRacingDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.ready(t).ID
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	stop := make(chan struct{})
	for w := range 3 { // executors
		wg.Go(func() { b.drive(fmt.Sprintf("exec-%d", w), stop, errs) })
	}
	for range 4 { // clients pausing and resuming
		wg.Go(func() {
			for range 10 {
				for _, id := range ids {
					_, _, err := b.st.RequestPause(b.ctx, "acme", id, pauseTimeout, domain.Caller{})
					expectConflictOrNil(err, errs)
					_, _, err = b.st.RequestResume(b.ctx, "acme", id, pauseTimeout, domain.Caller{})
					expectConflictOrNil(err, errs)
				}
			}
		})
	}
	var deleters sync.WaitGroup
	deleters.Go(func() {
		for _, id := range ids {
			time.Sleep(5 * time.Millisecond)
			if _, _, err := b.st.EndSandbox(b.ctx, "acme", id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
				errs <- err
			}
		}
	})
	deleters.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		got, err := b.st.GetSandbox(b.ctx, "acme", id)
		if err != nil || got.State != domain.StateTerminated || got.Reason != domain.ReasonRequested {
			t.Errorf("%s = %s/%s, %v; want terminated/requested", id, got.State, got.Reason, err)
		}
		legal(t, id, b.events(t, id))
	}
}

// TestResumeRacingOwnerLapse: resumes and pauses run while the owner's
// lease lapses and the janitor's sweep ends its sandboxes: each ends
// terminated (owner_expired) with one legal history, none left live.
func TestResumeRacingOwnerLapse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owned := func(p *domain.CreateParams) { p.Owner, p.OwnerTTL = "agent", 10*time.Second }
	const n = 10
	ids := make([]string, n)
	for i := range ids {
		sb := b.ready(t, owned)
		ids[i] = sb.ID
		if i%2 == 0 { // half start paused
			if _, _, err := b.st.RequestPause(b.ctx, "acme", sb.ID, pauseTimeout, domain.Caller{}); err != nil {
				t.Fatal(err)
			}
			c := b.claimTransition(t, "setup")
			if _, err := b.st.FinishTransition(b.ctx, sb.ID, c.Sandbox.Epoch, domain.StatePausing); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	stop := make(chan struct{})
	for w := range 3 {
		wg.Go(func() { b.drive(fmt.Sprintf("exec-%d", w), stop, errs) })
	}
	for range 3 {
		wg.Go(func() {
			for range 10 {
				for _, id := range ids {
					_, _, err := b.st.RequestResume(b.ctx, "acme", id, pauseTimeout, domain.Caller{})
					expectConflictOrNil(err, errs)
					_, _, err = b.st.RequestPause(b.ctx, "acme", id, pauseTimeout, domain.Caller{})
					expectConflictOrNil(err, errs)
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	b.clock.Advance(11 * time.Second) // the owner's lease lapses
	// Sweeps skip the rows others hold (SKIP LOCKED): sweep again, as
	// the janitor does each interval, until all have ended.
	for ended, tries := 0, 0; ended < n && tries < 500; tries++ {
		got, err := b.st.EndLapsedOwners(b.ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		ended += len(got)
		if len(got) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		got, err := b.st.GetSandbox(b.ctx, "acme", id)
		if err != nil || got.State != domain.StateTerminated || got.Reason != domain.ReasonOwnerExpired {
			t.Errorf("%s = %s/%s, %v; want terminated/owner_expired", id, got.State, got.Reason, err)
		}
		legal(t, id, b.events(t, id))
	}
}

// drive plays an executor: it claims transitions and finishes, reverts or
// hands back each, until stop.
func (b bundle) drive(worker string, stop <-chan struct{}, errs chan<- error) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		claims, err := b.st.ClaimTransitions(b.ctx, "sim", "", worker, 4, 10*time.Second, store.Share{})
		if err != nil {
			errs <- err
			return
		}
		for _, c := range claims {
			var err error
			switch i % 5 {
			case 0:
				_, err = b.st.RevertTransition(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, c.From, "refused")
			case 1:
				err = b.st.UnclaimTransition(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, b.clock.Now(), "")
			default:
				_, err = b.st.FinishTransition(b.ctx, c.Sandbox.ID, c.Sandbox.Epoch, c.From)
			}
			if err != nil && !errors.Is(err, domain.ErrFenced) {
				errs <- err
			}
		}
	}
}

func expectConflictOrNil(err error, errs chan<- error) {
	var e *domain.Error
	if err != nil && (!errors.As(err, &e) || e.Code != domain.CodeStateConflict) {
		errs <- err
	}
}
