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
	for _, want := range []string{"create throughput", "full lifecycles", "request → ready p99", "GET /v1/sandboxes/{id}", "janitor reconcile",
		"claims from sim pools", "TTI sim from a pool"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The local provider's rows, or why they were skipped on this host.
	if !strings.Contains(stdout.String(), "local exec `true` round trip") && !strings.Contains(stdout.String(), "Local provider phases skipped") {
		t.Error("the report has neither the local provider's rows nor why they were skipped")
	}
	// The kubernetes provider's rows (when KUBECONFIG is set, as in make
	// test), or why they were skipped.
	if !strings.Contains(stdout.String(), "kubernetes exec `printf ok` round trip") && !strings.Contains(stdout.String(), "Kubernetes provider phases skipped") {
		t.Error("the report has neither the kubernetes provider's rows nor why they were skipped")
	}
}

// TestOnlyOption: -only names the kubernetes phase, which needs a
// kubeconfig, the pools' or the local provider's; anything else is
// refused.
func TestOnlyOption(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	for args, want := range map[string]string{
		"-only kubernetes":                      "need -kubeconfig",
		"-only local":                           "",
		"-only sim":                             `-only "sim"`,
		"-kubernetes":                           "need -kubeconfig",
		"-only kubernetes -kubeconfig /some/kc": "",
		"-only pools":                           "",
		"-quick":                                "",
	} {
		o, err := parseOptions(strings.Fields(args), io.Discard)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", args, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one saying %q", args, err, want)
		case want == "" && o.kube != strings.Contains(args, "kubernetes"):
			t.Errorf("%s: kube = %v", args, o.kube)
		}
	}
}
