//go:build kubernetes

package kubernetes

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/tetherhq/tether/provider"
)

// watchBuffer is how many reports Watch holds for a slow reader before it
// drops them (the janitor's listing finds those).
const watchBuffer = 1024

// Watch implements provider.Watcher: an informer on this installation's
// pods reports each pod that becomes defunct (being deleted, Succeeded,
// Failed) or is deleted, with the reason its status gives. The informer
// and the goroutine that forwards its reports end with ctx; the channel
// is closed then.
func (p *Provider) Watch(ctx context.Context) <-chan provider.Resource {
	out := make(chan provider.Resource)
	events := make(chan provider.Resource, watchBuffer)
	report := func(r provider.Resource) {
		if !provider.ValidSandboxID(r.SandboxID) {
			return
		}
		select {
		case events <- r:
		default: // full: the listing will find it
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 0,
		informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.selector() }))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && defunctReason(pod) != "" {
				report(p.resource(pod))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && defunctReason(pod) != "" && (defunctReason(old) == "" || old.UID != pod.UID) {
				report(p.resource(pod))
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r := p.resource(pod)
				r.Defunct, r.Reason = true, deletedReason(pod)
				report(r)
			}
		},
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		factory.Start(ctx.Done())
		<-ctx.Done()
		factory.Shutdown()
	})
	go func() {
		defer close(out)
		defer wg.Wait()
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-events:
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// deletedReason says why a deleted pod no longer runs its sandbox: it was
// deleted, and what its last status said.
func deletedReason(pod *corev1.Pod) string {
	why := "pod " + pod.Namespace + "/" + pod.Name + " was deleted"
	if last := defunctReason(pod); last != "" && pod.DeletionTimestamp == nil {
		why += "; before that: " + last
	} else if c := condition(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue {
		why += " (" + joinReason(c.Reason, c.Message) + ")"
	} else if r := joinReason(pod.Status.Reason, pod.Status.Message); r != "" {
		why += " (" + r + ")"
	}
	return why
}
