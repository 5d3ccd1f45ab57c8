//go:build kubernetes

package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherhq/tether/provider"
)

// Labels and annotations on what the provider makes.
const (
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	managedBy         = "tether"
	LabelInstallation = "tetherhq.dev/installation"
	LabelSandbox      = "tetherhq.dev/sandbox-id"
	LabelTenant       = "tetherhq.dev/tenant"
	// AnnotationTenant holds the tenant exactly; the label holds it only
	// when it is a valid label value (else a hash of it).
	AnnotationTenant = "tetherhq.dev/tenant"
	containerName    = "sandbox"
)

// deadlineSlack is added to a pod's activeDeadlineSeconds beyond the
// sandbox's end, so that Tether's own expiry, which comes first, records
// the reason expired rather than the pod's failure making it lost.
const deadlineSlack = time.Minute

// terminationGrace is the pods' terminationGracePeriodSeconds and what
// Destroy deletes with: the container's process ends at SIGTERM at once.
const terminationGrace = 1

// Provider runs sandboxes as pods. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	rest   *rest.Config
	client kubernetes.Interface

	infoMu   sync.Mutex
	infoAt   time.Time
	infoWhy  string
	infoOnce bool
}

// New returns a provider for cfg: the cluster of cfg.Kubeconfig, or the
// one Tether runs in. It does not contact the cluster: Info reports
// whether it can be reached.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	var (
		rc  *rest.Config
		err error
	)
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client configuration (KUBECONFIG, else in-cluster): %w", err)
	}
	return NewForConfig(cfg, rc)
}

