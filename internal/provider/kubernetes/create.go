//go:build kubernetes

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tetherhq/tether/provider"
)

// maxSetupOutput is how much of a failed setup's output the error keeps.
const maxSetupOutput = 8 << 10

// Create implements provider.Provider. It is idempotent: a live pod of
// this installation for the sandbox is the sandbox's, waited for like a
// new one; one that already ended or is being deleted (the remains of an
// earlier attempt) is deleted and made again. Concurrent Creates of one
// sandbox converge on one pod, and its setup runs once (setup.go). It
// returns once the pod is Ready and a command runs in it (and the setup,
// if any, succeeded), or ctx ends.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Resource, error) {
	if !provider.ValidSandboxID(spec.SandboxID) {
		return provider.Resource{}, fmt.Errorf("kubernetes: create: invalid sandbox id %q", spec.SandboxID)
	}
	prm, allow, err := p.parseParams(spec.Params)
	if err != nil {
		return provider.Resource{}, err
	}
	for {
		pod, err := p.ensurePod(ctx, spec, prm, allow)
		if err != nil {
			return provider.Resource{}, err
		}
		if pod, err = p.waitReady(ctx, pod); err != nil {
			return provider.Resource{}, err
		}
		if err := p.probe(ctx, pod); err != nil {
			return provider.Resource{}, err
		}
		if spec.Setup == "" {
			return p.resource(pod), nil
		}
		set, err := p.ensureSetUp(ctx, pod, spec.Setup)
		if errors.Is(err, errSetupStale) {
			// Interrupted in its setup, which must not run twice: that
			// pod goes, and a new one is made.
			if err := p.deletePod(ctx, spec.SandboxID, pod.UID); err != nil {
				return provider.Resource{}, provider.Retryable(fmt.Errorf("kubernetes: create: clearing a pod whose setup was interrupted: %w", err))
			}
			continue
		}
		if err != nil {
			return provider.Resource{}, err
		}
		return p.resource(set), nil
	}
}

// ensurePod returns the sandbox's pod, making its NetworkPolicy and then
// the pod unless a live one of ours exists.
func (p *Provider) ensurePod(ctx context.Context, spec provider.CreateSpec, prm Params, allow []allowEntry) (*corev1.Pod, error) {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	name := PodName(spec.SandboxID)
	existing, err := pods.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, apiError("create: get pod", err)
	case !p.ours(existing, spec.SandboxID):
		return nil, fmt.Errorf("kubernetes: create: pod %s/%s exists and is not this installation's (%s=%s)",
			p.cfg.Namespace, name, LabelInstallation, existing.Labels[LabelInstallation])
	case defunctReason(existing) == "":
		// Made by an earlier or a concurrent attempt, perhaps still
		// starting or in its setup: Create waits for it.
		return existing, nil
	default:
		// The remains of an earlier attempt: gone (that pod, not one a
		// concurrent attempt made meanwhile) before a new one.
		if err := p.deletePod(ctx, spec.SandboxID, existing.UID); err != nil {
			return nil, provider.Retryable(fmt.Errorf("kubernetes: create: clearing an earlier attempt's pod: %w", err))
		}
	}
	if err := p.ensurePolicy(ctx, spec, allow); err != nil {
		return nil, err
	}
	created, err := pods.Create(ctx, p.podFor(spec, prm, time.Now()), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Another attempt made it meanwhile: the same pod, if it is ours.
		if created, err = pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, apiError("create: get pod", err)
		}
		if !p.ours(created, spec.SandboxID) {
			return nil, fmt.Errorf("kubernetes: create: pod %s/%s exists and is not this installation's", p.cfg.Namespace, name)
		}
		return created, nil
	}
	if err != nil {
		return nil, apiError("create pod", err)
	}
	return created, nil
}

// ensurePolicy makes the sandbox's NetworkPolicy, or keeps the one of
// ours that exists.
func (p *Provider) ensurePolicy(ctx context.Context, spec provider.CreateSpec, allow []allowEntry) error {
	pols := p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	_, err := pols.Create(ctx, p.policyFor(spec, allow), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pol, err := pols.Get(ctx, PodName(spec.SandboxID), metav1.GetOptions{})
		if err != nil {
			return apiError("create: get network policy", err)
		}
		if !p.ours(pol, spec.SandboxID) {
			return fmt.Errorf("kubernetes: create: network policy %s/%s exists and is not this installation's", p.cfg.Namespace, pol.Name)
		}
		return nil
	}
	return apiError("create network policy", err)
}

// Container waiting reasons that no wait cures: the image cannot be
// pulled or the container cannot be made from the spec.
var hopeless = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// startState is what waitReady learnt of a starting pod.
type startState struct {
	ready bool
	// fail is a reason to give up: Retryable when another attempt may
	// succeed.
	fail error
	// pending says why the pod is not running yet (unschedulable, say),
	// for the error if ctx ends first.
	pending string
}

