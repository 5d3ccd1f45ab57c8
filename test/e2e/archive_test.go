package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// tarOf builds a tar archive of the files (name → content).
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// archive sends a raw archive request and returns the status and body.
func (e *env) archive(method, id, path string, body []byte) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.replica.URL()+"/v1/sandboxes/"+id+"/archive?path="+url.QueryEscape(path), bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func problemCode(b []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// TestArchiveRoundTrip: a folder goes in and comes out as one tar archive,
// with the file routes' errors, and a refused archive changes nothing.
func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	e := setup(t, "MAX_FILE_BYTES=262144")
	id := e.createReady(map[string]any{"provider": "local"})
	files := map[string]string{"main.py": "print('hi')\n", "pkg/util.py": "X = 1\n", "pkg/data/empty.txt": ""}
	for i := range 100 {
		files["many/f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+".txt"] = strings.Repeat("y", i)
	}
	if code, body := e.archive(http.MethodPut, id, "/workspace/proj", tarOf(t, files)); code != http.StatusNoContent {
		t.Fatalf("PUT archive = %d %s", code, body)
	}
	if code, res := e.exec(id, `cat /workspace/proj/pkg/util.py; ls -A /workspace/proj`); code != http.StatusOK || res["output"] != "X = 1\nmain.py\nmany\npkg\n" {
		t.Errorf("the sandbox sees %d %v", code, res)
	}
	code, body := e.archive(http.MethodGet, id, "/workspace/proj", nil)
	if code != http.StatusOK {
		t.Fatalf("GET archive = %d %s", code, body)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			got[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
	}
	if len(got) != len(files) {
		t.Errorf("the archive holds %d files, want %d", len(got), len(files))
	}
	for name, content := range files {
		if got[name] != content {
			t.Errorf("%s = %q, want %q", name, got[name], content)
		}
	}

	// Refused: too large, not a tar, outside the writable areas; the
	// folder is as it was, with no staging left behind.
	big := tarOf(t, map[string]string{"main.py": strings.Repeat("z", 300000)})
	for _, tc := range []struct {
		path string
		body []byte
		code int
		want string
	}{
		{"/workspace/proj", big, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"},
		{"/workspace/proj", []byte("not a tar archive at all, but long enough to be read as one......"), http.StatusBadRequest, "INVALID_REQUEST"},
		{"/etc", tarOf(t, files), http.StatusBadRequest, "INVALID_PATH"},
		{"/workspace/proj/main.py", tarOf(t, files), http.StatusBadRequest, "INVALID_PATH"},
	} {
		if code, body := e.archive(http.MethodPut, id, tc.path, tc.body); code != tc.code || problemCode(body) != tc.want {
			t.Errorf("PUT archive %s = %d %s, want %d %s", tc.path, code, body, tc.code, tc.want)
		}
	}
	if code, res := e.exec(id, `cat /workspace/proj/main.py; ls -A /workspace/proj`); code != http.StatusOK || res["output"] != "print('hi')\nmain.py\nmany\npkg\n" {
		t.Errorf("after refused archives the folder holds %v", res)
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/workspace/missing", http.StatusNotFound, "FILE_NOT_FOUND"},
		{"/workspace/proj/main.py", http.StatusBadRequest, "INVALID_PATH"},
		{"/workspace/closed", http.StatusForbidden, "PERMISSION_DENIED"},
	} {
		e.exec(id, `mkdir -p /workspace/closed && chmod 000 /workspace/closed`)
		if code, body := e.archive(http.MethodGet, id, tc.path, nil); code != tc.code || problemCode(body) != tc.want {
			t.Errorf("GET archive %s = %d %s, want %d %s", tc.path, code, body, tc.code, tc.want)
		}
	}
}

// TestSparseArchiveIsCut: a folder holding a 1 TiB sparse file downloads as
// an archive cut at MAX_FILE_BYTES (sparse files count at their full
// size): the response ends broken, soon, and the activity records
// PAYLOAD_TOO_LARGE, not INTERNAL.
func TestSparseArchiveIsCut(t *testing.T) {
	t.Parallel()
	const limit = 8 << 20
	e := setup(t, "MAX_FILE_BYTES=8388608")
	id := e.createReady(map[string]any{"provider": "local"})
	if code, res := e.exec(id, "mkdir -p /workspace/sparse && truncate -s 1T /workspace/sparse/huge && echo small > /workspace/sparse/a"); code != http.StatusOK || res["exit_code"] != 0.0 {
		t.Fatalf("make the sparse file = %d %v", code, res)
	}
	req, err := http.NewRequest(http.MethodGet, e.replica.URL()+"/v1/sandboxes/"+id+"/archive?path=/workspace/sparse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, rerr := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	took := time.Since(began)
	if rerr == nil {
		t.Errorf("the cut archive read as whole (%d bytes, status %d); want a broken response", n, resp.StatusCode)
	}
	if n > limit {
		t.Errorf("%d bytes streamed; want at most the %d-byte limit", n, limit)
	}
	if took > 20*time.Second {
		t.Errorf("the cut took %s", took)
	}
	code, act := e.do(http.MethodGet, "/v1/sandboxes/"+id+"/activity", nil)
	items, _ := act["items"].([]any)
	if code != http.StatusOK || len(items) == 0 {
		t.Fatalf("activity = %d %v", code, act)
	}
	last := items[len(items)-1].(map[string]any)
	if last["kind"] != "archive_read" || last["error"] != "PAYLOAD_TOO_LARGE" {
		t.Errorf("the archive's record = %v; want archive_read with PAYLOAD_TOO_LARGE", last)
	}
}
