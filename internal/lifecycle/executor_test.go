package lifecycle_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/notify"
	"github.com/tetherhq/tether/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx's pool health checker and the database/sql opener used by goose
		// outlive individual tests until their pools close.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

type env struct {
	t        *testing.T
	clock    *storetest.Clock
	ctx      context.Context
	st       *store.Store
	notifier *notify.Notifier
	simDir   string
	sim      *sim.Provider
	log      *slog.Logger
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup with the store on a manual clock, if clock is set.
func setupWith(t *testing.T, clock *storetest.Clock) *env {
	t.Helper()
	var opts []store.Option
	if clock != nil {
		opts = append(opts, store.WithClock(clock.Now))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	st, notifier := storetest.NewNotified(t, log, opts...)
	ctx, cancel := context.WithCancel(t.Context())
	dir := t.TempDir()
	p, err := sim.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	if _, err := st.RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clock: clock, ctx: ctx, st: st, notifier: notifier, simDir: dir, sim: p, log: log}
}

// executor starts an executor with test-friendly timings, stopped when the
// test ends.
func (e *env) executor(cfg lifecycle.ExecutorConfig) *lifecycle.Executor {
	e.t.Helper()
	return e.executorOf(cfg, e.sim)
}

// executorOf is executor over the given providers.
func (e *env) executorOf(cfg lifecycle.ExecutorConfig, providers ...domain.Provider) *lifecycle.Executor {
	e.t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 20 * time.Millisecond
	}
	ex := lifecycle.NewExecutor(cfg, e.st, e.notifier, providers, e.log, lifecycle.NewMetrics(nil))
	ex.Start(e.ctx)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ex.Stop(ctx)
	})
	return ex
}

func (e *env) create(params string, mutate ...func(*domain.CreateParams)) domain.Sandbox {
	e.t.Helper()
	p := domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour, CreateTimeout: time.Minute}
	if params != "" {
		p.Params = json.RawMessage(params)
	}
	for _, m := range mutate {
		m(&p)
	}
	sb, _, err := e.st.CreateSandbox(e.ctx, p)
	if err != nil {
		e.t.Fatalf("CreateSandbox: %v", err)
	}
	return sb
}

// waitFor polls the sandbox until cond holds, failing after a deadline.
func (e *env) waitFor(id, what string, cond func(domain.Sandbox) bool) domain.Sandbox {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sb, err := e.st.Sandbox(e.ctx, id)
		if err != nil {
			e.t.Fatalf("read sandbox: %v", err)
		}
		if cond(sb) {
			return sb
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandbox %s never became %s; last: state=%s released=%v error=%q", id, what, sb.State, sb.Released, sb.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isState(s domain.State) func(domain.Sandbox) bool {
	return func(sb domain.Sandbox) bool { return sb.State == s }
}

func isReleased(sb domain.Sandbox) bool { return sb.Released }

// creates counts the sim's create calls that made a resource, per sandbox.
func (e *env) creates() map[string]int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.simDir, "creates.log"))
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out[f[0]]++
		}
	}
	return out
}

// holds reports whether the sim still holds a resource for the sandbox.
func (e *env) holds(id string) bool {
	_, err := os.Stat(filepath.Join(e.simDir, id))
	return err == nil
}

func (e *env) history(id string) string {
	e.t.Helper()
	evs, err := e.st.SandboxEvents(e.ctx, id, 0, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	var states []string
	for _, ev := range evs {
		states = append(states, string(ev.To))
	}
	return strings.Join(states, ">")
}

func TestCreateToReadyAndRelease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"create_delay_ms": 20}`)
	ready := e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	if ready.ProviderID == "" || ready.ReadyAt == nil || ready.Attempts != 1 {
		t.Errorf("ready sandbox = %+v, want provider id, ready_at, 1 attempt", ready)
	}
	if !e.holds(sb.ID) {
		t.Fatal("the provider holds no resource for a ready sandbox")
	}
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	e.waitFor(sb.ID, "released", isReleased)
	if e.holds(sb.ID) {
		t.Error("resource still held after release")
	}
	if h := e.history(sb.ID); h != "requested>creating>ready>terminated" {
		t.Errorf("history = %s", h)
	}
}

// TestLateCreationIsReleased: a provider call that completes after its
// sandbox was cancelled is released at once and the sandbox never becomes
// ready.
func TestLateCreationIsReleased(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"create_delay_ms": 400, "ignore_cancel": true}`)
	e.waitFor(sb.ID, "creating", isState(domain.StateCreating))
	got, changed, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, "")
	if err != nil || !changed || got.State != domain.StateCancelled {
		t.Fatalf("cancel = %s, %v, %v", got.State, changed, err)
	}
	final := e.waitFor(sb.ID, "released", isReleased)
	if final.State != domain.StateCancelled || final.ReadyAt != nil {
		t.Errorf("late sandbox = %s ready_at=%v, want cancelled and never ready", final.State, final.ReadyAt)
	}
	if n := e.creates()[sb.ID]; n != 1 {
		t.Errorf("provider creates = %d, want 1 (the late one)", n)
	}
	if e.holds(sb.ID) {
		t.Error("the late resource was not destroyed")
	}
	if h := e.history(sb.ID); h != "requested>creating>cancelled" {
		t.Errorf("history = %s", h)
	}
}

