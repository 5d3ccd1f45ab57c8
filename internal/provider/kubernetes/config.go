//go:build kubernetes

package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Config is the provider's configuration. ConfigFromEnv reads it from the
// environment; the zero values of a Config built by hand take the
// defaults noted (withDefaults).
type Config struct {
	// Kubeconfig is the path of a kubeconfig (KUBECONFIG); empty: the
	// in-cluster configuration of the pod Tether runs in.
	Kubeconfig string
	// Namespace is where the sandboxes' pods live (KUBE_NAMESPACE,
	// default "tether").
	Namespace string
	// Image is the sandboxes' image (KUBE_IMAGE, default DefaultImage).
	// It needs /bin/sh and the usual tools: sleep, cat, head, tar, mkdir,
	// mv, rm, and either stat or wc.
	Image string
	// Installation is this Tether installation's id (KUBE_INSTALLATION),
	// a label value on every pod it makes: List finds only its own, so
	// two Tethers on one cluster never reap each other's pods. Every
	// replica of one installation must have the same. Default: derived
	// from DATABASE_URL (DefaultInstallation).
	Installation string
	// Defaults are a sandbox's resources unless its params ask for
	// others, Maxima the most they may ask for (KUBE_CPU_MILLIS,
	// KUBE_MEMORY_MB, KUBE_EPHEMERAL_STORAGE_MB and their KUBE_MAX_
	// forms). Requests equal limits: sandboxes are Guaranteed pods.
	Defaults, Maxima Resources
	// RuntimeClassName is the pods' runtimeClassName (KUBE_RUNTIME_CLASS):
	// gVisor or Kata for isolation stronger than a container's. Empty:
	// the cluster's default runtime.
	RuntimeClassName string
	// NodeSelector places sandboxes' pods (KUBE_NODE_SELECTOR,
	// "key=value,key2=value2").
	NodeSelector map[string]string
	// Tolerations let them onto tainted nodes (KUBE_TOLERATIONS, a JSON
	// array of Kubernetes tolerations).
	Tolerations []corev1.Toleration
	// ReadOnlyRoot makes the container's root file system read-only
	// (KUBE_READ_ONLY_ROOT, default false); the workdir and /tmp stay
	// writable (emptyDir volumes).
	ReadOnlyRoot bool
	// RunAsUser is the uid and gid sandboxes run as (KUBE_RUN_AS_USER,
	// default 1000); never 0.
	RunAsUser int64
	// WorkDir is the sandboxes' working directory, an emptyDir volume
	// (KUBE_WORKDIR, default "/workspace").
	WorkDir string
	// PageSize is how many pods one List request asks for
	// (KUBE_LIST_PAGE_SIZE, default 500).
	PageSize int64
	// QPS and Burst bound the provider's requests to the API server
	// (KUBE_QPS, default 50; KUBE_BURST, default 100).
	QPS   float32
	Burst int
}

// Least resources a create may ask for.
var minResources = Resources{CPUMillis: 10, MemoryMB: 16, EphemeralStorageMB: 16}

