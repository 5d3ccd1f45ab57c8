// Package scripts_test tests the scripts `make run` and `make test` use,
// through make itself where the order of their steps matters.
package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost is a copy of the repository's Makefile and scripts in a folder
// of its own, with a PATH of every command of this machine but bwrap, id
// and go: id answers uid, scripts/deps.sh "installs" bubblewrap (a bwrap
// that does nothing) when install is set, and go builds a bin/tether that
// prints the PROVIDERS and build tags it was started with.
type fakeHost struct {
	dir, bin string
}

func newFakeHost(t *testing.T, uid string, install bool) *fakeHost {
	t.Helper()
	h := &fakeHost{dir: t.TempDir(), bin: t.TempDir()}
	for _, f := range []string{"Makefile", "scripts/run.sh", "scripts/postgres.sh"} {
		data, err := os.ReadFile(filepath.Join("..", f))
		if os.IsNotExist(err) {
			continue // an older tree, without run.sh
		}
		if err != nil {
			t.Fatal(err)
		}
		h.write(t, filepath.Join(h.dir, f), string(data))
	}
	deps := "#!/bin/sh\n"
	if install {
		deps += "printf '#!/bin/sh\\n' > " + filepath.Join(h.bin, "bwrap") + "; chmod +x " + filepath.Join(h.bin, "bwrap") + "\n"
	}
	h.write(t, filepath.Join(h.dir, "scripts/deps.sh"), deps)
	h.write(t, filepath.Join(h.bin, "id"), "#!/bin/sh\necho "+uid+"\n")
	// go list prints two packages; go build [-tags=T] [-v] -o BIN ./cmd/api
	// writes a BIN that prints what it runs with.
	h.write(t, filepath.Join(h.bin, "go"), `#!/bin/bash
[ "$1" = list ] && { echo runtime; echo example.com/cmd/api; exit 0; }
tags= out=
while [ $# -gt 0 ]; do
	case $1 in -tags=*) tags=${1#-tags=} ;; -o) out=$2; shift ;; esac
	shift
done
echo example.com/cmd/api >&2
mkdir -p "$(dirname "$out")"
printf '#!/bin/sh\necho "serving PROVIDERS=$PROVIDERS tags=%s"\n' "$tags" > "$out"
chmod +x "$out"
`)
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			switch name := e.Name(); name {
			case "bwrap", "id", "go":
			default:
				_ = os.Symlink(filepath.Join(d, name), filepath.Join(h.bin, name)) // the first of PATH wins
			}
		}
	}
	return h
}

func (h *fakeHost) write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}
}

// makeRun runs `make run` there and returns its output.
func (h *fakeHost) makeRun(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command("make", "run")
	cmd.Dir = h.dir
	cmd.Env = append([]string{"PATH=" + h.bin, "HOME=" + h.dir, "DATABASE_URL=postgres://tether@127.0.0.1:1/tether"}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	return string(out)
}

// TestMakeRunChoosesProvidersAfterDeps: on a fresh root machine, where
// scripts/deps.sh installs bubblewrap, `make run` makes local the default
// provider; sim where bubblewrap is not there after deps or the user is
// not root. PROVIDERS, when set, is kept, and kubernetes in it builds
// Tether with the build tag kubernetes (nomsgpack is always set).
func TestMakeRunChoosesProvidersAfterDeps(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	for _, c := range []struct {
		name, uid string
		install   bool
		env       []string
		want      string
	}{
		{"root, bubblewrap installed by deps", "0", true, nil, "serving PROVIDERS=local,sim tags=nomsgpack\n"},
		{"root, no bubblewrap", "0", false, nil, "serving PROVIDERS=sim,local tags=nomsgpack\n"},
		{"not root", "1000", true, nil, "serving PROVIDERS=sim,local tags=nomsgpack\n"},
		{"PROVIDERS set", "0", true, []string{"PROVIDERS=sim"}, "serving PROVIDERS=sim tags=nomsgpack\n"},
		{"PROVIDERS names kubernetes", "0", true, []string{"PROVIDERS=kubernetes,sim"}, "serving PROVIDERS=kubernetes,sim tags=kubernetes,nomsgpack\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := newFakeHost(t, c.uid, c.install).makeRun(t, c.env...)
			if !strings.HasSuffix(out, c.want) {
				t.Errorf("make run ended with\n%s\nwant %q", out, c.want)
			}
			provs := strings.TrimSuffix(strings.TrimPrefix(strings.Fields(c.want)[1], "PROVIDERS="), "\n")
			if !strings.Contains(out, "providers: "+provs+", the first is the default") {
				t.Errorf("make run does not say it runs %s:\n%s", provs, out)
			}
		})
	}
}

// TestBuildProgress: what `go build -v` prints is shown as packages counted
// against the build's, and anything else (an error) passed on as is.
func TestBuildProgress(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("bash", "-c", `source scripts/run.sh && printf 'internal/abi\ngithub.com/gin-gonic/gin\n# example.com/x\nx.go:1:1: syntax error\n' | progress 500`)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("progress: %v\n%s", err, stderr.String())
	}
	want := "  compiling 1/500 internal/abi\n# example.com/x\nx.go:1:1: syntax error\n  compiled 2 packages\n"
	if got := stderr.String(); got != want {
		t.Errorf("progress printed\n%q\nwant\n%q", got, want)
	}
}
