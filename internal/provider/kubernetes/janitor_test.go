//go:build kubernetes

package kubernetes_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/lifecycle"
	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/internal/store"
	"github.com/tetherhq/tether/internal/store/storetest"
	"github.com/tetherhq/tether/provider"
)

// TestJanitorEndsADeletedPodsSandboxLost: with the real registry, the
// janitor and the provider, a ready sandbox whose pod is deleted with the
// API behind Tether's back ends lost within seconds, from the provider's
// watch (the janitor's listing runs once an hour here), with the pod's
// fate in its history.
func TestJanitorEndsADeletedPodsSandboxLost(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := storetest.New(t)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := st.RegisterAPIKey(ctx, "acme", "test", "k"); err != nil {
		t.Fatal(err)
	}
	sb, _, err := st.CreateSandbox(ctx, domain.CreateParams{Tenant: "acme", Provider: kubernetes.Name, TTL: time.Hour, CreateTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := st.ClaimCreates(ctx, kubernetes.Name, "", "w", 1, time.Hour, store.Share{})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	_, res := create(t, p, provider.CreateSpec{SandboxID: sb.ID})
	if _, err := st.MarkReady(ctx, sb.ID, claims[0].Sandbox.Epoch, res); err != nil {
		t.Fatal(err)
	}
	j := lifecycle.NewJanitor(lifecycle.JanitorConfig{Interval: time.Hour}, st, []provider.Provider{p}, log, nil)
	jctx, cancel := context.WithCancel(ctx)
	j.Start(jctx)
	defer func() { cancel(); j.Stop(context.Background()) }()
	time.Sleep(time.Second) // the janitor's first run takes the lead

	deleted := time.Now()
	if err := client.CoreV1().Pods(namespace).Delete(ctx, kubernetes.PodName(sb.ID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State.Terminal() {
			if got.Reason != domain.ReasonLost {
				t.Fatalf("sandbox ended %s %s, want lost", got.State, got.Reason)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the sandbox of a deleted pod never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("lost %v after the pod's deletion", time.Since(deleted))
	if took := time.Since(deleted); took > 15*time.Second {
		t.Errorf("lost only %v after the pod's deletion", took)
	}
	events, err := st.SandboxEvents(ctx, sb.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var messages []string
	for _, ev := range events {
		messages = append(messages, ev.Message)
	}
	if all := strings.Join(messages, "\n"); !strings.Contains(all, "pod "+namespace+"/"+kubernetes.PodName(sb.ID)) {
		t.Errorf("history %q does not name the pod's fate", messages)
	}
}
