//go:build kubernetes

package chaos

// TestChaosKube is the storm with the kubernetes provider, on a Kubernetes
// control plane of its own (scripts/kube.sh start chaoskube: etcd,
// kube-apiserver, the controller manager, the scheduler and kwok's node),
// so that crashing its API server disturbs no other test's cluster.
// Replicas are kill -9ed during creates and deletes, and the API server is
// SIGKILLed and restarted once, mid-storm. After a settle it checks that no
// sandbox ever had two pods (a watch records every pod of the installation
// by UID), that every pod and NetworkPolicy with the installation's labels
// belongs to a live sandbox and every live sandbox has its pod, that every
// sandbox settled and every ended one was released, that none was marked
// lost (nothing deletes pods behind Tether's back here), and that every
// history is a legal path.
//
//	go test -count=1 ./test/chaos -run 'TestChaosKube$' -v                       # the 20s storm
//	go test -count=1 ./test/chaos -run 'TestChaosKube$' -chaos.duration=3m -v    # longer
//	go test -count=1 ./test/chaos -run 'TestChaosKube$' -chaos.seed=N -v         # replay a run's storm
//
// It skips, saying why, where scripts/kube.sh cannot start a cluster (no
// Go toolchain to build the binaries, no openssl or curl).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherhq/tether/internal/domain"
	"github.com/tetherhq/tether/internal/provider/kubernetes"
	"github.com/tetherhq/tether/test/harness"
)

// kubeClusterName is the chaos run's own control plane (its state in
// .data/kube-chaoskube, its ports derived from the name).
const kubeClusterName = "chaoskube"

// kubeApiserverDown is how long the API server stays dead in its restart
// (on top of the time it takes to start again).
const kubeApiserverDown = 2 * time.Second

func TestChaosKube(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	seed := uint64(*seedFlag)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	cl := startKubeCluster(t, kubeClusterName)
	h := newChaos(t, seed, 0)
	// Pods cost the node a few API calls and an exec each: a gentler
	// storm than the sim's.
	h.clients, h.pauseLo, h.pauseHi = max(1, *nClients/2), 30*time.Millisecond, 200*time.Millisecond
	k := &kubeChaos{chaos: h, cl: cl, uids: map[string]map[string]bool{}}
	k.setup()
	k.startReplicas()
	k.watchPods()
	k.storm()
	k.quiesce()
	k.check()
}

// kubeCluster is a control plane of scripts/kube.sh started for one test.
type kubeCluster struct {
	t          *testing.T
	root, name string
	kubeconfig string
	client     k8s.Interface
}

// kubeScriptEnv is this process's environment for scripts/kube.sh acting
// on a named cluster of the test's own: without what could point it at
// another cluster (KUBECONFIG, TETHER_KUBE_DIR, TETHER_KUBE_PORT), and with
// CI=true so that a derived port another program holds moves to a free one.
func kubeScriptEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "KUBECONFIG" && k != "CI" && !strings.HasPrefix(k, "TETHER_KUBE_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "CI=true"), extra...)
}

