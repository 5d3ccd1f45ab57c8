package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/store"
)

// pause asks for the sandbox to be paused, as the API does.
func (e *env) pause(id string, timeout time.Duration) {
	e.t.Helper()
	if _, _, err := e.st.RequestPause(e.ctx, "acme", id, timeout, domain.Caller{}); err != nil {
		e.t.Fatalf("RequestPause: %v", err)
	}
}

func (e *env) resume(id string, timeout time.Duration) {
	e.t.Helper()
	if _, _, err := e.st.RequestResume(e.ctx, "acme", id, timeout, domain.Caller{}); err != nil {
		e.t.Fatalf("RequestResume: %v", err)
	}
}

// TestPauseAndResume: the executor drives pausing → paused and resuming →
// ready through the provider, many times over on one sandbox.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"pause_delay_ms":5}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	for i := range 5 {
		e.pause(sb.ID, time.Minute)
		e.waitFor(sb.ID, "paused", isState(domain.StatePaused))
		if !e.sim.Paused(sb.ID) {
			t.Fatalf("cycle %d: paused, but the provider runs it", i)
		}
		e.resume(sb.ID, time.Minute)
		e.waitFor(sb.ID, "ready", isState(domain.StateReady))
		if e.sim.Paused(sb.ID) {
			t.Fatalf("cycle %d: ready, but the provider holds it paused", i)
		}
	}
	want := "requested>creating>ready" + strings.Repeat(">pausing>paused>resuming>ready", 5)
	if h := e.history(sb.ID); h != want {
		t.Errorf("history = %s", h)
	}
}

// TestRefusedPauseGoesBack: a provider that refuses leaves the sandbox as
// it was, and the refusal shows in its error.
func TestRefusedPauseGoesBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"fail":"pause"}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	e.pause(sb.ID, time.Minute)
	got := e.waitFor(sb.ID, "back to ready", func(s domain.Sandbox) bool { return s.State == domain.StateReady && s.Error != "" })
	if !strings.Contains(got.Error, "injected failure") || e.sim.Paused(sb.ID) {
		t.Errorf("error = %q, paused at the provider %v", got.Error, e.sim.Paused(sb.ID))
	}
	if h := e.history(sb.ID); h != "requested>creating>ready>pausing>ready" {
		t.Errorf("history = %s", h)
	}

	r := e.create(`{"fail":"resume"}`)
	e.waitFor(r.ID, "ready", isState(domain.StateReady))
	e.pause(r.ID, time.Minute)
	e.waitFor(r.ID, "paused", isState(domain.StatePaused))
	e.resume(r.ID, time.Minute)
	e.waitFor(r.ID, "back to paused", func(s domain.Sandbox) bool { return s.State == domain.StatePaused && s.Error != "" })
	if !e.sim.Paused(r.ID) {
		t.Error("a refused resume left the provider running it")
	}
}

// TestRetryablePauseIsRetried: a transient failure is tried again.
func TestRetryablePauseIsRetried(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"fail":"pause_once"}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	e.pause(sb.ID, time.Minute)
	e.waitFor(sb.ID, "paused", isState(domain.StatePaused))
	if h := e.history(sb.ID); h != "requested>creating>ready>pausing>paused" {
		t.Errorf("history = %s", h)
	}
}

// TestPauseDeadlineFailsAndReleases: a pause the provider does not finish
// by the deadline fails the sandbox (pause_failed), which is destroyed.
func TestPauseDeadlineFailsAndReleases(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"pause_delay_ms":5000}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	e.pause(sb.ID, 300*time.Millisecond)
	got := e.waitFor(sb.ID, "released", isReleased)
	if got.State != domain.StateFailed || got.Reason != domain.ReasonPauseFailed || e.holds(sb.ID) {
		t.Errorf("sandbox = %s/%s, held %v; want failed/pause_failed and destroyed", got.State, got.Reason, e.holds(sb.ID))
	}
}

// TestDeleteInterruptsPause: a delete while the pause call runs cancels the
// call, and the sandbox is terminated and released.
func TestDeleteInterruptsPause(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"pause_delay_ms":60000}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	e.pause(sb.ID, 2*time.Minute)
	time.Sleep(100 * time.Millisecond) // the call is in flight
	start := time.Now()
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "bye"); err != nil {
		t.Fatal(err)
	}
	got := e.waitFor(sb.ID, "released", isReleased)
	if got.State != domain.StateTerminated || e.holds(sb.ID) {
		t.Errorf("sandbox = %s, held %v", got.State, e.holds(sb.ID))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("release took %s: the pause call was not cancelled", took)
	}
}

// TestCrashedPauseIsRescued: a pausing sandbox whose executor died is
// claimed again once the lease lapses, and paused.
func TestCrashedPauseIsRescued(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ex := e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	ex.Stop(e.ctx) // no live executor claims the pause before "dead" does
	e.pause(sb.ID, time.Minute)
	claims, err := e.st.ClaimTransitions(e.ctx, "sim", "", "dead", 1, 200*time.Millisecond, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	e.executor(lifecycle.ExecutorConfig{})
	e.waitFor(sb.ID, "paused", isState(domain.StatePaused))
	if _, err := e.st.FinishTransition(e.ctx, sb.ID, claims[0].Sandbox.Epoch, domain.StatePausing); err == nil {
		t.Error("the dead executor's late write was not fenced")
	}
}
