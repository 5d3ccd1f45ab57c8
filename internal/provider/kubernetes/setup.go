//go:build kubernetes

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tetherhq/tether/provider"
)

// The setup of a pod runs at most once, however many Creates of its
// sandbox run at once (two executors may: one whose lease was taken
// mid-call, and the new holder), in one of them:
//
//   - annotationSetUp ("true") marks a pod whose setup succeeded;
//   - annotationSetupClaim ("<token> <unix deadline>") marks the one
//     Create that runs it. A Create takes the claim of a pod that has
//     none with a patch that carries the pod's resourceVersion: of
//     Creates that race, exactly one succeeds and the others, refused
//     with a conflict, read the pod again and find it claimed.
//
// A Create that finds a live claim waits, within its ctx, until the pod
// is set up (and returns it too). A claim whose deadline passed without
// the pod being set up is stale: its holder died mid-setup, or its setup
// failed (a failing holder sets the deadline to the past at once). The
// setup must not run twice on one pod, so the Create that finds a stale
// claim deletes that pod (that one, by UID) and makes a new one. The
// deadline outlasts the setup's own timeout (the holder's ctx deadline,
// enforced in the pod too) by claimSlack, which also covers clock skew
// between Tether replicas. Errors of waiting are Retryable: Tether's
// executor retries the Create, and the janitor reconciles what is left.
const (
	annotationSetUp      = "tetherhq.dev/set-up"
	annotationSetupClaim = "tetherhq.dev/setup-claim"
	claimSlack           = 30 * time.Second
)

// errSetupStale says the pod's setup was claimed and never finished: the
// pod is made again.
var errSetupStale = errors.New("kubernetes: the pod's setup was interrupted")

// setupState is what a pod's annotations say of its setup.
type setupState int

const (
	setupFree  setupState = iota // not set up, not claimed
	setupHeld                    // claimed, running: wait
	setupStale                   // claimed, never finished: make the pod again
	setupDone                    // set up
)

func judgeSetup(pod *corev1.Pod, now time.Time) setupState {
	if pod.Annotations[annotationSetUp] == "true" {
		return setupDone
	}
	claim, ok := pod.Annotations[annotationSetupClaim]
	if !ok {
		return setupFree
	}
	_, until, _ := strings.Cut(claim, " ")
	secs, err := strconv.ParseInt(until, 10, 64)
	if err != nil || now.After(time.Unix(secs, 0)) {
		return setupStale
	}
	return setupHeld
}

// ensureSetUp returns the pod once its setup has run, by this call or by
// another Create of the sandbox; errSetupStale if an earlier one was
// interrupted.
func (p *Provider) ensureSetUp(ctx context.Context, pod *corev1.Pod, script string) (*corev1.Pod, error) {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	wait := 50 * time.Millisecond
	for {
		switch judgeSetup(pod, time.Now()) {
		case setupDone:
			return pod, nil
		case setupStale:
			return pod, errSetupStale
		case setupFree:
			token := randomToken()
			claimed, err := p.claimSetup(ctx, pod, token, setupTimeout(ctx))
			if err == nil {
				return p.runSetup(ctx, claimed, script, token)
			}
			if !apierrors.IsConflict(err) {
				return nil, apiError("create: claiming the setup", err)
			}
			wait = 0 // another took it, or the pod changed: read it again
		}
		select {
		case <-ctx.Done():
			return nil, notSetUp(pod, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(max(2*wait, 50*time.Millisecond), time.Second)
		next, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && next.UID != pod.UID):
			return nil, provider.Retryable(fmt.Errorf("kubernetes: pod %s/%s was deleted while its setup ran", pod.Namespace, pod.Name))
		case err != nil && ctx.Err() != nil:
			return nil, notSetUp(pod, ctx.Err())
		case err != nil:
			return nil, apiError("create: get pod", err)
		}
		pod = next
	}
}

// notSetUp is the error of a pod whose setup, by another Create, did not
// finish before ctx ended.
func notSetUp(pod *corev1.Pod, err error) error {
	why := fmt.Errorf("kubernetes: pod %s/%s: waiting for its setup by another attempt: %w", pod.Namespace, pod.Name, err)
	if errors.Is(err, context.DeadlineExceeded) {
		return provider.Retryable(why)
	}
	return why
}

// setupTimeout is how long a setup may run: until ctx's deadline.
func setupTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 10 * time.Minute
}

// claimSetup takes the setup of pod as it was read: the patch carries its
// resourceVersion, so it fails with a conflict if anyone changed the pod
// since (a claim by another Create among them).
func (p *Provider) claimSetup(ctx context.Context, pod *corev1.Pod, token string, timeout time.Duration) (*corev1.Pod, error) {
	until := time.Now().Add(timeout + overrun + claimSlack).Unix()
	return p.annotate(ctx, pod, pod.ResourceVersion, map[string]any{annotationSetupClaim: token + " " + strconv.FormatInt(until, 10)})
}

// runSetup runs the setup under this call's claim and marks the pod set
// up. If it fails, the claim's deadline is set to the past, so that the
// Creates waiting for it, and the next attempt, make the pod again.
func (p *Provider) runSetup(ctx context.Context, pod *corev1.Pod, script, token string) (*corev1.Pod, error) {
	if err := p.setup(ctx, pod, script, setupTimeout(ctx)); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = p.annotate(rctx, pod, "", map[string]any{annotationSetupClaim: token + " 0"})
		return nil, err
	}
	done, err := p.annotate(ctx, pod, "", map[string]any{annotationSetUp: "true", annotationSetupClaim: nil})
	if err != nil {
		return nil, apiError("create: recording the setup done", err)
	}
	return done, nil
}

// annotate merges annotations (nil removes one) into pod, the one of its
// UID; with resourceVersion, only if it is still that version.
func (p *Provider) annotate(ctx context.Context, pod *corev1.Pod, resourceVersion string, annotations map[string]any) (*corev1.Pod, error) {
	meta := map[string]any{"uid": pod.UID, "annotations": annotations}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: annotate: %w", err)
	}
	return p.client.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// setup runs the create's setup script, for at most timeout.
func (p *Provider) setup(ctx context.Context, pod *corev1.Pod, script string, timeout time.Duration) error {
	res, err := p.exec(ctx, pod, provider.ExecRequest{Command: script, Timeout: timeout, MaxOutput: maxSetupOutput})
	switch {
	case err != nil:
		return fmt.Errorf("kubernetes: setup: %w", err)
	case res.TimedOut:
		return fmt.Errorf("setup timed out; output:\n%s", strings.ToValidUTF8(res.Output, "\uFFFD"))
	case res.ExitCode != 0:
		return fmt.Errorf("setup exited with status %d; output:\n%s", res.ExitCode, strings.ToValidUTF8(res.Output, "\uFFFD"))
	}
	return nil
}