// kubeScript runs scripts/kube.sh VERB NAME; it returns its last line of
// stdout and, on failure, an error with the tail of its stderr.
func (c *kubeCluster) script(ctx context.Context, verb string, extra ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "scripts", "kube.sh"), verb, c.name)
	cmd.Dir = c.root
	cmd.Env = kubeScriptEnv(extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/kube.sh %s %s: %w\n%s", verb, c.name, err, harnessTail(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func harnessTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startKubeCluster starts (or reuses) the named control plane, stopped when
// the test ends. A cluster that cannot start skips the test, with the
// script's words (a cold machine builds the binaries first, about 10
// minutes; make test has built them for the shared cluster by then).
func startKubeCluster(t *testing.T, name string) *kubeCluster {
	t.Helper()
	c := &kubeCluster{t: t, root: harness.RepoRoot(t), name: name}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	kc, err := c.script(ctx, "start")
	if err != nil {
		t.Skipf("no Kubernetes control plane of the test's own: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the control plane's logs: %s", filepath.Join(c.root, ".data", "kube-"+name))
		}
		if _, err := c.script(context.Background(), "stop"); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	c.kubeconfig = kc
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if c.client, err = k8s.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	return c
}

// restartAPIServer SIGKILLs the cluster's API server and starts it again,
// returning once the cluster is ready.
func (c *kubeCluster) restartAPIServer(ctx context.Context, down time.Duration) error {
	_, err := c.script(ctx, "restart-apiserver", fmt.Sprintf("TETHER_KUBE_DOWN_SECONDS=%.1f", down.Seconds()))
	return err
}

type kubeChaos struct {
	*chaos
	cl           *kubeCluster
	namespace    string
	installation string
	workDir      string

	apiRestarts atomic.Int64
	apiDown     time.Time
	apiUp       time.Time

	// uids maps each sandbox id to the UIDs of every pod the watch saw
	// for it; relists counts the watch's restarts (each a full listing).
	uidMu     sync.Mutex
	uids      map[string]map[string]bool
	relists   int
	stopWatch func()
	settled   kubeState // quiesce's last snapshot
}

func kubeToken() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// setup makes the run's namespace (deleted at its end) and waits for its
// default service account, which pods need.
func (k *kubeChaos) setup() {
	t := k.t
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tok := kubeToken()
	k.namespace, k.installation, k.workDir = "chaos-"+tok, "chaos-"+tok, harness.ReachableTempDir(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.namespace}}
	if _, err := k.cl.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = k.cl.client.CoreV1().Namespaces().Delete(context.Background(), k.namespace, metav1.DeleteOptions{})
	})
	for {
		if _, err := k.cl.client.CoreV1().ServiceAccounts(k.namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no default service account in %s", k.namespace)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (k *kubeChaos) startReplicas() {
	env := []string{
		"DATABASE_URL=" + k.dbURL,
		"BOOTSTRAP_API_KEY=" + apiKey,
		"PROVIDERS=kubernetes",
		"KUBECONFIG=" + k.cl.kubeconfig,
		"KUBE_NAMESPACE=" + k.namespace,
		"KUBE_INSTALLATION=" + k.installation,
		"KUBE_WORKDIR=" + k.workDir,
		// The node (kwok's) holds 32 CPUs and 110 pods: small pods.
		"KUBE_CPU_MILLIS=10", "KUBE_MEMORY_MB=16", "KUBE_EPHEMERAL_STORAGE_MB=16",
		"JANITOR_INTERVAL=" + janitorInterval.String(),
		"DEFAULT_TTL=8s",
		"CREATE_TIMEOUT=30s",
		"EXECUTOR_LEASE=2s",
		"EXECUTOR_POLL_INTERVAL=250ms",
		"EXECUTOR_MAX_BACKOFF=3s",
		"ORPHAN_GRACE=2s",
		"SHUTDOWN_TIMEOUT=2s",
		"DB_MAX_CONNS=8",
		"TENANT_MAX_LIVE=1000000", "TENANT_CREATES_PER_MINUTE=1000000", "KEY_REQUESTS_PER_SECOND=1000000",
	}
	for i := range *nReplicas {
		r := harness.NewReplica(k.t, k.bin, filepath.Join(k.logDir, fmt.Sprintf("replica-%d.log", i)), env...)
		k.replicas = append(k.replicas, r)
		r.Start()
	}
	for _, r := range k.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// selector selects what this run's Tethers make.
func (k *kubeChaos) selector() string {
	return kubernetes.LabelInstallation + "=" + k.installation
}

// record notes a pod of the installation.
func (k *kubeChaos) record(p *corev1.Pod) {
	id := p.Labels[kubernetes.LabelSandbox]
	if id == "" {
		id = "?" + p.Name
	}
	k.uidMu.Lock()
	defer k.uidMu.Unlock()
	if k.uids[id] == nil {
		k.uids[id] = map[string]bool{}
	}
	k.uids[id][string(p.UID)] = true
}

// watchPods records every pod of the installation until check: a listing,
// then a watch from its resourceVersion; when the watch ends (the API
// server's restart ends it, or it expires) a new listing and a new watch.
// A pod made and deleted between a watch's end and the next listing would
// be missed; that gap is one round trip, and a pod lives for seconds.
func (k *kubeChaos) watchPods() {
	ctx, cancel := context.WithCancel(k.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pods := k.cl.client.CoreV1().Pods(k.namespace)
		for ctx.Err() == nil {
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k.selector()})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			k.uidMu.Lock()
			k.relists++
			k.uidMu.Unlock()
			for i := range list.Items {
				k.record(&list.Items[i])
			}
			w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: k.selector(), ResourceVersion: list.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Error {
					k.record(p)
				}
			}
			w.Stop()
		}
	}()
	k.stopWatch = func() { cancel(); <-done }
	k.t.Cleanup(k.stopWatch)
}