// judgeStart reads a starting pod's status.
func judgeStart(pod *corev1.Pod) startState {
	name := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil {
		return startState{fail: provider.Retryable(fmt.Errorf("kubernetes: pod %s was deleted while it started", name))}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && hopeless[w.Reason] {
			return startState{fail: fmt.Errorf("kubernetes: pod %s cannot start: %s", name, joinReason(w.Reason, w.Message))}
		}
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		why := defunctReason(pod)
		if terminated(pod) != nil {
			// Its container ran and ended: the image or spec is wrong.
			return startState{fail: fmt.Errorf("kubernetes: the sandbox's container ended at once: %s", why)}
		}
		// Refused before it ran (a node's admission): another may take it.
		return startState{fail: provider.Retryable(fmt.Errorf("kubernetes: %s", why))}
	}
	if c := condition(pod, corev1.PodReady); pod.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue {
		return startState{ready: true}
	}
	if c := condition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		return startState{pending: "not scheduled: " + joinReason(c.Reason, c.Message)}
	}
	return startState{pending: fmt.Sprintf("phase %s", cmpOr(string(pod.Status.Phase), "Pending"))}
}

// waitReady watches the pod until it is Ready, cannot start, or ctx ends.
// A pod that cannot be scheduled yet (no room, a quota) is waited for: the
// scheduler retries it; if ctx ends first, the error says why (Retryable).
func (p *Provider) waitReady(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	st := judgeStart(pod)
	for {
		switch {
		case st.ready:
			return pod, nil
		case st.fail != nil:
			return nil, st.fail
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
			ResourceVersion: pod.ResourceVersion,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, notReady(pod, st, ctx.Err())
			}
			return nil, apiError("create: watch pod", err)
		}
		last, decided, gone, err := nextState(ctx, w, pod)
		w.Stop()
		pod = last
		switch {
		case err != nil:
			return nil, notReady(pod, judgeStart(pod), err)
		case gone:
			return nil, provider.Retryable(fmt.Errorf("kubernetes: pod %s/%s was deleted while it started", pod.Namespace, pod.Name))
		case !decided:
			// The watch ended (a timeout, a compaction): read it again.
			next, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				if ctx.Err() != nil {
					return nil, notReady(pod, judgeStart(pod), ctx.Err())
				}
				return nil, apiError("create: get pod", err)
			}
			pod = next
		}
		st = judgeStart(pod)
	}
}

// nextState reads the watch until the pod changes in a way that decides
// (ready, failed: decided; gone), the watch ends, or ctx ends; it returns
// the pod as last seen.
func nextState(ctx context.Context, w watch.Interface, pod *corev1.Pod) (last *corev1.Pod, decided, gone bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return pod, false, false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return pod, false, false, nil
			}
			if ev.Type == watch.Deleted {
				return pod, false, true, nil
			}
			next, isPod := ev.Object.(*corev1.Pod)
			if !isPod || next.UID != pod.UID {
				continue
			}
			pod = next
			if decides(pod) {
				return pod, true, false, nil
			}
		}
	}
}

// decides reports whether a starting pod's status decides its create:
// ready, or a reason to give up (judgeStart returns which).
func decides(pod *corev1.Pod) bool {
	st := judgeStart(pod)
	return st.ready || st.fail != nil
}

// notReady is the error of a pod that was not ready before ctx ended.
func notReady(pod *corev1.Pod, st startState, err error) error {
	why := fmt.Errorf("kubernetes: pod %s/%s not ready (%s): %w", pod.Namespace, pod.Name, st.pending, err)
	if errors.Is(err, context.DeadlineExceeded) {
		return provider.Retryable(why)
	}
	return why
}

// probe runs a command in the ready pod: the image must have the shell
// and tools the provider's commands use. A transport failure is
// Retryable; a failing shell is not.
func (p *Provider) probe(ctx context.Context, pod *corev1.Pod) error {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := p.exec(pctx, pod, provider.ExecRequest{
		Command: `for t in cat head tar mkdir mv rm cp wc dirname sleep; do command -v "$t" >/dev/null || { echo "missing: $t"; exit 3; }; done; printf ok`,
		Timeout: 20 * time.Second, MaxOutput: 4096,
	})
	switch {
	case err != nil:
		return provider.Retryable(fmt.Errorf("kubernetes: probe of pod %s: %w", pod.Name, err))
	case res.TimedOut:
		return provider.Retryable(fmt.Errorf("kubernetes: probe of pod %s timed out", pod.Name))
	case res.ExitCode != 0 || res.Output != "ok":
		return fmt.Errorf("kubernetes: the image %s cannot run the provider's commands (exit status %d): %s", p.cfg.Image, res.ExitCode, res.Output)
	}
	return nil
}
