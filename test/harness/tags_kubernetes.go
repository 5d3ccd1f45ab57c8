//go:build kubernetes

package harness

// buildTags: see tags.go.
const buildTags = "kubernetes"
