package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestSmoke runs the whole benchmark in its quick mode against the test
// Postgres, so that `make bench` never rots. It judges no timing.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark smoke run skipped in -short mode")
	}
	out := t.TempDir()
	var stdout strings.Builder
	if err := run(t.Context(), []string{"-quick", "-out", out, "-database-url", storetest.ServerURL(), "-admin-url", storetest.AdminURL()}, &stdout, io.Discard); err != nil {
		t.Fatalf("bench -quick: %v", err)
	}
	for _, name := range []string{"results.md", "results.json", "latency.svg"} {
		if info, err := os.Stat(filepath.Join(out, name)); err != nil || info.Size() == 0 {
			t.Errorf("%s missing or empty (%v)", name, err)
		}
	}
	for _, want := range []string{"create throughput", "full lifecycles", "request → ready p99", "GET /v1/sandboxes/{id}", "janitor reconcile"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The local provider's rows, or why they were skipped on this host.
	if !strings.Contains(stdout.String(), "local exec `true` round trip") && !strings.Contains(stdout.String(), "Local provider phases skipped") {
		t.Error("the report has neither the local provider's rows nor why they were skipped")
	}
}
