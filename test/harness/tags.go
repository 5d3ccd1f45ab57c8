//go:build !kubernetes

package harness

// buildTags are the build tags Build compiles Tether with: those of the
// tests, so that `go test -tags kubernetes` tests a Tether that has the
// kubernetes provider.
const buildTags = ""
