//go:build kubernetes

package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tetherhq/tether/internal/provider/kubernetes/kubetest"
)

// manifests reads every object of the YAML files of deploy/kubernetes.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj.Object) > 0 {
				out = append(out, obj)
			}
		}
	}
	return out
}

// TestKubernetesManifestsApply: every manifest of deploy/kubernetes is
// accepted by a real API server with strict field validation (the
// namespaces, renamed to ones of the test's own, made for real; the rest
// a server-side dry run in them), and
// the Deployment runs Tether as the provider needs it.
func TestKubernetesManifestsApply(t *testing.T) {
	kc, why := kubetest.Kubeconfig()
	if kc == "" {
		t.Skip(why)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(core.Discovery()))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := "-test-" + hex.EncodeToString(b[:])
	rename := func(ns string) string {
		if ns == "" {
			return ""
		}
		return ns + suffix
	}
	objs := manifests(t)
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
	}
	for _, want := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "Secret"} {
		if kinds[want] == 0 {
			t.Errorf("deploy/kubernetes has no %s", want)
		}
	}
	// Namespaces first, and made for real: the dry runs of what lives in
	// them need them.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	for _, obj := range objs {
		if obj.GetKind() == "Namespace" {
			obj.SetName(rename(obj.GetName()))
		}
		obj.SetNamespace(rename(obj.GetNamespace()))
		if obj.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				m := s.(map[string]any)
				m["namespace"] = rename(m["namespace"].(string))
			}
			_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
		}
		m, err := mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
		if obj.GetKind() == "Namespace" {
			opts.DryRun = nil
			name := obj.GetName()
			t.Cleanup(func() { _ = core.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		if _, err := ri.Create(ctx, obj, opts); err != nil {
			t.Errorf("server-side dry run of %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "Deployment" {
			checkDeployment(t, obj)
		}
	}
}

// checkDeployment: several replicas, the kubernetes provider, /readyz,
// and DATABASE_URL from a Secret.
func checkDeployment(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	raw, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas")
	replicas, _ := raw.(float64) // decoded from JSON
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if replicas < 2 || len(containers) != 1 {
		t.Fatalf("deployment: %v replicas, %d containers", replicas, len(containers))
	}
	c := containers[0].(map[string]any)
	path, _, _ := unstructured.NestedString(c, "readinessProbe", "httpGet", "path")
	if path != "/readyz" {
		t.Errorf("readiness probe path %q, want /readyz", path)
	}
	env, _, _ := unstructured.NestedSlice(c, "env")
	found := map[string]string{}
	for _, e := range env {
		m := e.(map[string]any)
		name := m["name"].(string)
		if v, ok := m["value"].(string); ok {
			found[name] = v
		} else if _, ok, _ := unstructured.NestedString(m, "valueFrom", "secretKeyRef", "name"); ok {
			found[name] = "secret"
		}
	}
	if found["DATABASE_URL"] != "secret" || found["PROVIDERS"] != "kubernetes" || !strings.HasPrefix(found["KUBE_NAMESPACE"], "tether") {
		t.Errorf("deployment environment %v", found)
	}
}
