package server

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/store/storetest"
)

// TestBuildFailureReleases: a start that fails after taking the API's port
// (here: PPROF_ADDR taken) returns the error and gives the port back.
func TestBuildFailureReleases(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	_ = free.Close()
	env := map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "PROVIDERS": "sim", "SIM_STATE_DIR": t.TempDir(),
		"LISTEN_ADDR": addr, "PPROF_ADDR": busy.Addr().String(),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = run(ctx, []string{"serve"}, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "PPROF_ADDR") {
		t.Fatalf("serve with PPROF_ADDR taken = %v, want an error naming it", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the API's port is still held after the failed start: %v", err)
	}
	_ = ln.Close()
}
