//go:build kubernetes

package kubernetes_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/provider/providertest"
)

// TestConformance runs the provider SDK's suite against the real control
// plane (kwok's nodes: an exec runs on this machine, in the run's work
// folder). A state is an installation id: two providers of one
// installation see one set of pods, another installation sees none of
// them, in the one namespace of the run.
func TestConformance(t *testing.T) {
	if kubeconfig == "" {
		t.Skip(skipReason)
	}
	providertest.Run(t, providertest.Harness{
		NewState: func(*testing.T) string { return "conf-" + token() },
		Open: func(t *testing.T, installation string) provider.Provider {
			serializeSharedTmp(t)
			p, err := kubernetes.New(kubernetes.Config{Kubeconfig: kubeconfig, Namespace: namespace,
				Installation: installation, WorkDir: workDir})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		// The pod fails as an eviction makes it fail; the pod object stays.
		Kill: func(t *testing.T, res provider.Resource) {
			pods := client.CoreV1().Pods(namespace)
			pod, err := pods.Get(t.Context(), kubernetes.PodName(res.SandboxID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod.Status.Phase = corev1.PodFailed
			pod.Status.Reason, pod.Status.Message = "Evicted", "killed by the conformance suite"
			if _, err := pods.UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		BadParams: []string{`[]`, `{"unknown":1}`, `{"cpu_millis":1000000}`, `{"network":"host"}`, `{"network":"allowlist"}`},
		Parallel:  4,
		Timeout:   2 * time.Minute,
	})
}

// sharedTmp is held by a subtest whose commands write a fixed path under
// /tmp, from its Open until its end.
var sharedTmp sync.Mutex

// serializeSharedTmp runs the subtests ExecStream/EmitErrorKills and
// ExecStream/CancelKills one at a time. A limitation of kwok, not of the
// provider: kwok runs every pod's execs on this machine, so all pods share
// the host's /tmp (a real pod has its own, an emptyDir), and the two
// subtests, parallel in two sandboxes, both tick into /tmp/ticks: one
// read the other's command, started later, ticking ("3" then "1").
func serializeSharedTmp(t *testing.T) {
	if !strings.HasSuffix(t.Name(), "/ExecStream/EmitErrorKills") && !strings.HasSuffix(t.Name(), "/ExecStream/CancelKills") {
		return
	}
	sharedTmp.Lock()
	t.Cleanup(sharedTmp.Unlock) // the first cleanup: it runs last, after the sandbox's destroy
}
