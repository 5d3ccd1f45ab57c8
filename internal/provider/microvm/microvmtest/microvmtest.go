// Package microvmtest gives tests a built guest image and a microvm
// provider over it.
package microvmtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tetherhq/tether/internal/provider/microvm"
)

var (
	once     sync.Once
	imageDir string
	buildErr string
)

// ImageDir builds the guest image with scripts/microvm.sh (once per test
// process; the script keeps what it can between runs, in .data/microvm
// at the repository's root) and returns its folder. It fails the test
// when the image cannot be built: make test installs what the build
// needs (scripts/deps.sh).
func ImageDir(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
		dir := filepath.Join(root, ".data", "microvm")
		cmd := exec.Command("bash", "scripts/microvm.sh", dir) //nolint:noctx // bounded by the test's own timeout
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = err.Error() + ": " + out.String()
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		imageDir = lines[len(lines)-1]
	})
	if buildErr != "" {
		t.Fatalf("building the guest image (scripts/microvm.sh): %s", buildErr)
	}
	return imageDir
}

// New returns a provider over state with the test image, failing the test
// if it is unavailable.
func New(t testing.TB, state string) *microvm.Provider {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the microvm tests need root (to build the guest image); make test runs as root")
	}
	p, err := microvm.New(microvm.Config{StateDir: state, ImageDir: ImageDir(t), Accel: os.Getenv("MICROVM_ACCEL")})
	if err != nil {
		t.Fatal(err)
	}
	if info := p.Info(t.Context()); !info.Available {
		t.Fatalf("microvm provider unavailable: %s", info.Reason)
	}
	return p
}