// DefaultInstallation is the installation id of a Tether whose
// KUBE_INSTALLATION is unset: "db-" and a hash of its DATABASE_URL's host,
// port and database name (not its user, password or options), so the
// replicas of one installation, which share a registry, share it too,
// while two Tethers with two registries differ. Without a DATABASE_URL it
// is "tether". Set KUBE_INSTALLATION when the replicas reach the
// registry by different addresses.
func DefaultInstallation(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if databaseURL == "" || err != nil || u.Host == "" {
		return "tether"
	}
	sum := sha256.Sum256([]byte(strings.ToLower(u.Host) + "/" + strings.TrimPrefix(u.Path, "/")))
	return "db-" + hex.EncodeToString(sum[:])[:16]
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	c.Namespace = cmpOr(c.Namespace, DefaultNamespace)
	c.Image = cmpOr(c.Image, DefaultImage)
	c.Installation = cmpOr(c.Installation, "tether")
	c.WorkDir = cmpOr(c.WorkDir, DefaultWorkDir)
	c.Defaults = c.Defaults.or(DefaultResources)
	c.Maxima = c.Maxima.or(DefaultMaxima)
	if c.RunAsUser == 0 {
		c.RunAsUser = DefaultUser
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.QPS == 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	return c
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (r Resources) or(def Resources) Resources {
	if r.CPUMillis == 0 {
		r.CPUMillis = def.CPUMillis
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = def.MemoryMB
	}
	if r.EphemeralStorageMB == 0 {
		r.EphemeralStorageMB = def.EphemeralStorageMB
	}
	return r
}

// validate checks a configuration with its defaults filled.
func (c Config) validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("KUBE_NAMESPACE %q: %s", c.Namespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsValidLabelValue(c.Installation); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("KUBE_INSTALLATION %q is not a label value: %s", c.Installation, strings.Join(msgs, "; ")))
	}
	if !strings.HasPrefix(c.WorkDir, "/") || strings.ContainsAny(c.WorkDir, "\x00\n") {
		errs = append(errs, fmt.Errorf("KUBE_WORKDIR %q must be an absolute path", c.WorkDir))
	}
	if c.RunAsUser < 1 {
		errs = append(errs, errors.New("KUBE_RUN_AS_USER must be a uid of at least 1 (sandboxes never run as root)"))
	}
	for _, r := range []struct {
		name         string
		def, max, lo int64
	}{
		{"CPU_MILLIS", c.Defaults.CPUMillis, c.Maxima.CPUMillis, minResources.CPUMillis},
		{"MEMORY_MB", c.Defaults.MemoryMB, c.Maxima.MemoryMB, minResources.MemoryMB},
		{"EPHEMERAL_STORAGE_MB", c.Defaults.EphemeralStorageMB, c.Maxima.EphemeralStorageMB, minResources.EphemeralStorageMB},
	} {
		if r.def < r.lo || r.def > r.max {
			errs = append(errs, fmt.Errorf("KUBE_%s (%d) must be between %d and KUBE_MAX_%s (%d)", r.name, r.def, r.lo, r.name, r.max))
		}
	}
	for k, v := range c.NodeSelector {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("KUBE_NODE_SELECTOR %s=%s: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	if c.PageSize < 1 || c.QPS <= 0 || c.Burst < 1 {
		errs = append(errs, errors.New("KUBE_LIST_PAGE_SIZE, KUBE_QPS and KUBE_BURST must be positive"))
	}
	return errors.Join(errs...)
}

// ConfigFromEnv reads the provider's settings through getenv (os.Getenv):
// KUBECONFIG, KUBE_NAMESPACE, KUBE_IMAGE, KUBE_INSTALLATION (default
// DefaultInstallation of DATABASE_URL), KUBE_CPU_MILLIS, KUBE_MEMORY_MB,
// KUBE_EPHEMERAL_STORAGE_MB, KUBE_MAX_CPU_MILLIS, KUBE_MAX_MEMORY_MB,
// KUBE_MAX_EPHEMERAL_STORAGE_MB, KUBE_RUNTIME_CLASS, KUBE_NODE_SELECTOR,
// KUBE_TOLERATIONS, KUBE_READ_ONLY_ROOT, KUBE_RUN_AS_USER, KUBE_WORKDIR,
// KUBE_LIST_PAGE_SIZE, KUBE_QPS, KUBE_BURST (see Config). Every problem is
// reported, joined.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var errs []error
	num := func(name string) int64 {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive whole number", name, v))
			return 0
		}
		return n
	}
	c := Config{
		Kubeconfig:       getenv("KUBECONFIG"),
		Namespace:        strings.TrimSpace(getenv("KUBE_NAMESPACE")),
		Image:            strings.TrimSpace(getenv("KUBE_IMAGE")),
		Installation:     strings.TrimSpace(getenv("KUBE_INSTALLATION")),
		RuntimeClassName: strings.TrimSpace(getenv("KUBE_RUNTIME_CLASS")),
		WorkDir:          strings.TrimSpace(getenv("KUBE_WORKDIR")),
		Defaults: Resources{CPUMillis: num("KUBE_CPU_MILLIS"), MemoryMB: num("KUBE_MEMORY_MB"),
			EphemeralStorageMB: num("KUBE_EPHEMERAL_STORAGE_MB")},
		Maxima: Resources{CPUMillis: num("KUBE_MAX_CPU_MILLIS"), MemoryMB: num("KUBE_MAX_MEMORY_MB"),
			EphemeralStorageMB: num("KUBE_MAX_EPHEMERAL_STORAGE_MB")},
		RunAsUser: num("KUBE_RUN_AS_USER"),
		PageSize:  num("KUBE_LIST_PAGE_SIZE"),
		QPS:       float32(num("KUBE_QPS")),
		Burst:     int(num("KUBE_BURST")),
	}
	if c.Installation == "" {
		c.Installation = DefaultInstallation(getenv("DATABASE_URL"))
	}
	if v := strings.TrimSpace(getenv("KUBE_READ_ONLY_ROOT")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("KUBE_READ_ONLY_ROOT=%q is not true or false", v))
		}
		c.ReadOnlyRoot = b
	}
	sel, err := parseSelector(getenv("KUBE_NODE_SELECTOR"))
	if err != nil {
		errs = append(errs, err)
	}
	c.NodeSelector = sel
	if v := strings.TrimSpace(getenv("KUBE_TOLERATIONS")); v != "" {
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.Tolerations); err != nil {
			errs = append(errs, fmt.Errorf("KUBE_TOLERATIONS is not a JSON array of tolerations: %w", err))
		}
	}
	c = c.withDefaults()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.validate()
}

// parseSelector parses "key=value,key2=value2".
func parseSelector(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("KUBE_NODE_SELECTOR: %q is not key=value", pair)
		}
		out[k] = v
	}
	return out, nil
}
