package providertest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/provider"
)

// binary is content with every byte value, and more than one read's worth.
func binary(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/256)
	}
	return b
}

func (s *suite) filesSandbox(t *testing.T) (provider.Provider, provider.Files, provider.Resource) {
	t.Helper()
	p, _ := s.open(t)
	f := capability[provider.Files](t, p, "Files")
	res := s.create(t, p, provider.CreateSpec{})
	if res.WorkDir == "" {
		t.Fatal("a provider with files reports no working directory in its resource")
	}
	return p, f, res
}

func (s *suite) read(t *testing.T, f provider.Files, id, file string, limit int64) ([]byte, error) {
	t.Helper()
	var w bytes.Buffer
	err := f.ReadFile(s.ctx(t), id, file, &w, limit)
	return w.Bytes(), err
}

func (s *suite) testFiles(t *testing.T) {
	skipWithout[provider.Files](t, s, "Files")
	t.Parallel()
	t.Run("RoundTrip", s.testFilesRoundTrip)
	t.Run("Errors", s.testFilesErrors)
	t.Run("Limits", s.testFilesLimits)
	t.Run("UnknownSandbox", s.testFilesUnknown)
	t.Run("Race", s.testFilesRace)
}

func (s *suite) testFilesRoundTrip(t *testing.T) {
	t.Parallel()
	_, f, res := s.filesSandbox(t)
	file := path.Join(res.WorkDir, "providertest", "nested", "data.bin")
	want := binary(300_000)
	if err := f.WriteFile(s.ctx(t), res.SandboxID, file, bytes.NewReader(want), int64(len(want))); err != nil {
		t.Fatalf("WriteFile of exactly the limit, into folders that do not exist yet: %v", err)
	}
	got, err := s.read(t, f, res.SandboxID, file, int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile = %d bytes (equal %v), %v; want the %d bytes written", len(got), bytes.Equal(got, want), err, len(want))
	}
	if err := f.WriteFile(s.ctx(t), res.SandboxID, file, strings.NewReader("short"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if got, err := s.read(t, f, res.SandboxID, file, 1<<20); err != nil || string(got) != "short" {
		t.Errorf("ReadFile after an overwrite = %q, %v; want exactly the new content", got, err)
	}
	empty := path.Join(res.WorkDir, "empty")
	if err := f.WriteFile(s.ctx(t), res.SandboxID, empty, strings.NewReader(""), 1<<20); err != nil {
		t.Fatal(err)
	}
	if got, err := s.read(t, f, res.SandboxID, empty, 1<<20); err != nil || len(got) != 0 {
		t.Errorf("ReadFile of an empty file = %q, %v", got, err)
	}
}

func (s *suite) testFilesErrors(t *testing.T) {
	t.Parallel()
	_, f, res := s.filesSandbox(t)
	_, err := s.read(t, f, res.SandboxID, path.Join(res.WorkDir, "missing"), 1<<20)
	wantCode(t, "ReadFile of a missing file", err, provider.CodeFileNotFound)
	folder := path.Join(res.WorkDir, "folder")
	if err := f.WriteFile(s.ctx(t), res.SandboxID, path.Join(folder, "inner"), strings.NewReader("x"), 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{res.WorkDir, folder} {
		_, err = s.read(t, f, res.SandboxID, dir, 1<<20)
		wantCode(t, "ReadFile of folder "+dir, err, provider.CodeIsDirectory)
	}
	err = f.WriteFile(s.ctx(t), res.SandboxID, folder, strings.NewReader("x"), 1<<20)
	wantCode(t, "WriteFile over a folder", err, provider.CodeIsDirectory)
	if got, err := s.read(t, f, res.SandboxID, path.Join(folder, "inner"), 1<<20); err != nil || string(got) != "x" {
		t.Errorf("a refused write over a folder changed what it holds: %q, %v", got, err)
	}
}

// testFilesLimits: a file over the limit is refused both ways, with no more
// than the limit sent, and a refused upload leaves the old file.
func (s *suite) testFilesLimits(t *testing.T) {
	t.Parallel()
	_, f, res := s.filesSandbox(t)
	file := path.Join(res.WorkDir, "limited")
	if err := f.WriteFile(s.ctx(t), res.SandboxID, file, strings.NewReader("previous"), 1<<20); err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	err := f.WriteFile(s.ctx(t), res.SandboxID, file, bytes.NewReader(binary(limit+1)), limit)
	wantCode(t, "WriteFile of limit+1 bytes", err, provider.CodePayloadTooLarge)
	if got, err := s.read(t, f, res.SandboxID, file, 1<<20); err != nil || string(got) != "previous" {
		t.Errorf("after a refused upload the file holds %d bytes (%v), want the previous content", len(got), err)
	}
	big := path.Join(res.WorkDir, "big")
	if err := f.WriteFile(s.ctx(t), res.SandboxID, big, bytes.NewReader(binary(10*limit)), 10*limit); err != nil {
		t.Fatal(err)
	}
	got, err := s.read(t, f, res.SandboxID, big, limit)
	wantCode(t, "ReadFile of a file over the limit", err, provider.CodePayloadTooLarge)
	if len(got) > limit {
		t.Errorf("ReadFile over the limit sent %d bytes, more than the %d-byte limit", len(got), limit)
	}
}

func (s *suite) testFilesUnknown(t *testing.T) {
	t.Parallel()
	p, f, res := s.filesSandbox(t)
	for _, id := range []string{provider.NewSandboxID(), res.SandboxID} {
		if id == res.SandboxID {
			if err := p.Destroy(s.ctx(t), id); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.read(t, f, id, path.Join(res.WorkDir, "x"), 1<<20)
		wantCode(t, "ReadFile in a sandbox the provider does not hold", err, provider.CodeProviderUnavailable)
		err = f.WriteFile(s.ctx(t), id, path.Join(res.WorkDir, "x"), strings.NewReader("x"), 1<<20)
		wantCode(t, "WriteFile in a sandbox the provider does not hold", err, provider.CodeProviderUnavailable)
	}
}

// tarOf returns a tar archive of files (name → content), folders implied.
func tarOf(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Now(), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// untar returns the regular files of a tar archive, by name without a
// leading "./".
func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ReadArchive's archive is not a whole tar archive: %v", err)
		}
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(hdr.Name, "./")] = data
		}
	}
}