// createBody is a create of a pod sandbox; some live for a TTL of their own.
func (k *kubeChaos) createBody() map[string]any {
	body := map[string]any{"provider": "kubernetes", "labels": map[string]string{"chaos": "yes"}}
	if k.intn(3) == 0 {
		body["ttl_seconds"] = 3 + k.intn(8)
	}
	return body
}

// clientLoop creates sandboxes (a quarter cancelled during their create),
// deletes, renews and reads them.
func (k *kubeChaos) clientLoop(ctx context.Context) {
	for ctx.Err() == nil {
		switch n := k.intn(100); {
		case n < 40:
			code, sb := k.call(http.MethodPost, "/v1/sandboxes", k.createBody())
			if code == http.StatusAccepted {
				id := sb["id"].(string)
				k.created.Store(id, struct{}{})
				if k.intn(4) == 0 { // cancel while requested or creating
					time.Sleep(k.between(0, 1500*time.Millisecond))
					k.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
				}
			}
		case n < 60:
			if id := k.randomCreated(); id != "" {
				k.call(http.MethodDelete, "/v1/sandboxes/"+id, nil)
			}
		case n < 70:
			if id := k.randomCreated(); id != "" {
				k.call(http.MethodPost, "/v1/sandboxes/"+id+"/renew", map[string]any{"ttl_seconds": 3 + k.intn(8)})
			}
		case n < 85:
			if id := k.randomCreated(); id != "" {
				k.call(http.MethodGet, "/v1/sandboxes/"+id+"?wait=2s", nil)
			}
		default:
			k.call(http.MethodGet, "/v1/sandboxes?limit=20&state=ready", nil)
		}
		time.Sleep(k.between(k.pauseLo, k.pauseHi))
	}
}

func (k *kubeChaos) storm() {
	ctx, cancel := context.WithTimeout(k.t.Context(), *stormFor)
	defer cancel()
	var wg sync.WaitGroup
	for range k.clients {
		wg.Go(func() { k.clientLoop(ctx) })
	}
	wg.Go(func() { k.killLoop(ctx) })
	wg.Go(func() {
		// Crash the API server once, 40% into the storm.
		select {
		case <-ctx.Done():
			return
		case <-time.After(*stormFor * 4 / 10):
		}
		k.apiDown = time.Now()
		rctx, rcancel := context.WithTimeout(k.t.Context(), 2*time.Minute)
		defer rcancel()
		if err := k.cl.restartAPIServer(rctx, kubeApiserverDown); err != nil {
			k.t.Errorf("restart the API server: %v", err)
			return
		}
		k.apiUp = time.Now()
		k.apiRestarts.Add(1)
	})
	wg.Wait()
	for _, r := range k.replicas {
		if !r.Alive() {
			r.Start()
		}
	}
	for _, r := range k.replicas {
		r.WaitReady(60 * time.Second)
	}
}

// kubeState is what the registry and the cluster hold.
type kubeState struct {
	unsettled, unreleased []string
	ready                 map[string]bool
	pods, policies        map[string]int // sandbox id -> how many
	// others counts the installation's other objects of each sandbox
	// (services, config maps, secrets, volume claims): "kind/id".
	others map[string]int
}

