package image

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// sparseTarball makes a gzipped tarball (GNU tar's --sparse) of one file
// of size bytes that is all hole but a few bytes, and returns its path and
// SHA-256.
func sparseTarball(t *testing.T, size string) (string, string) {
	t.Helper()
	src := t.TempDir()
	big := filepath.Join(src, "big")
	if err := os.WriteFile(big, []byte("head"), 0o644); err != nil {
		t.Fatal(err)
	}
	//nolint:noctx // ends at once
	if out, err := exec.Command("truncate", "-s", size, big).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	tarball := filepath.Join(t.TempDir(), "img.tar.gz")
	//nolint:noctx // ends at once
	if out, err := exec.Command("tar", "--sparse", "-czf", tarball, "-C", src, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	b, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	t.Logf("a tarball of %d bytes holds a sparse file of %s", len(b), size)
	return tarball, hex.EncodeToString(sum[:])
}

// TestImageSparseEntry: a small tarball whose sparse entry is GiBs of holes
// unpacks to holes, not GiBs of zeros on the host's disk, and one whose
// files hold more than the limit (three quarters of the free space) is
// refused.
func TestImageSparseEntry(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no GNU tar to make a sparse tarball with")
	}
	tarball, sum := sparseTarball(t, "256M")
	dst := t.TempDir()
	if err := extractTarball(tarball, dst, sum, 1<<30); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dst, "big"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := info.Sys().(*syscall.Stat_t)
	if info.Size() != 256<<20 || st == nil || st.Blocks*512 > 1<<20 {
		t.Errorf("unpacked: %d bytes, %d on disk; want 256 MiB of which almost nothing is on disk", info.Size(), st.Blocks*512)
	}
	b := make([]byte, 8)
	if f, err := os.Open(filepath.Join(dst, "big")); err == nil {
		_, _ = f.Read(b)
		_ = f.Close()
	}
	if !strings.HasPrefix(string(b), "head") {
		t.Errorf("the file's data: %q", b)
	}
	err = extractTarball(tarball, t.TempDir(), sum, 128<<20)
	if err == nil || !strings.Contains(err.Error(), "more than 128 MiB") {
		t.Errorf("a 256 MiB entry past a 128 MiB limit: %v; want it refused", err)
	}
}