// NewForConfig is New with a client configuration of the caller's.
func NewForConfig(cfg Config, rc *rest.Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = "tether-kubernetes-provider"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	return &Provider{cfg: cfg, rest: rc, client: client}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Info implements provider.Provider. Whether the namespace's pods can be
// listed is checked at most every 15 seconds.
func (p *Provider) Info(ctx context.Context) provider.Info {
	p.infoMu.Lock()
	if !p.infoOnce || time.Since(p.infoAt) > 15*time.Second {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(cctx, metav1.ListOptions{Limit: 1, LabelSelector: p.selector()})
		cancel()
		p.infoWhy = ""
		if err != nil {
			p.infoWhy = fmt.Sprintf("cannot list pods in namespace %s of %s: %v", p.cfg.Namespace, p.rest.Host, err)
		}
		p.infoAt, p.infoOnce = time.Now(), true
	}
	why := p.infoWhy
	p.infoMu.Unlock()
	c := p.cfg
	return provider.Info{
		Name: Name, Available: why == "", Reason: why,
		Exec: true, Files: true, WorkDir: c.WorkDir,
		Notes: []string{
			fmt.Sprintf("pods in namespace %s of %s, image %s, installation %s", c.Namespace, p.rest.Host, c.Image, c.Installation),
			p.isolationNote(),
			fmt.Sprintf("resources (requests = limits): cpu %dm (params.cpu_millis, at most %d), memory %d MiB (params.memory_mb, at most %d), ephemeral storage %d MiB (params.ephemeral_storage_mb, at most %d)",
				c.Defaults.CPUMillis, c.Maxima.CPUMillis, c.Defaults.MemoryMB, c.Maxima.MemoryMB, c.Defaults.EphemeralStorageMB, c.Maxima.EphemeralStorageMB),
			"network: a NetworkPolicy per sandbox: no ingress; no egress, or with params.network \"allowlist\" only the IPv4 addresses and CIDRs of params.allow; enforced only by a CNI that enforces NetworkPolicies",
			"exec output: past the server's cap (MAX_EXEC_OUTPUT) the first and last parts are kept, with \"[tether: N bytes of output omitted]\" between them; processes still holding an exec's output when it ends are killed",
			"no background processes, terminals or file watches (501 NOT_SUPPORTED): pods/exec gives a command stdin and a terminal only for as long as its connection lasts, so nothing would outlive the request or a restart of Tether, and it has no file watch",
		},
	}
}

func (p *Provider) isolationNote() string {
	rc := "the cluster's default container runtime"
	if p.cfg.RuntimeClassName != "" {
		rc = "runtimeClassName " + p.cfg.RuntimeClassName
	}
	root := "writable root"
	if p.cfg.ReadOnlyRoot {
		root = "read-only root"
	}
	return fmt.Sprintf("isolation: %s; uid %d, no capabilities, no privilege escalation, RuntimeDefault seccomp, no service account token, %s; %s and /tmp are emptyDir volumes",
		rc, p.cfg.RunAsUser, root, p.cfg.WorkDir)
}

// PodName is the name of a sandbox's pod: its id with "-" for "_" (ids
// are lowercase base32 already), a DNS-1123 label.
func PodName(sandboxID string) string { return strings.Replace(sandboxID, "_", "-", 1) }

// selector selects what this installation made.
func (p *Provider) selector() string {
	return LabelManagedBy + "=" + managedBy + "," + LabelInstallation + "=" + p.cfg.Installation
}

// ours reports whether obj's labels say it is this installation's, for
// the sandbox id.
func (p *Provider) ours(meta metav1.Object, id string) bool {
	l := meta.GetLabels()
	return l[LabelManagedBy] == managedBy && l[LabelInstallation] == p.cfg.Installation && l[LabelSandbox] == id
}

// tenantLabel is the tenant as a label value: itself if it is one, else
// "h-" and a hash (the annotation holds it exactly).
func tenantLabel(tenant string) string {
	if len(validation.IsValidLabelValue(tenant)) == 0 {
		return tenant
	}
	return "h-" + shortHash(tenant)
}

func (p *Provider) labels(spec provider.CreateSpec) map[string]string {
	return map[string]string{
		LabelManagedBy:    managedBy,
		LabelInstallation: p.cfg.Installation,
		LabelSandbox:      spec.SandboxID,
		LabelTenant:       tenantLabel(spec.Tenant),
	}
}

// keepScript is the container's process: it waits for ever, and ends at
// SIGTERM at once.
const keepScript = `trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`

// podFor is the pod of a sandbox.
func (p *Provider) podFor(spec provider.CreateSpec, prm Params, now time.Time) *corev1.Pod {
	res := p.resourcesFor(prm)
	quantities := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(res.CPUMillis, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(res.MemoryMB<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(res.EphemeralStorageMB<<20, resource.BinarySI),
	}
	env := make([]corev1.EnvVar, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	uid, no, yes := p.cfg.RunAsUser, false, true
	grace := int64(terminationGrace)
	workSize := resource.NewQuantity(res.EphemeralStorageMB<<20, resource.BinarySI)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: PodName(spec.SandboxID), Namespace: p.cfg.Namespace,
			Labels: p.labels(spec), Annotations: map[string]string{AnnotationTenant: spec.Tenant},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			RuntimeClassName:              optional(p.cfg.RuntimeClassName),
			NodeSelector:                  p.cfg.NodeSelector,
			Tolerations:                   p.cfg.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: containerName, Image: p.cfg.Image,
				Command:    []string{"/bin/sh", "-c", keepScript},
				Env:        env,
				WorkingDir: p.cfg.WorkDir,
				Resources:  corev1.ResourceRequirements{Requests: quantities, Limits: quantities},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
					AllowPrivilegeEscalation: &no, Privileged: &no,
					ReadOnlyRootFilesystem: &p.cfg.ReadOnlyRoot,
					Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: p.cfg.WorkDir}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: workSize}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if !spec.EndBy.IsZero() {
		secs := max(int64(spec.EndBy.Sub(now).Round(time.Second)/time.Second), 1) + int64(deadlineSlack/time.Second)
		pod.Spec.ActiveDeadlineSeconds = &secs
	}
	return pod
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// policyFor is a sandbox's NetworkPolicy: no ingress, egress only to the
// allow-list's entries (none without one). It selects the pod by its
// sandbox label, and exists before the pod does.
func (p *Provider) policyFor(spec provider.CreateSpec, allow []allowEntry) *networkingv1.NetworkPolicy {
	var egress []networkingv1.NetworkPolicyEgressRule
	for _, e := range allow {
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			IPBlock: &networkingv1.IPBlock{CIDR: e.prefix.String(), Except: e.excepted()},
		}}}
		if e.port != 0 {
			proto := corev1.ProtocolTCP
			port := intstr.FromInt32(e.port)
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &proto, Port: &port}}
		}
		egress = append(egress, rule)
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.SandboxID), Namespace: p.cfg.Namespace, Labels: p.labels(spec)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				LabelManagedBy: managedBy, LabelInstallation: p.cfg.Installation, LabelSandbox: spec.SandboxID,
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
}

// apiError turns an API error of op into the provider's: transient ones
// (throttling, timeouts, the server or the network unavailable, a
// conflict, a refusal by a ResourceQuota) are Retryable; a refused spec
// or a forbidden call is not.
func apiError(op string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("kubernetes: %s: %w", op, err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wrapped
	}
	var netErr net.Error
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return provider.Retryable(fmt.Errorf("kubernetes: %s: refused by a ResourceQuota (retried): %w", op, err))
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err),
		apierrors.IsUnauthorized(err), apierrors.IsNotFound(err), apierrors.IsMethodNotSupported(err):
		return wrapped
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsConflict(err),
		apierrors.IsUnexpectedServerError(err), errors.As(err, &netErr):
		return provider.Retryable(wrapped)
	}
	return provider.Retryable(wrapped)
}

// resource describes a pod as the sandbox's Resource.
func (p *Provider) resource(pod *corev1.Pod) provider.Resource {
	why := defunctReason(pod)
	return provider.Resource{
		SandboxID:  pod.Labels[LabelSandbox],
		ProviderID: "pod/" + pod.Namespace + "/" + pod.Name,
		WorkDir:    p.cfg.WorkDir,
		CreatedAt:  pod.CreationTimestamp.UTC(),
		Defunct:    why != "",
		Reason:     why,
	}
}