// TestCancelInterruptsCreate: cancelling a sandbox cancels the provider call
// in flight rather than waiting for it.
func TestCancelInterruptsCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"create_delay_ms": 60000}`)
	e.waitFor(sb.ID, "creating", isState(domain.StateCreating))
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.waitFor(sb.ID, "released", isReleased)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("release took %s; the 60s create was not interrupted", took)
	}
	if n := e.creates()[sb.ID]; n != 0 {
		t.Errorf("provider creates = %d, want 0", n)
	}
}

func TestCreateFailureFailsAndReleases(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"fail": "create"}`)
	got := e.waitFor(sb.ID, "failed and released", func(s domain.Sandbox) bool { return s.State == domain.StateFailed && s.Released })
	if got.Reason != domain.ReasonCreateFailed || !strings.Contains(got.Error, "injected failure") {
		t.Errorf("failed sandbox = reason %q error %q", got.Reason, got.Error)
	}
	if h := e.history(sb.ID); h != "requested>creating>failed" {
		t.Errorf("history = %s", h)
	}
}

func TestRetryableFailureIsRetried(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"fail": "create_once"}`)
	got := e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	if got.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", got.Attempts)
	}
	if n := e.creates()[sb.ID]; n != 1 {
		t.Errorf("provider creates = %d, want 1", n)
	}
}

func TestDestroyFailureIsRetried(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"fail": "destroy_once"}`)
	e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	if _, _, err := e.st.EndSandbox(e.ctx, "acme", sb.ID, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
		t.Fatal(err)
	}
	got := e.waitFor(sb.ID, "released", isReleased)
	if got.ReleaseAttempts < 2 {
		t.Errorf("release attempts = %d, want at least 2 (the first destroy fails)", got.ReleaseAttempts)
	}
	if e.holds(sb.ID) {
		t.Error("resource still held")
	}
}

func TestCreationDeadline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{})
	sb := e.create(`{"create_delay_ms": 60000}`, func(p *domain.CreateParams) { p.CreateTimeout = 300 * time.Millisecond })
	got := e.waitFor(sb.ID, "failed", isState(domain.StateFailed))
	if got.Reason != domain.ReasonCreateFailed || !strings.Contains(got.Error, "deadline") {
		t.Errorf("sandbox = reason %q error %q, want create_failed by deadline", got.Reason, got.Error)
	}
	e.waitFor(sb.ID, "released", isReleased)
}

// TestRacingExecutorsCreateOnce: several executors over the same registry
// create each sandbox exactly once.
func TestRacingExecutorsCreateOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 40
	var ids []string
	for range n {
		ids = append(ids, e.create(`{"create_delay_ms": 5}`).ID)
	}
	for range 3 {
		e.executor(lifecycle.ExecutorConfig{Concurrency: 4})
	}
	for _, id := range ids {
		e.waitFor(id, "ready", isState(domain.StateReady))
	}
	creates := e.creates()
	for _, id := range ids {
		if creates[id] != 1 {
			t.Errorf("sandbox %s created %d times, want 1", id, creates[id])
		}
		if h := e.history(id); h != "requested>creating>ready" {
			t.Errorf("sandbox %s history = %s", id, h)
		}
	}
}

