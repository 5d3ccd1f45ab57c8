package local_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/internal/provider/local"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/test/harness"
)

// imageMarker is the content of /etc/image-marker in the test images.
const imageMarker = harness.ImageMarker

// fileTools are the programs the files routes run inside a sandbox.
var fileTools = []string{"cat", "dirname", "mkdir", "mv", "rm", "stat", "dd", "head"}

// tarEntry is one entry of a tarball a test writes by hand.
type tarEntry struct {
	hdr  tar.Header
	body string
}

// packImage writes the folder root as a gzipped tarball at dst (members
// named ./..., as `tar -C root -czf dst .` does, owned by uid 1000), then
// the extra entries.
func packImage(t *testing.T, root, dst string, extra ...tarEntry) {
	t.Helper()
	var entries []tarEntry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		e := tarEntry{hdr: tar.Header{Name: "./" + rel, Mode: int64(info.Mode().Perm()), Uid: 1000, Gid: 1000, ModTime: info.ModTime()}}
		switch {
		case d.IsDir():
			e.hdr.Typeflag, e.hdr.Name = tar.TypeDir, strings.TrimSuffix(e.hdr.Name, "/")+"/"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.hdr.Typeflag, e.hdr.Size, e.body = tar.TypeReg, int64(len(b)), string(b)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	writeTarball(t, dst, append(entries, extra...))
}

// writeTarball writes entries as a gzipped tarball at dst.
func writeTarball(t *testing.T, dst string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cacheDir is where a provider over state unpacks the tarball image name.
func cacheDir(t *testing.T, state, name, tarball string) string {
	t.Helper()
	b, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return filepath.Join(state, "images", name+"-"+hex.EncodeToString(sum[:]))
}

// imageParams are create params naming an image.
func imageParams(name string) json.RawMessage {
	return json.RawMessage(`{"image":` + strconv.Quote(name) + `}`)
}

// TestImageSandbox: a sandbox created with params.image, from a folder or
// from a tarball, has that image as its root, read-only, and nothing of
// the host's (not python3, not /etc/os-release); it runs as its own uid,
// under no_new_privs and the seccomp filter, with its own /workspace,
// /etc/passwd and environment; files move in and out; a restarted Tether
// (even one that no longer registers the image) still runs commands in
// it. A sandbox without params.image is as before.
func TestImageSandbox(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"/usr/bin/python3", "/etc/os-release"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the host has no %s, which the test checks a sandbox does not see: %v", f, err)
		}
	}
	folder := harness.BuildImage(t, fileTools...)
	tarball := filepath.Join(harness.ReachableTempDir(t), "tiny.tar.gz")
	packImage(t, harness.BuildImage(t), tarball) // /bin/sh alone
	images := []local.Image{{Name: "files", Path: folder}, {Name: "tiny.v1", Path: tarball}}
	dir := harness.ReachableTempDir(t)
	p, err := local.New(dir, local.WithImages(images...))
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info(t.Context())
	if !info.Available {
		t.Fatalf("local provider unavailable: %s", info.Reason)
	}
	wantImages := []provider.Image{{Name: "files", Source: "folder"}, {Name: "tiny.v1", Source: "tarball"}}
	if !reflect.DeepEqual(info.Images, wantImages) {
		t.Errorf("Info.Images = %+v, want %+v", info.Images, wantImages)
	}
	if notes := strings.Join(info.Notes, "\n"); !strings.Contains(notes, "images (params.image): files, tiny.v1") {
		t.Errorf("the notes do not list the images:\n%s", notes)
	}

	// Status lines read with the shell alone: the image has no grep.
	status := func(file string, keys ...string) string {
		return `while read -r k v _; do case $k in ` + strings.Join(keys, "|") + `) echo "$k$v";; esac; done <` + file
	}
	for _, name := range []string{"files", "tiny.v1"} {
		t.Run(name, func(t *testing.T) {
			id := create(t, p, provider.CreateSpec{Params: imageParams(name), Env: map[string]string{"GREETING": "hi"}}).SandboxID
			own := strings.TrimPrefix(strings.TrimSpace(run(t, p, id, status("/proc/self/status", "Uid:")).Output), "Uid:")
			if n, err := strconv.Atoi(own); err != nil || n < local.DefaultUIDBase {
				t.Fatalf("the sandbox runs as %q, want its own uid", own)
			}
			for _, tc := range []struct{ command, want string }{
				{`read -r m </etc/image-marker; echo "$m"`, imageMarker + "\n"},
				// Nothing of the host's root: neither its programs nor its /etc.
				{`for f in /usr /usr/bin/python3 /etc/os-release /etc/ld.so.cache /etc/nsswitch.conf /home /var /work; do [ -e $f ] && echo $f; done; echo done`, "done\n"},
				// Its own users, written over the image's.
				{`while IFS= read -r l; do echo "$l"; done </etc/passwd`, "root:x:0:0:root:/root:/bin/sh\nsandbox:x:" + own + ":" + own + ":sandbox:/workspace:/bin/sh\n"},
				{`while IFS= read -r l; do echo "$l"; done </etc/group`, "root:x:0:\nsandbox:x:" + own + ":\n"},
				{status("/proc/self/status", "Uid:", "Gid:", "CapEff:"), "Uid:" + own + "\nGid:" + own + "\nCapEff:0000000000000000\n"},
				// no_new_privs and the seccomp filter, on the command and on the init.
				{status("/proc/self/status", "NoNewPrivs:", "Seccomp:"), "NoNewPrivs:1\nSeccomp:2\n"},
				{status("/proc/1/status", "Seccomp:"), "Seccomp:2\n"},
				// Only the sandbox's environment.
				{`echo "$GREETING $HOME $PATH"`, "hi /workspace " + "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"},
				// /workspace and /tmp are its own and writable; the image is not.
				{`pwd; echo data >/workspace/f; read -r x </workspace/f; echo "$x"; echo t >/tmp/t && echo tmp`, "/workspace\ndata\ntmp\n"},
				{`for f in /etc/image-marker /etc/new /bin/new /new; do { echo x >$f; } 2>/dev/null && echo "$f writable"; done; echo done`, "done\n"},
			} {
				if got := run(t, p, id, tc.command); got.Output != tc.want || got.ExitCode != 0 {
					t.Errorf("%s: got %q (exit %d), want %q", tc.command, got.Output, got.ExitCode, tc.want)
				}
			}
			if name == "files" {
				if err := p.WriteFile(t.Context(), id, "/workspace/up/load.txt", strings.NewReader("uploaded"), 1<<20); err != nil {
					t.Fatalf("WriteFile: %v", err)
				}
				for file, want := range map[string]string{"/workspace/up/load.txt": "uploaded", "/etc/image-marker": imageMarker + "\n"} {
					var buf bytes.Buffer
					if err := p.ReadFile(t.Context(), id, file, &buf, 1<<20); err != nil || buf.String() != want {
						t.Errorf("ReadFile(%s) = %q, %v; want %q", file, buf.String(), err, want)
					}
				}
			}
			if name == "tiny.v1" {
				// A background writer outlives its exec: without cat, the
				// drain that takes its output is the shell's read.
				run(t, p, id, `(i=0; while [ $i -lt 40000 ]; do echo "line $i"; i=$((i+1)); done; echo done >/workspace/bg) &`)
				for deadline := time.Now().Add(20 * time.Second); run(t, p, id, `[ -e /workspace/bg ] && echo yes`).Output != "yes\n"; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the background writer never finished: its output was not drained")
					}
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, id, "meta.json"))
			if err != nil || !strings.Contains(string(b), `"image":"`+name+`"`) {
				t.Errorf("meta.json = %s, %v; want the image recorded", b, err)
			}
			// A restarted Tether enters the same root, registered or not.
			for _, again := range []*local.Provider{restarted(t, dir, images...), restarted(t, dir)} {
				if r := run(t, again, id, `read -r m </etc/image-marker; echo "$m"; [ -e /etc/os-release ] || echo no-host`); r.Output != imageMarker+"\nno-host\n" {
					t.Errorf("exec after a restart = %+v", r)
				}
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(folder, "etc", "image-marker"))
	if err != nil || string(b) != imageMarker+"\n" {
		t.Errorf("the image's marker on the host is now %q, %v", b, err)
	}

	// Without params.image: the host's system folders, as before.
	id := create(t, p, provider.CreateSpec{}).SandboxID
	if r := run(t, p, id, `python3 -c 'print(6*7)'; grep -c . /etc/os-release >/dev/null && echo os-release; [ -e /etc/image-marker ] || echo no-marker`); r.Output != "42\nos-release\nno-marker\n" {
		t.Errorf("a sandbox without params.image: %+v", r)
	}
}

// restarted is a new provider over the state folder dir, as after a
// Tether restart.
func restarted(t *testing.T, dir string, images ...local.Image) *local.Provider {
	t.Helper()
	p, err := local.New(dir, local.WithImages(images...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageParams: params.image must name a registered image; anything
// else is INVALID_REQUEST naming the known ones, at validation and at
// create, and the create makes nothing.
func TestImageParams(t *testing.T) {
	t.Parallel()
	dir := harness.ReachableTempDir(t)
	p, err := local.New(dir, local.WithImages(local.Image{Name: "tiny", Path: harness.BuildImage(t)}))
	if err != nil {
		t.Fatal(err)
	}
	bare, _ := newProvider(t)
	for _, tc := range []struct {
		p      *local.Provider
		params string
		want   string
	}{
		{p, `{"image":"bookworm"}`, `params.image "bookworm" is not an image of this server (known: tiny)`},
		{p, `{"image":"TINY"}`, `(known: tiny)`},
		{bare, `{"image":"tiny"}`, `params.image "tiny" is not an image of this server (none are registered on this server)`},
		{p, `{"image":7}`, "not a valid JSON object"},
	} {
		err := tc.p.ValidateParams([]byte(tc.params))
		if provider.ErrorCode(err) != provider.CodeInvalidRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateParams(%s) = %v, want INVALID_REQUEST saying %q", tc.params, err, tc.want)
		}
	}
	id := provider.NewSandboxID()
	if _, err := p.Create(t.Context(), provider.CreateSpec{SandboxID: id, Params: imageParams("bookworm")}); provider.ErrorCode(err) != provider.CodeInvalidRequest {
		t.Errorf("Create with an unknown image = %v, want INVALID_REQUEST", err)
	}
	if _, err := os.Stat(filepath.Join(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused create left %s behind: %v", id, err)
	}
	if inv, err := p.List(t.Context()); err != nil || len(inv) != 0 {
		t.Errorf("List = %+v, %v; want nothing", inv, err)
	}
	if err := p.ValidateParams(imageParams("tiny")); err != nil {
		t.Errorf("ValidateParams(tiny) = %v", err)
	}
}

// TestImageRegistration: images New cannot use are errors, each named:
// a bad name, a relative or missing path, a file that is no tarball, a
// folder the sandbox users cannot reach, an image without /bin/sh.
func TestImageRegistration(t *testing.T) {
	t.Parallel()
	empty := harness.ReachableTempDir(t)
	locked := filepath.Join(harness.ReachableTempDir(t), "locked")
	closed := filepath.Join(locked, "closed")
	if err := os.MkdirAll(closed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := local.New(harness.ReachableTempDir(t), local.WithImages(
		local.Image{Name: "Bad", Path: empty},
		local.Image{Name: "rel", Path: "images/x"},
		local.Image{Name: "gone", Path: "/nonexistent/tether-image"},
		local.Image{Name: "closed", Path: closed},
		local.Image{Name: "empty", Path: empty},
	))
	if err == nil {
		t.Fatal("New accepted unusable images")
	}
	for _, want := range []string{`image name "Bad"`, `image "rel": path "images/x" must be absolute`, `image "gone"`,
		`image "closed": ` + closed + ` is not reachable by the sandbox users: ` + locked + ` needs o+x`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error does not say %q:\n%v", want, err)
		}
	}
	// The probe, which runs once the paths are right.
	_, err = local.New(harness.ReachableTempDir(t), local.WithImages(local.Image{Name: "empty", Path: empty}))
	if err == nil || !strings.Contains(err.Error(), `image "empty": a sandbox of it does not start`) {
		t.Errorf("New with an image without /bin/sh = %v", err)
	}
}

// TestImageTarballUnpackedOnce: a tarball is unpacked into the cache once:
// a new provider over the same state folder (Tether restarted) uses it as
// it is; a changed tarball gets a cache of its own. What is unpacked is
// root's, with no setuid, setgid or group and other write bits.
func TestImageTarballUnpackedOnce(t *testing.T) {
	t.Parallel()
	tarball := filepath.Join(harness.ReachableTempDir(t), "tiny.tgz")
	plain := harness.BuildImage(t)
	packImage(t, plain, tarball,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./bin/suid", Mode: 0o6777, Uid: 1000}, body: "#!/bin/sh\n"},
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "./var/tmp/", Mode: 0o1777}})
	dir := harness.ReachableTempDir(t)
	img := local.Image{Name: "tiny", Path: tarball}
	restarted(t, dir, img)
	cache := cacheDir(t, dir, "tiny", tarball)
	before, err := os.Stat(cache)
	if err != nil {
		t.Fatalf("no cache at %s: %v", cache, err)
	}
	err = filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Uid != 0 || st.Gid != 0 || info.Mode()&(0o022|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("%s: owner %d:%d, mode %s; want root's, not writable by others, no setuid", p, st.Uid, st.Gid, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(cache, "bin", "suid")); err != nil || info.Mode() != 0o755 {
		t.Errorf("bin/suid: %v, %v; want mode 0755", info, err)
	}
	// A file only a reuse keeps.
	sentinel := filepath.Join(cache, "sentinel")
	if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	again := restarted(t, dir, img)
	after, err := os.Stat(cache)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the cache was made again: %v", err)
	}
	if _, err := os.Stat(sentinel); err != nil {
		t.Errorf("the cache was unpacked again: %v", err)
	}
	id := create(t, again, provider.CreateSpec{Params: imageParams("tiny")}).SandboxID
	if r := run(t, again, id, `[ -e /sentinel ] && echo cached`); r.Output != "cached\n" {
		t.Errorf("the sandbox does not see the cache: %+v", r)
	}

	// A changed tarball: a new cache beside the old one.
	packImage(t, plain, tarball, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./etc/version"}, body: "2\n"})
	restarted(t, dir, img)
	if _, err := os.Stat(filepath.Join(cacheDir(t, dir, "tiny", tarball), "etc", "version")); err != nil {
		t.Errorf("the changed tarball was not unpacked: %v", err)
	}
	if caches, _ := filepath.Glob(filepath.Join(dir, "images", "tiny-*")); len(caches) != 2 {
		t.Errorf("caches = %v, want the old and the new", caches)
	}
}

// TestImageMaliciousTarball: entries that would land outside the cache
// (through "..", a symbolic link, a hard link) make the tarball refused,
// leaving nothing behind; absolute names are taken as inside the image;
// device nodes and FIFOs are skipped; a file over a symbolic link replaces
// the link, never its target. Nothing lands outside the cache.
func TestImageMaliciousTarball(t *testing.T) {
	t.Parallel()
	plain := harness.BuildImage(t)
	cases := []struct {
		name    string
		entries func(outside string) []tarEntry
		refused string // what New's error says; "" if the tarball is taken
		check   func(t *testing.T, cache, outside string)
	}{
		{
			name: "dotdot",
			entries: func(string) []tarEntry {
				return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./etc/../../escaped"}, body: "x"}}
			},
			refused: `entry "./etc/../../escaped": leads out of the image's root`,
		},
		{
			name: "symlink out, then a file through it",
			entries: func(outside string) []tarEntry {
				return []tarEntry{
					{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./evil", Linkname: outside}},
					{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./evil/planted"}, body: "x"},
				}
			},
			refused: `entry "./evil/planted"`,
		},
		{
			name: "relative symlink out, then a file through it",
			entries: func(outside string) []tarEntry {
				return []tarEntry{
					{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./up", Linkname: strings.Repeat("../", 20)}},
					{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./up" + outside + "/planted"}, body: "x"},
				}
			},
			refused: `entry "./up`,
		},
		{
			name: "hard link out",
			entries: func(outside string) []tarEntry {
				return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "./victim", Linkname: "../../../../../../../../" + outside + "/victim.txt"}}}
			},
			refused: `hard link to`,
		},
		{
			name: "absolute names",
			entries: func(outside string) []tarEntry {
				return []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: outside + "/abs.txt"}, body: "x"}}
			},
			check: func(t *testing.T, cache, outside string) {
				if b, err := os.ReadFile(filepath.Join(cache, outside, "abs.txt")); err != nil || string(b) != "x" {
					t.Errorf("the absolute entry is not inside the image: %q, %v", b, err)
				}
			},
		},
		{
			name: "device nodes and a FIFO",
			entries: func(string) []tarEntry {
				return []tarEntry{
					{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Devmajor: 1, Devminor: 3, Mode: 0o666}},
					{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "./disk", Devmajor: 8, Devminor: 0, Mode: 0o666}},
					{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "./fifo", Mode: 0o666}},
				}
			},
			check: func(t *testing.T, cache, _ string) {
				for _, f := range []string{"dev/null", "disk", "fifo"} {
					if _, err := os.Lstat(filepath.Join(cache, f)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s was unpacked: %v", f, err)
					}
				}
			},
		},
		{
			name: "a file over a symbolic link",
			entries: func(outside string) []tarEntry {
				return []tarEntry{
					{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./etc/motd", Linkname: outside + "/victim.txt"}},
					{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./etc/motd"}, body: "overwritten"},
				}
			},
			check: func(t *testing.T, cache, _ string) {
				if b, err := os.ReadFile(filepath.Join(cache, "etc", "motd")); err != nil || string(b) != "overwritten" {
					t.Errorf("etc/motd = %q, %v; want the file", b, err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outside := t.TempDir()
			victim := filepath.Join(outside, "victim.txt")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			tarball := filepath.Join(harness.ReachableTempDir(t), "evil.tar.gz")
			packImage(t, plain, tarball, tc.entries(outside)...)
			dir := harness.ReachableTempDir(t)
			_, err := local.New(dir, local.WithImages(local.Image{Name: "evil", Path: tarball}))
			cache := cacheDir(t, dir, "evil", tarball)
			wantCache := []string{".lock", filepath.Base(cache)}
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("New = %v, want refused saying %q", err, tc.refused)
				}
				wantCache = wantCache[:1]
			} else if err != nil {
				t.Fatalf("New = %v", err)
			}
			// Nothing outside the cache: not beside it, not in the target.
			var got []string
			entries, _ := os.ReadDir(filepath.Join(dir, "images"))
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, wantCache) {
				t.Errorf("images/ holds %v, want %v", got, wantCache)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Errorf("the folder outside holds %d entries, want only victim.txt", len(entries))
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "original" {
				t.Errorf("victim.txt = %q, %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "escaped")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a file escaped into the state folder: %v", err)
			}
			if tc.check != nil && err == nil {
				tc.check(t, cache, outside)
			}
		})
	}
}