func (s *suite) testArchives(t *testing.T) {
	skipWithout[provider.Archives](t, s, "Archives")
	t.Parallel()
	p, _ := s.open(t)
	a := capability[provider.Archives](t, p, "Archives")
	res := s.create(t, p, provider.CreateSpec{})
	dir := path.Join(res.WorkDir, "tree")
	files := map[string][]byte{"a.txt": []byte("alpha\n"), "sub/b.bin": binary(70_000), "sub/deeper/c": {}}
	archive := tarOf(t, files)
	if err := a.WriteArchive(s.ctx(t), res.SandboxID, dir, bytes.NewReader(archive), int64(len(archive))); err != nil {
		t.Fatalf("WriteArchive of exactly the limit into a folder that does not exist yet: %v", err)
	}
	s.wantTree(t, a, res.SandboxID, dir, files)

	big := tarOf(t, map[string][]byte{"refused.bin": binary(20_000)})
	err := a.WriteArchive(s.ctx(t), res.SandboxID, dir, bytes.NewReader(big), int64(len(big))-1)
	wantCode(t, "WriteArchive over the limit", err, provider.CodePayloadTooLarge)
	err = a.WriteArchive(s.ctx(t), res.SandboxID, dir, strings.NewReader(strings.Repeat("not a tar archive ", 100)), 1<<20)
	wantCode(t, "WriteArchive of something that is not a tar archive", err, provider.CodeInvalidRequest)
	s.wantTree(t, a, res.SandboxID, dir, files) // nothing of either was left

	var w bytes.Buffer
	err = a.ReadArchive(s.ctx(t), res.SandboxID, path.Join(res.WorkDir, "missing"), &w)
	wantCode(t, "ReadArchive of a missing folder", err, provider.CodeFileNotFound)
	err = a.ReadArchive(s.ctx(t), provider.NewSandboxID(), dir, &w)
	wantCode(t, "ReadArchive in a sandbox the provider never made", err, provider.CodeProviderUnavailable)
	err = a.WriteArchive(s.ctx(t), provider.NewSandboxID(), dir, bytes.NewReader(archive), 1<<20)
	wantCode(t, "WriteArchive in a sandbox the provider never made", err, provider.CodeProviderUnavailable)
}

// wantTree checks that the folder's archive holds exactly files.
func (s *suite) wantTree(t *testing.T, a provider.Archives, id, dir string, files map[string][]byte) {
	t.Helper()
	var w bytes.Buffer
	if err := a.ReadArchive(s.ctx(t), id, dir, &w); err != nil {
		t.Fatalf("ReadArchive: %v", err)
	}
	got := untar(t, w.Bytes())
	if len(got) != len(files) {
		t.Errorf("the folder holds %d files, want %d: %v", len(got), len(files), keys(got))
	}
	for name, want := range files {
		if !bytes.Equal(got[name], want) {
			t.Errorf("%s: %d bytes after the round trip, want %d (equal %v)", name, len(got[name]), len(want), bytes.Equal(got[name], want))
		}
	}
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