// TestShutdownHandsBack: an executor stopped with creates in flight hands
// them back, and another executor finishes them without a second resource.
func TestShutdownHandsBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := lifecycle.NewExecutor(lifecycle.ExecutorConfig{PollInterval: 50 * time.Millisecond, Lease: time.Minute},
		e.st, e.notifier, []domain.Provider{e.sim}, e.log, lifecycle.NewMetrics(nil))
	first.Start(e.ctx)
	sb := e.create(`{"create_delay_ms": 60000}`)
	e.waitFor(sb.ID, "creating", isState(domain.StateCreating))
	stopCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	first.Stop(stopCtx)
	cancel()
	// Handed back: claimable now, not after the one-minute lease.
	claims, err := e.st.ClaimCreates(e.ctx, "sim", "", "second", 1, time.Minute, store.Share{})
	if err != nil || len(claims) != 1 || claims[0].Sandbox.ID != sb.ID {
		t.Fatalf("claim after hand-back = %+v, %v; want the sandbox", claims, err)
	}
	// A hand-back is no failed attempt: restarts must not use up the retries.
	if got := claims[0].Sandbox.Attempts; got != 1 {
		t.Errorf("attempts after a hand-back and a new claim = %d, want 1", got)
	}
	if _, err := e.st.MarkReady(e.ctx, sb.ID, claims[0].Sandbox.Epoch, domain.Resource{ProviderID: "p"}); err != nil {
		t.Fatal(err)
	}
	if n := e.creates()[sb.ID]; n != 0 {
		t.Errorf("the interrupted create made %d resources, want 0", n)
	}
}

// TestCrashedExecutorWorkIsRescued: a claim whose executor died (its lease
// lapses without renewal) is re-driven by another executor, and the
// idempotent create makes no second resource.
func TestCrashedExecutorWorkIsRescued(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sb := e.create(`{}`)
	// A "crashed" executor: claimed, called the provider, died before recording.
	claims, err := e.st.ClaimCreates(e.ctx, "sim", "", "dead", 1, 200*time.Millisecond, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v", err)
	}
	if _, err := e.sim.Create(e.ctx, domain.CreateSpec{SandboxID: sb.ID}); err != nil {
		t.Fatal(err)
	}
	e.executor(lifecycle.ExecutorConfig{})
	got := e.waitFor(sb.ID, "ready", isState(domain.StateReady))
	if got.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", got.Attempts)
	}
	if n := e.creates()[sb.ID]; n != 1 {
		t.Errorf("provider creates = %d, want 1", n)
	}
}

func TestManySandboxesSettle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{Concurrency: 8})
	var ids []string
	for i := range 30 {
		params := `{}`
		switch i % 3 {
		case 1:
			params = `{"fail":"create"}`
		case 2:
			params = `{"create_delay_ms": 30}`
		}
		ids = append(ids, e.create(params).ID)
	}
	for i, id := range ids {
		if i%5 == 0 {
			if _, _, err := e.st.EndSandbox(e.ctx, "acme", id, domain.ReasonRequested, domain.ActorClient, domain.Caller{}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		got := e.waitFor(id, "settled", func(s domain.Sandbox) bool { return s.State.Settled() && (s.Live() || s.Released) })
		if got.State.Terminal() == e.holds(id) {
			t.Errorf("%s: state %s but provider holds=%v", id, got.State, e.holds(id))
		}
	}
	for id, n := range e.creates() {
		if n != 1 {
			t.Errorf("%s created %d times", id, n)
		}
	}
}

// TestRetryIsClaimedUnderSustainedLoad keeps every create slot busy with a
// stream of new requests, which quick claims serve as slots free up, and
// checks that a create waiting for its retry (which only a full claim can
// see) is still claimed within a few poll intervals, not once the stream
// stops.
func TestRetryIsClaimedUnderSustainedLoad(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.executor(lifecycle.ExecutorConfig{Concurrency: 2})
	retried := e.create(`{"fail": "create_once"}`)

	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(stop)
	// New requests come faster than the two slots finish them, so that a
	// freed slot always finds one.
	wg.Go(func() {
		for ctx.Err() == nil {
			for range 5 {
				p := domain.CreateParams{Tenant: "acme", Provider: "sim", TTL: time.Hour, CreateTimeout: time.Minute,
					Params: json.RawMessage(`{"create_delay_ms": 20}`)}
				if _, _, err := e.st.CreateSandbox(ctx, p); err != nil && ctx.Err() == nil {
					t.Errorf("CreateSandbox: %v", err)
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	deadline := time.Now().Add(3 * time.Second)
	for {
		sb, err := e.st.Sandbox(e.ctx, retried.ID)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == domain.StateReady {
			if sb.Attempts != 2 {
				t.Errorf("ready after %d attempts, want 2", sb.Attempts)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retried create is still %s after 3s of sustained load (attempts %d)", sb.State, sb.Attempts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
