package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// LoopNeighbour plays another program on this machine that uses loop
// devices while a test runs, as a host's other tenants (a container
// runtime, a build, udev) do: until stopped, it attaches images of its
// own, probes every loop device the way udev's blkid does (open, read the
// first block, close) and detaches its own again. The local provider must
// release its workspaces' loop devices whatever else holds loop devices
// for a moment. It needs root and losetup; stop waits for it to end and
// leaves none of its devices attached.
func LoopNeighbour(t testing.TB) (stop func()) {
	t.Helper()
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Fatalf("the loop-device neighbour needs losetup (util-linux): %v", err)
	}
	dir := t.TempDir()
	var imgs []string
	for i := range 3 {
		img := filepath.Join(dir, fmt.Sprintf("neighbour-%d.img", i))
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 8<<20); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var devs []string
			for _, img := range imgs {
				//nolint:gosec // the test's own images
				if out, err := exec.Command("losetup", "-f", "--show", img).Output(); err == nil {
					devs = append(devs, strings.TrimSpace(string(out)))
				}
			}
			probeLoops()
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
			for _, dev := range devs {
				_ = exec.Command("losetup", "-d", dev).Run() //nolint:gosec // a device it attached
			}
			probeLoops()
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}

// probeLoops opens every loop device and reads its first block.
func probeLoops() {
	devs, _ := filepath.Glob("/dev/loop[0-9]*")
	buf := make([]byte, 4096)
	for _, dev := range devs {
		f, err := os.Open(dev) //nolint:gosec // device nodes
		if err != nil {
			continue
		}
		_, _ = f.Read(buf)
		_ = f.Close()
	}
}