func (k *kubeChaos) snapshot(ctx context.Context, conn *pgx.Conn) (kubeState, error) {
	s := kubeState{ready: map[string]bool{}, pods: map[string]int{}, policies: map[string]int{}, others: map[string]int{}}
	rows, err := conn.Query(ctx, `SELECT id, state, released FROM sandboxes`)
	if err != nil {
		return s, err
	}
	var id string
	var st domain.State
	var released bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &st, &released}, func() error {
		switch {
		case !st.Settled():
			s.unsettled = append(s.unsettled, id)
		case st == domain.StateReady:
			s.ready[id] = true
		case !released:
			s.unreleased = append(s.unreleased, id)
		}
		return nil
	}); err != nil {
		return s, err
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pods, err := k.cl.client.CoreV1().Pods(k.namespace).List(lctx, metav1.ListOptions{LabelSelector: k.selector()})
	if err != nil {
		return s, err
	}
	for i := range pods.Items {
		k.record(&pods.Items[i])
		s.pods[pods.Items[i].Labels[kubernetes.LabelSandbox]]++
	}
	pols, err := k.cl.client.NetworkingV1().NetworkPolicies(k.namespace).List(lctx, metav1.ListOptions{LabelSelector: k.selector()})
	if err != nil {
		return s, err
	}
	for _, p := range pols.Items {
		s.policies[p.Labels[kubernetes.LabelSandbox]]++
	}
	return s, k.otherObjects(lctx, &s)
}