// defunctReason says why a pod no longer runs a sandbox, or "" while it
// does (or is still starting): it is being deleted, or it ended
// (Succeeded, Failed: evicted, past its deadline, its container gone).
func defunctReason(pod *corev1.Pod) string {
	name := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil {
		why := "pod " + name + " is being deleted"
		if c := condition(pod, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue {
			why += " (" + joinReason(c.Reason, c.Message) + ")"
		}
		return why
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		why := fmt.Sprintf("pod %s %s", name, pod.Status.Phase)
		if r := joinReason(pod.Status.Reason, pod.Status.Message); r != "" {
			why += ": " + r
		}
		if t := terminated(pod); t != nil {
			why += fmt.Sprintf(" (container %s, exit code %d)", joinReason(t.Reason, t.Message), t.ExitCode)
		}
		return why
	}
	return ""
}

func joinReason(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}

func condition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// terminated is the sandbox container's terminated state, if it has one.
func terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// Destroy implements provider.Provider: it deletes the sandbox's pod (with
// its short grace period), waits until the pod is gone, then deletes its
// NetworkPolicy, so the pod never runs without it. Nothing of this
// installation's left for the sandbox is success.
func (p *Provider) Destroy(ctx context.Context, sandboxID string) error {
	if !provider.ValidSandboxID(sandboxID) {
		return fmt.Errorf("kubernetes: destroy: invalid sandbox id %q", sandboxID)
	}
	if err := p.deletePod(ctx, sandboxID, ""); err != nil {
		return err
	}
	return p.deletePolicy(ctx, sandboxID)
}

// deletePod deletes the sandbox's pod, if it is ours, and waits until it
// is gone. With a UID, only the pod of that UID: one made since is left
// alone (a concurrent Create made it to replace the same remains).
func (p *Provider) deletePod(ctx context.Context, id string, only types.UID) error {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	name := PodName(id)
	grace := int64(terminationGrace)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return apiError("destroy: get pod", err)
		}
		if !p.ours(pod, id) || (only != "" && pod.UID != only) {
			return nil // not this installation's, or not that pod: nothing to delete
		}
		if pod.DeletionTimestamp == nil {
			uid := pod.UID
			err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return apiError("destroy: delete pod", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: destroy: waiting for pod %s to go: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (p *Provider) deletePolicy(ctx context.Context, id string) error {
	pols := p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	pol, err := pols.Get(ctx, PodName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return apiError("destroy: get network policy", err)
	}
	if !p.ours(pol, id) {
		return nil
	}
	uid := pol.UID
	err = pols.Delete(ctx, pol.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError("destroy: delete network policy", err)
	}
	return nil
}

// List implements provider.Provider: this installation's pods, page by
// page, and its NetworkPolicies without a pod (the remains of a create
// interrupted between the two), as defunct.
func (p *Provider) List(ctx context.Context) ([]provider.Resource, error) {
	var out []provider.Resource
	seen := map[string]bool{}
	err := p.pages(ctx, func(opts metav1.ListOptions) (string, error) {
		list, err := p.client.CoreV1().Pods(p.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if id := pod.Labels[LabelSandbox]; provider.ValidSandboxID(id) && pod.Name == PodName(id) {
				out = append(out, p.resource(pod))
				seen[id] = true
			}
		}
		return list.Continue, nil
	})
	if err != nil {
		return nil, apiError("list pods", err)
	}
	err = p.pages(ctx, func(opts metav1.ListOptions) (string, error) {
		list, err := p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for _, pol := range list.Items {
			if id := pol.Labels[LabelSandbox]; provider.ValidSandboxID(id) && !seen[id] {
				out = append(out, provider.Resource{SandboxID: id, ProviderID: "networkpolicy/" + pol.Namespace + "/" + pol.Name,
					CreatedAt: pol.CreationTimestamp.UTC(), Defunct: true, Reason: "a network policy without its pod"})
			}
		}
		return list.Continue, nil
	})
	if err != nil {
		return nil, apiError("list network policies", err)
	}
	return out, nil
}

// pages calls list for each page of this installation's objects, with the
// provider's page size. A continue token that expired mid-listing (410
// Gone) fails the listing: the janitor lists again at its next run.
func (p *Provider) pages(ctx context.Context, list func(metav1.ListOptions) (string, error)) error {
	opts := metav1.ListOptions{LabelSelector: p.selector(), Limit: p.cfg.PageSize}
	for {
		next, err := list(opts)
		if err != nil {
			return err
		}
		if next == "" || ctx.Err() != nil {
			return ctx.Err()
		}
		opts.Continue = next
	}
}

// Lookup implements provider.Watcher.
func (p *Provider) Lookup(ctx context.Context, sandboxID string) (provider.Resource, bool, error) {
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, PodName(sandboxID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return provider.Resource{}, false, nil
	}
	if err != nil {
		return provider.Resource{}, false, apiError("lookup", err)
	}
	if !p.ours(pod, sandboxID) {
		return provider.Resource{}, false, nil
	}
	return p.resource(pod), true, nil
}

// shortHash is 16 hex digits of s's SHA-256.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
