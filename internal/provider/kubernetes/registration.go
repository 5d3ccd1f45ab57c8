package kubernetes

import (
	"errors"
	"strconv"

	"github.com/tetherhq/tether/provider"
)

// Registration makes the kubernetes provider one of Tether's. Its
// settings are documented in docs/configuration.md and explained in
// docs/kubernetes.md; KUBE_INSTALLATION's default is worked out from the
// service's DATABASE_URL (DefaultInstallation), which it reads as one of
// the settings it Uses.
var Registration = provider.Registration{
	Name: Name,
	Settings: []provider.Setting{
		{Name: "KUBECONFIG", Doc: "the kubeconfig file to reach the cluster with (unset: the in-cluster service account)"},
		{Name: "KUBE_NAMESPACE", Default: DefaultNamespace, Doc: "namespace of the sandboxes' pods and NetworkPolicies"},
		{Name: "KUBE_IMAGE", Default: DefaultImage, Doc: "the sandboxes' image (needs /bin/sh and tar)"},
		{Name: "KUBE_INSTALLATION", Doc: "this Tether's id on the cluster, a label on all it makes (unset: from DATABASE_URL)"},
		{Name: "KUBE_CPU_MILLIS", Default: strconv.FormatInt(DefaultResources.CPUMillis, 10), Doc: "a sandbox's CPU unless params.cpu_millis asks for more or less"},
		{Name: "KUBE_MEMORY_MB", Default: strconv.FormatInt(DefaultResources.MemoryMB, 10), Doc: "a sandbox's memory unless params.memory_mb asks"},
		{Name: "KUBE_EPHEMERAL_STORAGE_MB", Default: strconv.FormatInt(DefaultResources.EphemeralStorageMB, 10), Doc: "a sandbox's ephemeral storage unless params.ephemeral_storage_mb asks"},
		{Name: "KUBE_MAX_CPU_MILLIS", Default: strconv.FormatInt(DefaultMaxima.CPUMillis, 10), Doc: "the most CPU a create may ask for"},
		{Name: "KUBE_MAX_MEMORY_MB", Default: strconv.FormatInt(DefaultMaxima.MemoryMB, 10), Doc: "the most memory a create may ask for"},
		{Name: "KUBE_MAX_EPHEMERAL_STORAGE_MB", Default: strconv.FormatInt(DefaultMaxima.EphemeralStorageMB, 10), Doc: "the most ephemeral storage a create may ask for"},
		{Name: "KUBE_RUNTIME_CLASS", Doc: "the pods' runtimeClassName (gvisor, kata)"},
		{Name: "KUBE_NODE_SELECTOR", Doc: "the pods' node selector: key=value,key2=value2"},
		{Name: "KUBE_TOLERATIONS", Doc: "the pods' tolerations, a JSON array"},
		{Name: "KUBE_READ_ONLY_ROOT", Default: "false", Doc: "a read-only root file system (the workdir and /tmp stay writable)"},
		{Name: "KUBE_RUN_AS_USER", Default: strconv.Itoa(DefaultUser), Doc: "uid and gid of the sandboxes' processes; never 0"},
		{Name: "KUBE_WORKDIR", Default: DefaultWorkDir, Doc: "the sandboxes' working directory"},
		{Name: "KUBE_LIST_PAGE_SIZE", Default: strconv.Itoa(DefaultPageSize), Doc: "pods per List request"},
		{Name: "KUBE_QPS", Default: strconv.Itoa(DefaultQPS), Doc: "the client's requests a second to the API server"},
		{Name: "KUBE_BURST", Default: strconv.Itoa(DefaultBurst), Doc: "the client's request burst"},
	},
	Uses: []string{"DATABASE_URL"},
	New:  open,
}

// ErrNotBuiltIn is what enabling the provider in a Tether built without the
// build tag kubernetes fails with (see the package comment).
var ErrNotBuiltIn = errors.New("this tether was built without the kubernetes provider (build tag kubernetes): " +
	"build one with it with `make build` or `go build -tags kubernetes ./cmd/api`, " +
	"or run `PROVIDERS=kubernetes make run`, which adds the tag")
