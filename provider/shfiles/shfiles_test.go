package shfiles

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/provider"
)

// run runs script with /bin/sh and args, stdin as its input; it returns
// the exit code and stdout.
func run(t *testing.T, script, stdin string, args ...string) (int, string) {
	t.Helper()
	return runEnv(t, []string{"PATH=/usr/bin:/bin"}, script, stdin, args...)
}

// runEnv is run with the environment env.
func runEnv(t *testing.T, env []string, script, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("running the script: %v", err)
	}
	return 0, string(out)
}

// TestScriptsExitCodes runs each script against real paths and checks the
// exit code it means for each.
func TestScriptsExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, script string
		args         []string
		want         int
		out          string
	}{
		{"read missing", ReadFilePortable, []string{filepath.Join(dir, "nope"), "10"}, ExitNotFound, ""},
		{"read folder", ReadFileNonblock, []string{dir, "10"}, ExitIsDirectory, ""},
		{"read too large", ReadFilePortable, []string{file, "4"}, ExitTooLarge, ""},
		{"read portable", ReadFilePortable, []string{file, "10"}, 0, "hello"},
		{"read nonblock", ReadFileNonblock, []string{file, "10"}, 0, "hello"},
		{"stage over folder", StageFileEmpty, []string{dir, dir + "/t"}, ExitIsDirectory, ""},
		{"stage under file", StageFileFromStdin, []string{file + "/x", dir + "/t"}, ExitInvalidPath, ""},
		{"archive of file", ReadArchive, []string{file}, ExitInvalidPath, ""},
		{"archive missing", ReadArchive, []string{dir + "/nope"}, ExitNotFound, ""},
		{"stage archive over file", StageArchiveEmpty, []string{file, dir + "/s"}, ExitInvalidPath, ""},
	} {
		if code, out := run(t, c.script, "", c.args...); code != c.want || out != c.out {
			t.Errorf("%s: exit %d, output %q; want %d, %q", c.name, code, out, c.want, c.out)
		}
	}

	tmp := filepath.Join(dir, "sub", "tmp")
	if code, _ := run(t, StageFileFromStdin, "body", filepath.Join(dir, "sub", "new"), tmp); code != 0 {
		t.Fatalf("staging a new file: exit %d", code)
	}
	if b, err := os.ReadFile(tmp); err != nil || string(b) != "body" {
		t.Fatalf("the staged file = %q, %v; want the body", b, err)
	}
	if code, _ := run(t, StageFileEmpty, "body", filepath.Join(dir, "sub", "new"), tmp); code != 0 {
		t.Fatalf("staging an empty file: exit %d", code)
	}
	if b, err := os.ReadFile(tmp); err != nil || len(b) != 0 {
		t.Fatalf("the empty staged file = %q, %v; want it empty", b, err)
	}
}

// TestCommitFile: the commit moves the staged file over a file, and
// refuses a folder in the target's place (ExitIsDirectory) rather than
// moving the file into it, with mv's -T and with an mv that lacks it.
func TestCommitFile(t *testing.T) {
	t.Parallel()
	shim := t.TempDir()
	// An mv that refuses -T, as an older busybox's does.
	noT := "#!/bin/sh\ncase $1 in -*T*) echo \"mv: invalid option -- 'T'\" >&2; exit 1;; esac\nexec /bin/mv \"$@\"\n"
	if err := os.WriteFile(filepath.Join(shim, "mv"), []byte(noT), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{{"mv -T", "/usr/bin:/bin"}, {"mv without -T", shim + ":/usr/bin:/bin"}} {
		dir := t.TempDir()
		tmp, target, folder := filepath.Join(dir, ".tmp-a"), filepath.Join(dir, "a"), filepath.Join(dir, "d")
		for _, f := range []string{tmp, target} {
			if err := os.WriteFile(f, []byte(f), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if code, _ := runEnv(t, []string{"PATH=" + c.path}, CommitFile, "", tmp, target); code != 0 {
			t.Errorf("%s: commit over a file: exit %d", c.name, code)
		}
		if b, err := os.ReadFile(target); err != nil || string(b) != tmp {
			t.Errorf("%s: the target holds %q, %v; want the staged file", c.name, b, err)
		}
		if err := os.WriteFile(tmp, []byte("staged"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(folder, 0o700); err != nil {
			t.Fatal(err)
		}
		if code, _ := runEnv(t, []string{"PATH=" + c.path}, CommitFile, "", tmp, folder); code != ExitIsDirectory {
			t.Errorf("%s: commit over a folder: exit %d; want %d", c.name, code, ExitIsDirectory)
		}
		if entries, _ := os.ReadDir(folder); len(entries) != 0 {
			t.Errorf("%s: the folder in the target's place holds %d entries after a refused commit; want none", c.name, len(entries))
		}
	}
}

func TestError(t *testing.T) {
	for _, c := range []struct {
		code   int
		stderr string
		want   provider.Code
		msg    string
	}{
		{ExitNotFound, "", provider.CodeFileNotFound, "no file at /w/f"},
		{ExitIsDirectory, "", provider.CodeIsDirectory, "/w/f is a directory"},
		{ExitDenied, "", provider.CodePermissionDenied, "may not access /w/f"},
		{ExitInvalidPath, "", provider.CodeInvalidPath, "not a regular file"},
		{ExitWriteFailed, "cat: write error: No space left on device", provider.CodePayloadTooLarge, "is full (note)"},
		{ExitWriteFailed, "sh: 1: cannot create /w/f: Disk quota exceeded", provider.CodePayloadTooLarge, "is full (note)"},
		{ExitWriteFailed, "sh: 1: cannot create /w/f: Read-only file system", provider.CodeInvalidRequest, "cannot access /w/f: Read-only file system"},
		{ExitWriteFailed, "sh: 1: cannot create /w/d/.tether-upload-x-f: Not a directory", provider.CodeInvalidPath, "not a folder"},
		{ExitWriteFailed, "cp: cannot overwrite non-directory '/w/./x' with directory '/w/.s/./x'", provider.CodeInvalidPath, "not a folder"},
		{ExitWriteFailed, "cp: cannot overwrite directory '/w/./x' with non-directory", provider.CodeIsDirectory, "is a directory"},
		{ExitWriteFailed, "cp: '/w/x' is a directory", provider.CodeIsDirectory, "is a directory"},
		{1, "mv: cannot move '/w/.t' to '/w/f': Read-only file system", provider.CodeInvalidRequest, "Read-only file system"},
	} {
		err := Error(c.code, "/w/f", c.stderr, " (note)")
		if provider.ErrorCode(err) != c.want || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Error(%d, %q) = %v (%s); want %s with %q", c.code, c.stderr, err, provider.ErrorCode(err), c.want, c.msg)
		}
	}
	if got := ShellError("  "); got != "failed" {
		t.Errorf("ShellError of nothing = %q; want failed", got)
	}
}

func TestCheckPath(t *testing.T) {
	if got, err := CheckPath("/workspace/a/../b/"); err != nil || got != "/workspace/b" {
		t.Errorf("CheckPath = %q, %v; want /workspace/b", got, err)
	}
	for _, bad := range []string{"", "rel/x", "/a\x00b"} {
		if _, err := CheckPath(bad); provider.ErrorCode(err) != provider.CodeInvalidPath {
			t.Errorf("CheckPath(%q) = %v; want %s", bad, err, provider.CodeInvalidPath)
		}
	}
}
