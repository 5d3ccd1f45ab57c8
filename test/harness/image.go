package harness

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ImageMarker is the content of /etc/image-marker in the images BuildImage
// makes.
const ImageMarker = "tether test image"

// BuildImage makes, in a folder the local provider's sandbox users can
// reach, a root file system for its images: the host's /bin/sh, the host
// programs tools (names on PATH) in /bin, the shared libraries they load
// (as ldd lists them, each at its own path), /etc/image-marker holding
// ImageMarker, an /etc/passwd and /etc/group of its own (a user
// "imageuser") and nothing else: no env, no setpriv, no sleep, no /usr,
// no /etc/os-release. It returns the folder.
func BuildImage(t testing.TB, tools ...string) string {
	t.Helper()
	root := filepath.Join(ReachableTempDir(t), "image")
	copyProgram(t, root, "/bin/sh", "/bin/sh")
	for _, tool := range tools {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		copyProgram(t, root, path, "/bin/"+tool)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"image-marker": ImageMarker + "\n",
		"passwd":       "root:x:0:0:root:/root:/bin/sh\nimageuser:x:1000:1000::/home/imageuser:/bin/sh\n",
		"group":        "root:x:0:\nimageuser:x:1000:\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// copyProgram copies the host program at host to inside (a path in the
// image at root), with the libraries ldd says it loads.
func copyProgram(t testing.TB, root, host, inside string) {
	t.Helper()
	copyFile(t, host, filepath.Join(root, inside))
	out, err := exec.Command("ldd", host).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", host, err)
	}
	for f := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(f, "/") {
			if _, err := os.Lstat(filepath.Join(root, f)); errors.Is(err, fs.ErrNotExist) {
				copyFile(t, f, filepath.Join(root, f))
			}
		}
	}
}

// copyFile copies the file at src (its symbolic links followed) to dst,
// mode 0755.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
