package lifecycle_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/sim"
)

// watchingSim is the sim provider with the Watcher capability: the test
// sends the events, and Lookup answers from the sim's real inventory.
type watchingSim struct {
	*sim.Provider
	events chan domain.Resource
}

func (w *watchingSim) Watch(ctx context.Context) <-chan domain.Resource {
	out := make(chan domain.Resource)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-w.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

func (w *watchingSim) Lookup(ctx context.Context, id string) (domain.Resource, bool, error) {
	all, err := w.List(ctx)
	if err != nil {
		return domain.Resource{}, false, err
	}
	for _, r := range all {
		if r.SandboxID == id {
			return r, true, nil
		}
	}
	return domain.Resource{}, false, nil
}

// TestJanitorActsOnWatchedLoss: a watching provider's report that a
// sandbox's resource vanished ends the sandbox lost at once, with the
// provider's reason in its error, long before the next listing (the
// interval is an hour); a stale report, whose resource Lookup still finds
// running, ends nothing.
func TestJanitorActsOnWatchedLoss(t *testing.T) {
	t.Parallel()
	e := setupJanitor(t)
	w := &watchingSim{Provider: e.sim, events: make(chan domain.Resource)}
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Hour, OrphanGrace: grace},
		e.st, []domain.Provider{w}, e.log, nil)
	gone, alive := e.ready(), e.ready()
	ctx, cancel := context.WithCancel(e.ctx)
	j.Start(ctx)
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); j.Stop(context.Background()) }) }
	t.Cleanup(stop)

	if err := e.sim.Destroy(e.ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	const reason = "pod deleted: Evicted: The node was low on resource: memory"
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Sent until the janitor leads and acts: before it leads it drops
		// them. The stale one goes first, so it was judged when gone is.
		w.events <- domain.Resource{SandboxID: alive.ID, Defunct: true, Reason: "stale"}
		w.events <- domain.Resource{SandboxID: gone.ID, Defunct: true, Reason: reason}
		if e.get(gone.ID).State.Terminal() || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	sb := e.get(gone.ID)
	if sb.State != domain.StateTerminated || sb.Reason != domain.ReasonLost {
		t.Fatalf("watched loss: state %s reason %s, want terminated lost", sb.State, sb.Reason)
	}
	events, err := e.st.SandboxEvents(e.ctx, gone.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var messages []string
	for _, ev := range events {
		messages = append(messages, ev.Message)
	}
	if !strings.Contains(strings.Join(messages, "\n"), reason) {
		t.Errorf("lost sandbox's history %q does not carry the provider's reason %q", messages, reason)
	}
	if sb := e.get(alive.ID); sb.State != domain.StateReady {
		t.Errorf("a stale watch event ended a running sandbox: %s %s", sb.State, sb.Reason)
	}
}
