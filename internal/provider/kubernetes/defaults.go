package kubernetes

// Name is the provider's name.
const Name = "kubernetes"

// Resources are a sandbox's CPU, memory and ephemeral storage.
type Resources struct {
	CPUMillis          int64
	MemoryMB           int64
	EphemeralStorageMB int64
}

// Defaults of the configuration.
const (
	DefaultNamespace = "tether"
	// DefaultImage has /bin/sh and every tool the provider runs.
	DefaultImage   = "docker.io/library/busybox:1.37"
	DefaultWorkDir = "/workspace"
	DefaultUser    = 1000
)

// Default resources, and their maxima.
var (
	DefaultResources = Resources{CPUMillis: 1000, MemoryMB: 512, EphemeralStorageMB: 1024}
	DefaultMaxima    = Resources{CPUMillis: 4000, MemoryMB: 8192, EphemeralStorageMB: 10240}
)

// The client's defaults: pods per List request, and its rate to the API
// server.
const (
	DefaultPageSize = 500
	DefaultQPS      = 50
	DefaultBurst    = 100
)