// otherObjects counts the installation's services, config maps, secrets
// and volume claims by sandbox: none of a sandbox that is not ready may
// remain.
func (k *kubeChaos) otherObjects(ctx context.Context, s *kubeState) error {
	core, opts := k.cl.client.CoreV1(), metav1.ListOptions{LabelSelector: k.selector()}
	svcs, err := core.Services(k.namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	for _, o := range svcs.Items {
		s.others["service/"+o.Labels[kubernetes.LabelSandbox]]++
	}
	cms, err := core.ConfigMaps(k.namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	for _, o := range cms.Items {
		s.others["configmap/"+o.Labels[kubernetes.LabelSandbox]]++
	}
	secrets, err := core.Secrets(k.namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	for _, o := range secrets.Items {
		s.others["secret/"+o.Labels[kubernetes.LabelSandbox]]++
	}
	pvcs, err := core.PersistentVolumeClaims(k.namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	for _, o := range pvcs.Items {
		s.others["pvc/"+o.Labels[kubernetes.LabelSandbox]]++
	}
	return nil
}

// otherLeaks returns the other objects of sandboxes that are not ready.
func (s kubeState) otherLeaks() []string {
	var out []string
	for key, n := range s.others {
		_, id, _ := strings.Cut(key, "/")
		if !s.ready[id] {
			out = append(out, fmt.Sprintf("%s×%d", key, n))
		}
	}
	return out
}

// leaks returns the pods (or NetworkPolicies) no ready sandbox accounts
// for, and the ready sandboxes without exactly one pod.
func (s kubeState) leaks(of map[string]int) []string {
	var out []string
	for id, n := range of {
		if !s.ready[id] {
			out = append(out, fmt.Sprintf("%s×%d", id, n))
		}
	}
	return out
}

func (s kubeState) missing() []string {
	var out []string
	for id := range s.ready {
		if s.pods[id] != 1 {
			out = append(out, fmt.Sprintf("%s (%d pods)", id, s.pods[id]))
		}
	}
	return out
}

func (s kubeState) quiet() bool {
	return len(s.unsettled) == 0 && len(s.unreleased) == 0 && len(s.leaks(s.pods)) == 0 &&
		len(s.leaks(s.policies)) == 0 && len(s.otherLeaks()) == 0 && len(s.missing()) == 0
}

// quiesce waits for the settle: every sandbox settled and released, and
// the cluster holding exactly the live sandboxes' pods and policies.
func (k *kubeChaos) quiesce() {
	ctx := k.t.Context()
	conn, err := pgx.Connect(ctx, k.dbURL)
	if err != nil {
		k.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := k.snapshot(ctx, conn)
		if err == nil && s.quiet() {
			k.settled = s
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				k.t.Fatalf("snapshot: %v", err)
			}
			k.t.Logf("not quiet after 90s: %d unsettled, %d unreleased, %d leaked pods, %d leaked policies, %d missing",
				len(s.unsettled), len(s.unreleased), len(s.leaks(s.pods)), len(s.leaks(s.policies)), len(s.missing()))
			k.settled = s
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (k *kubeChaos) check() {
	ctx := k.t.Context()
	conn, err := pgx.Connect(ctx, k.dbURL)
	if err != nil {
		k.t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	k.stopWatch()
	s := k.settled
	var total, lost int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE reason = 'lost') FROM sandboxes`).Scan(&total, &lost); err != nil {
		k.t.Fatal(err)
	}
	// Duplicates: a sandbox that ever had more than one pod (pods are
	// named after their sandbox, so two never exist at once: a second is
	// one made again after the first was deleted, by a create racing the
	// sandbox's end).
	var duplicates []string
	k.uidMu.Lock()
	made, relists := 0, k.relists
	for id, uids := range k.uids {
		made += len(uids)
		if len(uids) > 1 {
			duplicates = append(duplicates, fmt.Sprintf("%s×%d", id, len(uids)))
		}
	}
	k.uidMu.Unlock()
	leaks, policyLeaks, otherLeaks, missing := s.leaks(s.pods), s.leaks(s.policies), s.otherLeaks(), s.missing()
	illegal := k.checkHistories(ctx, conn)
	summary := fmt.Sprintf("chaos kube: sandboxes=%d pods_made=%d requests=%d kills=%d apiserver_restarts=%d duplicates=%d leaks=%d leaked_policies=%d leaked_other_objects=%d missing=%d unsettled=%d unreleased=%d lost=%d illegal_histories=%d ready_at_end=%d watch_relists=%d",
		total, made, k.requests.Load(), k.kills.Load(), k.apiRestarts.Load(), len(duplicates), len(leaks), len(policyLeaks), len(otherLeaks),
		len(missing), len(s.unsettled), len(s.unreleased), lost, len(illegal), len(s.ready), relists)
	fmt.Println(summary)
	k.t.Log(summary)

	fail := func(what string, items []string) {
		if len(items) > 0 {
			slices.Sort(items)
			k.t.Errorf("%s (%d): %v", what, len(items), items[:min(len(items), 10)])
		}
	}
	fail("unsettled sandboxes", s.unsettled)
	fail("terminal sandboxes never released", s.unreleased)
	fail("pods of no live sandbox", leaks)
	fail("NetworkPolicies of no live sandbox", policyLeaks)
	fail("services, config maps, secrets or volume claims of no live sandbox", otherLeaks)
	fail("ready sandboxes without exactly one pod", missing)
	fail("sandboxes that had more than one pod", duplicates)
	for _, d := range duplicates[:min(len(duplicates), 3)] {
		id, _, _ := strings.Cut(d, "×")
		k.t.Logf("history of %s:\n%s", id, k.history(conn, id))
	}
	fail("illegal histories", illegal)
	if lost > 0 {
		// Nothing deletes a pod behind Tether's back here: a lost
		// sandbox is one whose pod Tether failed to see.
		k.t.Errorf("%d sandboxes ended lost, though every pod lived until Tether deleted it", lost)
	}
	if k.apiRestarts.Load() != 1 {
		k.t.Errorf("the API server was restarted %d times, want 1", k.apiRestarts.Load())
	}
	if total < 20 || made < 10 {
		k.t.Errorf("the storm made only %d sandboxes and %d pods; the run proves little", total, made)
	}
	for _, r := range k.replicas {
		if b, err := os.ReadFile(r.LogPath); err == nil && bytes.Contains(b, []byte("panic")) {
			k.t.Errorf("a replica panicked; log in %s", r.LogPath)
		}
	}
}
